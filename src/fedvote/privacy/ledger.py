"""The ledger: every release is recorded here *before* its result leaves the method.

* :class:`PrivacyLedger` — in memory, one run.
* :class:`LedgerSession` — one run's view of a ledger shared by several runs.
* :class:`PersistentLedger` — the same interface, persisted in SQLite (standard library),
  append-only, with a budget per federation and level enforced across runs: a charge
  that would take the spend of the federation's records above a budget raises
  :class:`PrivacyBudgetExceeded` and writes nothing, so nothing may be released. The
  budget stored first binds every later run; only ``fedvote ledger set-budget`` (a new,
  logged row) changes it. **Budgets bind by record**: a run is checked against the
  composition of every charge of every stored federation that shares a record with it
  (its records identified by a 64-bit hash of their features), under every budget of
  those federations. Charges are committed before ``charge`` returns, so a crash between
  charge and release over-counts, never under-counts; an interrupt at any step leaves a
  charge whole or absent. A void (the release provably did not happen) is a new record
  pointing at the charge; no record is ever updated or deleted.

The file itself (format, schema, migration, damage, the safe transaction) is
:mod:`fedvote.privacy.ledger_store`; ``fedvote ledger show / verify / set-budget`` read it
through :mod:`fedvote.privacy.ledger_audit`. The names of theirs that callers read from here
(``ledger_report``, ``verify_ledger``, ``set_budget``, ``DEFAULT_DELTA``, ``connect``, an event's
JSON form, the file's format constants) are importable from here too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np
from dp_accounting import dp_event

from fedvote.data.record_hashes import overlap_count
from fedvote.errors import ConfigError
from fedvote.privacy.accountant import epsilon_bound
from fedvote.privacy.events import LEVELS, LevelEvents, compose_events
from fedvote.privacy.ledger_audit import (
    DEFAULT_DELTA,
    ledger_report,
    set_budget,
    verify_ledger,
)
from fedvote.privacy.ledger_store import (
    LEDGER_APPLICATION_ID,
    LEDGER_FORMAT_VERSION,
    Budget,
    append_budget,
    charges_in_force,
    connect,
    event_from_json,
    event_to_json,
    has_record_hashes,
    has_rows,
    insert_charge,
    reading,
    record_hashes_since,
    store_record_hashes,
    stored_budgets,
    stored_record_hashes,
    transaction,
)

__all__ = [
    "DEFAULT_DELTA",
    "LEDGER_APPLICATION_ID",
    "LEDGER_FORMAT_VERSION",
    "LedgerSession",
    "PersistentLedger",
    "PrivacyBudgetExceeded",
    "PrivacyLedger",
    "compose_releases",
    "connect",
    "event_from_json",
    "event_to_json",
    "ledger_report",
    "set_budget",
    "verify_ledger",
]


class PrivacyLedger:
    """In-memory, append-only record of a run's releases at both levels.

    A method calls :meth:`charge` with the events of a release before returning the
    released values; :meth:`event` composes everything charged so far for one level.

    Every ledger is a context manager (``with open_ledger(...) as ledger:``, see
    :func:`fedvote.privacy.run_ledger.open_ledger`): leaving the block calls :meth:`close`, which
    closes a persisted ledger's file and does nothing for one in memory or a session.
    """

    def __init__(self) -> None:
        self._entries: list[LevelEvents | None] = []

    def charge(self, release: LevelEvents) -> int:
        """Record ``release`` before its values are used; returns the charge's id."""
        self._entries.append(release)
        return len(self._entries) - 1

    def void(self, charge_id: int) -> None:
        """Cancel a charge whose release provably did not happen (too few responders)."""
        self._entries[charge_id] = None

    @property
    def charges(self) -> tuple[LevelEvents, ...]:
        """Every charge still in force, in order."""
        return tuple(e for e in self._entries if e is not None)

    def event(self, level: str) -> dp_event.DpEvent:
        """The composition of all releases at ``level`` ("agent" or "instance").

        Consecutive identical events are merged into one self-composition so that
        accountants see ``SelfComposedDpEvent(e, n)`` instead of n copies.
        """
        return compose_releases(self.charges, level)

    def sensitivity(self, level: str) -> float | None:
        """The largest L2 sensitivity charged at ``level`` (None if nothing was charged)."""
        values = [r.sensitivity(level) for r in self.charges]
        return max(values) if values else None

    def close(self) -> None:
        """Release what the ledger holds open: nothing in memory (a persisted ledger closes its file)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def compose_releases(releases: Iterable[LevelEvents], level: str) -> dp_event.DpEvent:
    """The composition of ``releases`` at ``level`` by dp-accounting's ``DpEventBuilder``.

    No-ops are dropped and consecutive identical events merged into one
    ``SelfComposedDpEvent(e, n)`` (:func:`~fedvote.privacy.events.compose_events`).
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    return compose_events(release.at(level) for release in releases)


# --- one run's view of a shared ledger ----------------------------------------------------------


class LedgerSession(PrivacyLedger):
    """One run's view of a ledger shared by several runs (a compare's rows, a sweep's points).

    :meth:`charge` and :meth:`void` go through to ``parent`` (so a persisted parent
    checks its budget and commits before the release); :attr:`charges`, :meth:`event` and
    :meth:`sensitivity` describe this run alone, so each row reports its own ε while the
    parent's :meth:`~PrivacyLedger.event` composes every run's charges.
    """

    def __init__(self, parent: PrivacyLedger, run: str | None = None) -> None:
        super().__init__()
        self.parent = parent
        self.run = run
        self._parent_ids: dict[int, int] = {}

    def charge(self, release: LevelEvents) -> int:
        """Charge ``release`` to the parent first (it may refuse), then record it here."""
        if isinstance(self.parent, PersistentLedger):
            parent_id = self.parent.charge(release, run=self.run)
        else:
            parent_id = self.parent.charge(release)
        local_id = super().charge(release)
        self._parent_ids[local_id] = parent_id
        return local_id

    def void(self, charge_id: int) -> None:
        """Void this run's charge ``charge_id`` in the parent and here."""
        self.parent.void(self._parent_ids.pop(charge_id))
        super().void(charge_id)


# --- the persisted ledger -----------------------------------------------------------------------


class PrivacyBudgetExceeded(ConfigError):
    """A charge would take the spend of a federation's records above a budget; nothing was released.

    ``federation`` is the federation whose budget would be exceeded; ``context`` says
    which federations' charges the spend composes when they are more than that one.
    """

    def __init__(
        self,
        federation: str,
        spent: float,
        would_be: float,
        budget: float,
        level: str,
        what: str = "this release",
        context: str = "",
    ) -> None:
        super().__init__(
            "budget_epsilon",
            f"privacy budget exceeded for federation {federation!r}{context}: {what} would bring "
            f"{level}-level ε from {spent:.4g} to {would_be:.4g}, above the budget {budget:.4g}; "
            "nothing was released",
        )
        self.federation = federation
        self.spent = spent
        self.would_be = would_be
        self.budget = budget
        self.level = level


class PersistentLedger(PrivacyLedger):
    """A :class:`PrivacyLedger` persisted in SQLite, with a budget per federation and level.

    ``federation`` names the federation whose charges are recorded: the content key of its
    agents' records (:func:`fedvote.privacy.run_ledger.federation_content_key`); ``aliases`` are older
    keys of the same federation (its legacy config fingerprint), whose charges and budgets
    count too. ``records`` are the sorted distinct 64-bit hashes of its agents' records
    (:func:`fedvote.data.record_hashes.sorted_hashes_of`), stored with the federation.

    **Budgets bind by record.** Every stored federation that shares a record with this one
    *overlaps* it. A charge is admitted only if the composition of every charge in force
    of this federation and of every overlapping one, with the new release, stays within
    every budget in force of all of them (so the smallest binds), each at its own δ and
    accountant. Proof that this bounds every record's spend: ``docs/privacy.md``,
    "Ledger". Without ``records`` (a federation stored before record hashes, a Flower
    server file from before them) the key alone matches, unless hashes were stored for
    the key before, which then serve.

    **The stored budget binds.** The first ``budget_epsilon`` given for a federation is
    stored as its agent-level budget; every later run is bound by the stored budgets
    whether or not it gives one, and a run giving a *different* ``budget_epsilon`` is
    refused (raise or lower it with ``fedvote ledger set-budget``, an appended, logged
    row). An instance-level budget, set with ``set-budget``, binds the instance level the
    same way.

    :meth:`event` and :attr:`charges` describe *this run* (what the run reports);
    :meth:`total_event` and :meth:`spent` everything charged to its records so far (its
    own federation's charges and every overlapping federation's). ``command`` (the method
    name) and the ledger's ``run`` id are recorded with each charge, for ``fedvote ledger
    show`` to group charges by run.
    """

    def __init__(
        self,
        path: str | Path,
        federation: str,
        budget_epsilon: float | None = None,
        delta: float = 1e-3,
        level: str = "agent",
        accountant: str = "pld",
        run: str | None = None,
        aliases: Sequence[str] = (),
        records: np.ndarray | None = None,
        command: str | None = None,
    ) -> None:
        super().__init__()
        if budget_epsilon is not None and not budget_epsilon > 0:
            raise ConfigError("budget_epsilon", f"must be > 0, got {budget_epsilon}")
        if not 0.0 < delta < 1.0:
            raise ConfigError("delta", f"must lie in (0, 1), got {delta}")
        if level not in LEVELS:
            raise ConfigError("level", f"must be one of {', '.join(LEVELS)}, got {level!r}")
        self.path = Path(path)
        self.federation = federation
        self.keys = (federation, *[a for a in aliases if a != federation])
        self.delta = delta
        self.level = level
        self.accountant = accountant
        self.run = run if run is not None else f"{time.time():.6f}"
        self.command = command
        self.records = None if records is None else np.unique(np.asarray(records, dtype=np.uint64))
        # Overlapping federations: key → records shared; refreshed from the rows stored since.
        self.overlaps: dict[str, int] = {}
        self._hashes_seen = 0
        self._session: dict[int, LevelEvents] = {}
        self._db = connect(self.path)
        try:
            with reading(self.path):
                self._store_records()
                self._refresh_overlaps()
                self.budgets = self._bind_budget(budget_epsilon)
        except BaseException:
            self._db.close()
            raise

    def _store_records(self) -> None:
        """Store this federation's record hashes (and its aliases' that hold rows) if not yet stored.

        A federation stored before record hashes (an older ledger) gets them the first time a
        run on it opens with its records; an alias (legacy key) with charges or a budget gets
        the same hashes, so that overlapping federations count its charges too. Without
        ``records``, hashes stored earlier for this key serve.
        """
        if self.records is None:
            self.records = stored_record_hashes(self._db, self.federation)
            return
        missing = [
            key
            for key in self.keys
            if not has_record_hashes(self._db, key) and (key == self.federation or has_rows(self._db, key))
        ]
        if missing:
            with transaction(self._db):
                for key in missing:
                    store_record_hashes(self._db, key, self.records)

    def _refresh_overlaps(self) -> None:
        """Add every federation stored since the last look that shares a record with this one."""
        for row_id, key, hashes in record_hashes_since(self._db, self._hashes_seen):
            self._hashes_seen = row_id
            if key in self.keys or self.records is None:
                continue
            shared = overlap_count(self.records, hashes)
            if shared:
                self.overlaps[key] = shared

    @property
    def bound_keys(self) -> tuple[str, ...]:
        """The keys whose charges bind a run: this federation's, then every overlapping one's."""
        return (*self.keys, *self.overlaps)

    def _bind_budget(self, given: float | None) -> dict[str, Budget]:
        """The federation's own budgets in force; stores ``given`` as the agent budget of a new one."""
        budgets = stored_budgets(self._db, self.keys)
        stored = budgets.get("agent")
        if given is not None and stored is None:
            stored = Budget(given, self.delta, self.accountant)
            append_budget(self._db, self.federation, "agent", stored)
            budgets["agent"] = stored
        elif given is not None and stored is not None and not _same(given, stored.epsilon):
            raise ConfigError(
                "budget_epsilon",
                f"{self.path} holds agent-level budget ε = {stored.epsilon:g} for federation "
                f"{self.federation!r}, not {given:g}; a run cannot change it: use `fedvote ledger "
                f"set-budget {self.path} --federation {self.federation} --epsilon E`",
            )
        return budgets

    def binding_budgets(self) -> list[tuple[str, str, Budget]]:
        """``(federation, level, budget)`` of every budget that binds a run here, own ones first."""
        found = [
            (self.federation, level, budget) for level, budget in stored_budgets(self._db, self.keys).items()
        ]
        for key in self.overlaps:
            found += [(key, level, budget) for level, budget in stored_budgets(self._db, [key]).items()]
        return found

    def effective_budgets(self) -> dict[str, Budget]:
        """Per level, the smallest budget that binds (own or an overlapping federation's)."""
        smallest: dict[str, Budget] = {}
        with reading(self.path):
            for _, level, budget in self.binding_budgets():
                if level not in smallest or budget.epsilon < smallest[level].epsilon:
                    smallest[level] = budget
        return smallest

    @property
    def budget_epsilon(self) -> float | None:
        """The agent-level budget that binds (the smallest; None: none)."""
        budget = self.effective_budgets().get("agent")
        return budget.epsilon if budget is not None else None

    def close(self) -> None:
        """Close the database (every charge is already committed)."""
        self._db.close()

    # -- reading ----------------------------------------------------------------------------

    def _in_force(self) -> list[LevelEvents]:
        """Every charge in force of this federation and every overlapping one (overlaps refreshed)."""
        self._refresh_overlaps()
        return charges_in_force(self._db, self.bound_keys)

    @property
    def charges(self) -> tuple[LevelEvents, ...]:
        """Charges of this run still in force, in order."""
        return tuple(self._session[i] for i in sorted(self._session))

    def total_event(self, level: str) -> dp_event.DpEvent:
        """Everything charged to the federation's records (its charges, overlapping ones') at ``level``."""
        with reading(self.path):
            return compose_releases(self._in_force(), level)

    def _delta_accountant(self, level: str) -> tuple[float, str]:
        budget = self.effective_budgets().get(level)
        return (budget.delta, budget.accountant) if budget is not None else (self.delta, self.accountant)

    def spent(self, level: str | None = None) -> float:
        """ε spent so far by the federation's records at ``level`` (default: the ledger's), at its δ."""
        chosen = level or self.level
        return epsilon_bound(self.total_event(chosen), *self._delta_accountant(chosen))

    def remaining(self, level: str | None = None) -> float:
        """Budget left at ``level`` (default: this ledger's; ``inf`` without a budget there)."""
        chosen = level or self.level
        budget = self.effective_budgets().get(chosen)
        if budget is None:
            return math.inf
        return max(0.0, budget.epsilon - self.spent(chosen))

    # -- writing ----------------------------------------------------------------------------

    def check(self, release: LevelEvents) -> float:
        """The federation's ε at this ledger's level if ``release`` were charged.

        Raises :class:`PrivacyBudgetExceeded` if it would exceed a budget at any level.
        Writes nothing: use it before starting a run on its planned events.
        """
        return self.check_all([release])

    def check_all(self, releases: Sequence[LevelEvents], what: str = "this release") -> float:
        """As :meth:`check` for several releases at once (a compare's rows, a sweep's points).

        Refuses, before the first of them, a plan whose sum would overrun a budget.
        """
        with reading(self.path):
            return self._check(list(releases), what)

    def _check(self, releases: list[LevelEvents], what: str) -> float:
        """Refuse ``releases`` if, with every charge on this federation's records, they overrun a budget."""
        current = self._in_force()
        would: dict[tuple[str, float, str], float] = {}
        for owner, level, budget in self.binding_budgets():
            key = (level, budget.delta, budget.accountant)
            if key not in would:
                would[key] = epsilon_bound(
                    compose_releases([*current, *releases], level), budget.delta, budget.accountant
                )
            if would[key] > budget.epsilon:
                spent = epsilon_bound(compose_releases(current, level), budget.delta, budget.accountant)
                raise PrivacyBudgetExceeded(
                    owner, spent, would[key], budget.epsilon, level, what, self._context(owner)
                )
        total = compose_releases([*current, *releases], self.level)
        return epsilon_bound(total, *self._delta_accountant(self.level))

    def _context(self, owner: str) -> str:
        """What a refusal's spend composes, when more than ``owner``'s own charges."""
        if owner != self.federation:
            return (
                f" (it shares {self.overlaps.get(owner, 0)} records with this run's federation "
                f"{self.federation!r}; ε composes the charges of every federation sharing them)"
            )
        if self.overlaps:
            shared = ", ".join(f"{key!r} ({count} records)" for key, count in self.overlaps.items())
            return f" (ε composes the charges of the federations sharing its records: {shared})"
        return ""

    def charge(self, release: LevelEvents, run: str | None = None) -> int:
        """Persist ``release`` (committed before returning) and return its record id.

        Raises :class:`PrivacyBudgetExceeded`, writing nothing, if the spend of the
        federation's records including this release would exceed a budget. The check and
        the insert run in one ``BEGIN IMMEDIATE`` transaction, so concurrent runs cannot
        both pass, and an interrupt at any step leaves the charge whole or absent
        (:func:`~fedvote.privacy.ledger_store.transaction`): this run's view holds it
        exactly when the ledger does. ``run`` labels the record (default: this ledger's run).
        """
        charge_id: int | None = None
        try:
            with reading(self.path), transaction(self._db):
                self._check([release], "this release")
                # a session's label (a compare's row, a sweep's point) names what made it
                label, command = (self.run, self.command) if run is None or run == self.run else (run, None)
                charge_id = insert_charge(self._db, self.federation, label, release, self.run, command)
                self._session[charge_id] = release  # before COMMIT: an interrupt after it keeps both
        except BaseException:
            if charge_id is not None and not self._stored(charge_id):
                self._session.pop(charge_id, None)  # rolled back: this run's view drops it too
            raise
        assert charge_id is not None
        return charge_id

    def _stored(self, charge_id: int) -> bool:
        """Whether charge ``charge_id`` is in the file (after an interrupted transaction)."""
        try:
            return self._db.execute("SELECT 1 FROM records WHERE id = ?", (charge_id,)).fetchone() is not None
        except Exception:  # noqa: BLE001 - unreadable: keep it in this run's view (over-counts, never under)
            return True

    def void(self, charge_id: int) -> None:
        """Append a void of this run's charge ``charge_id`` (its release did not happen)."""
        if charge_id not in self._session:
            raise ValueError(f"charge {charge_id} is not an open charge of this run")
        with reading(self.path):
            self._db.execute(
                "INSERT INTO records (federation, run, kind, target, created) VALUES (?, ?, 'void', ?, ?)",
                (self.federation, self.run, charge_id, time.time()),
            )
        del self._session[charge_id]

    def history(self) -> list[dict[str, Any]]:
        """Every record of this federation (all its keys), oldest first (for audit)."""
        marks = ", ".join("?" for _ in self.keys)
        with reading(self.path):
            rows = self._db.execute(
                "SELECT id, run, kind, target, agent_event, instance_event, created FROM records "
                f"WHERE federation IN ({marks}) ORDER BY id",
                self.keys,
            ).fetchall()
        keys = ("id", "run", "kind", "target", "agent_event", "instance_event", "created")
        return [dict(zip(keys, row, strict=True)) for row in rows]


def _same(a: float, b: float) -> bool:
    """Whether two budgets are the same ε (a stored float read back may differ in the last bit)."""
    return math.isclose(a, b, rel_tol=1e-12)
