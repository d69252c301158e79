"""The ledger: every release is recorded here *before* its result leaves the method.

* :class:`PrivacyLedger` — in memory, one run.
* :class:`PersistentLedger` — the same interface, persisted in SQLite (standard library),
  append-only, with a budget per federation enforced across runs: a charge that would
  take the federation's spend above the budget raises :class:`PrivacyBudgetExceeded` and
  writes nothing, so nothing may be released. Charges are committed before ``charge``
  returns, so a crash between charge and release over-counts, never under-counts. A
  void (the release provably did not happen) is a new record pointing at the charge;
  no record is ever updated or deleted (SQLite triggers refuse both).
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attr
from dp_accounting import dp_event

from fedvote.errors import ConfigError
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import LEVELS, LevelEvents, ReplaceOneDpEvent


class PrivacyLedger:
    """In-memory, append-only record of a run's releases at both levels.

    A method calls :meth:`charge` with the events of a release before returning the
    released values; :meth:`event` composes everything charged so far for one level.
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


def compose_releases(releases: Iterable[LevelEvents], level: str) -> dp_event.DpEvent:
    """The composition of ``releases`` at ``level``, merging consecutive identical events."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    merged: list[tuple[dp_event.DpEvent, int]] = []
    for release in releases:
        event, count = _unwrap(release.at(level))
        if isinstance(event, dp_event.NoOpDpEvent):
            continue
        if merged and merged[-1][0] == event:
            merged[-1] = (event, merged[-1][1] + count)
        else:
            merged.append((event, count))
    if not merged:
        return dp_event.NoOpDpEvent()
    parts = [e if n == 1 else dp_event.SelfComposedDpEvent(e, n) for e, n in merged]
    return parts[0] if len(parts) == 1 else dp_event.ComposedDpEvent(parts)


def _unwrap(event: dp_event.DpEvent) -> tuple[dp_event.DpEvent, int]:
    """(inner event, count) for a self-composition, else (event, 1)."""
    if isinstance(event, dp_event.SelfComposedDpEvent):
        inner, count = _unwrap(event.event)
        return inner, count * event.count
    return event, 1


# --- serialisation of dp_accounting events ---------------------------------------------------


def event_to_json(event: dp_event.DpEvent) -> str:
    """A JSON text for ``event`` (any dp_accounting event made of plain fields)."""
    return json.dumps(_encode(event), sort_keys=True)


def event_from_json(text: str) -> dp_event.DpEvent:
    """The event written by :func:`event_to_json`."""
    decoded = _decode(json.loads(text))
    if not isinstance(decoded, dp_event.DpEvent):
        raise ValueError(f"not a DpEvent: {text[:80]}")
    return decoded


def _encode(value: Any) -> Any:
    if isinstance(value, dp_event.DpEvent):
        out: dict[str, Any] = {"class": type(value).__name__}
        for item in attr.fields(type(value)):
            out[item.name] = _encode(getattr(value, item.name))
        return out
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "float" in value and len(value) == 1:
            return float(value["float"])
        name = value["class"]
        cls = ReplaceOneDpEvent if name == ReplaceOneDpEvent.__name__ else getattr(dp_event, name, None)
        if not (isinstance(cls, type) and issubclass(cls, dp_event.DpEvent)):
            raise ValueError(f"unknown DpEvent class {name!r}")
        return cls(**{k: _decode(v) for k, v in value.items() if k != "class"})
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


# --- the persisted ledger -----------------------------------------------------------------------


class PrivacyBudgetExceeded(ConfigError):
    """A charge would take the federation's spend above its budget; nothing was released."""

    def __init__(self, federation: str, spent: float, would_be: float, budget: float, level: str) -> None:
        super().__init__(
            "budget_epsilon",
            f"privacy budget exceeded for federation {federation!r}: this release would bring "
            f"{level}-level ε from {spent:.4g} to {would_be:.4g}, above the budget {budget:.4g}; "
            "nothing was released",
        )
        self.federation = federation
        self.spent = spent
        self.would_be = would_be
        self.budget = budget


_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    federation TEXT NOT NULL,
    run TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('charge', 'void')),
    target INTEGER REFERENCES records(id),
    agent_event TEXT,
    instance_event TEXT,
    agent_sensitivity REAL,
    instance_sensitivity REAL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS records_federation ON records (federation);
CREATE TABLE IF NOT EXISTS budgets (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    federation TEXT NOT NULL,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    level TEXT NOT NULL,
    accountant TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TRIGGER IF NOT EXISTS records_no_update BEFORE UPDATE ON records
    BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS records_no_delete BEFORE DELETE ON records
    BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS budgets_no_update BEFORE UPDATE ON budgets
    BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS budgets_no_delete BEFORE DELETE ON budgets
    BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END;
"""


class PersistentLedger(PrivacyLedger):
    """A :class:`PrivacyLedger` persisted in SQLite, with a budget per federation.

    ``federation`` names the federation whose spend accumulates across runs (use a
    fingerprint of everything that fixes the agents' data). ``budget_epsilon`` (None: no
    limit) is enforced at ``level`` and ``delta`` with ``accountant``. :meth:`event` and
    :attr:`charges` describe *this run* (what the run reports); :meth:`total_event` and
    :meth:`spent` everything charged to the federation so far, by any run.
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
        self.budget_epsilon = budget_epsilon
        self.delta = delta
        self.level = level
        self.accountant = accountant
        self.run = run if run is not None else f"{time.time():.6f}"
        self._session: dict[int, LevelEvents] = {}
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
        except sqlite3.Error as error:
            raise ConfigError("ledger", f"cannot open {self.path}: {error}") from error
        self._db.executescript(_SCHEMA)
        if budget_epsilon is not None:
            self._db.execute(
                "INSERT INTO budgets (federation, epsilon, delta, level, accountant, created) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (federation, budget_epsilon, delta, level, accountant, time.time()),
            )

    def close(self) -> None:
        """Close the database (every charge is already committed)."""
        self._db.close()

    def __enter__(self) -> PersistentLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ----------------------------------------------------------------------------

    def _in_force(self, cursor: sqlite3.Cursor | sqlite3.Connection) -> list[LevelEvents]:
        rows = cursor.execute(
            "SELECT id, agent_event, instance_event, agent_sensitivity, instance_sensitivity "
            "FROM records WHERE federation = ? AND kind = 'charge' AND id NOT IN "
            "(SELECT target FROM records WHERE federation = ? AND kind = 'void') ORDER BY id",
            (self.federation, self.federation),
        ).fetchall()
        return [
            LevelEvents(
                agent=event_from_json(agent),
                instance=event_from_json(instance),
                agent_sensitivity=_float(agent_s),
                instance_sensitivity=_float(instance_s),
            )
            for _, agent, instance, agent_s, instance_s in rows
        ]

    @property
    def charges(self) -> tuple[LevelEvents, ...]:
        """Charges of this run still in force, in order."""
        return tuple(self._session[i] for i in sorted(self._session))

    def total_event(self, level: str) -> dp_event.DpEvent:
        """Everything charged to this federation (all runs, voids excluded) at ``level``."""
        return compose_releases(self._in_force(self._db), level)

    def spent(self, level: str | None = None) -> float:
        """The federation's ε so far at ``level`` (default: the budget's), at the budget's δ."""
        return epsilon_for(self.total_event(level or self.level), self.delta, self.accountant)

    def remaining(self) -> float:
        """Budget left (``inf`` without a budget)."""
        if self.budget_epsilon is None:
            return math.inf
        return max(0.0, self.budget_epsilon - self.spent())

    # -- writing ----------------------------------------------------------------------------

    def check(self, release: LevelEvents) -> float:
        """The federation's ε if ``release`` were charged; raises if it exceeds the budget.

        Writes nothing: use it before starting a run on its planned events.
        """
        return self._check(self._in_force(self._db), release)

    def _check(self, current: list[LevelEvents], release: LevelEvents) -> float:
        would_be = epsilon_for(compose_releases([*current, release], self.level), self.delta, self.accountant)
        if self.budget_epsilon is not None and would_be > self.budget_epsilon:
            spent = epsilon_for(compose_releases(current, self.level), self.delta, self.accountant)
            raise PrivacyBudgetExceeded(self.federation, spent, would_be, self.budget_epsilon, self.level)
        return would_be

    def charge(self, release: LevelEvents) -> int:
        """Persist ``release`` (committed before returning) and return its record id.

        Raises :class:`PrivacyBudgetExceeded`, writing nothing, if the federation's spend
        including this release would exceed the budget. The check and the insert run in
        one ``BEGIN IMMEDIATE`` transaction, so concurrent runs cannot both pass.
        """
        cursor = self._db.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        try:
            self._check(self._in_force(cursor), release)
            cursor.execute(
                "INSERT INTO records (federation, run, kind, agent_event, instance_event, "
                "agent_sensitivity, instance_sensitivity, created) VALUES (?, ?, 'charge', ?, ?, ?, ?, ?)",
                (
                    self.federation,
                    self.run,
                    event_to_json(release.agent),
                    event_to_json(release.instance),
                    _finite_or_none(release.agent_sensitivity),
                    _finite_or_none(release.instance_sensitivity),
                    time.time(),
                ),
            )
            charge_id = cursor.lastrowid
            cursor.execute("COMMIT")
        except BaseException:
            cursor.execute("ROLLBACK")
            raise
        assert charge_id is not None
        self._session[charge_id] = release
        return charge_id

    def void(self, charge_id: int) -> None:
        """Append a void of this run's charge ``charge_id`` (its release did not happen)."""
        if charge_id not in self._session:
            raise ValueError(f"charge {charge_id} is not an open charge of this run")
        self._db.execute(
            "INSERT INTO records (federation, run, kind, target, created) VALUES (?, ?, 'void', ?, ?)",
            (self.federation, self.run, charge_id, time.time()),
        )
        del self._session[charge_id]

    def history(self) -> list[dict[str, Any]]:
        """Every record of this federation, oldest first (for audit)."""
        rows = self._db.execute(
            "SELECT id, run, kind, target, agent_event, instance_event, created FROM records "
            "WHERE federation = ? ORDER BY id",
            (self.federation,),
        ).fetchall()
        keys = ("id", "run", "kind", "target", "agent_event", "instance_event", "created")
        return [dict(zip(keys, row, strict=True)) for row in rows]


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _float(value: float | None) -> float:
    return math.inf if value is None else float(value)
