"""The ledger: every release is recorded here *before* its result leaves the method.

* :class:`PrivacyLedger` — in memory, one run.
* :class:`LedgerSession` — one run's view of a ledger shared by several runs.
* :class:`PersistentLedger` — the same interface, persisted in SQLite (standard library),
  append-only, with a budget per federation and level enforced across runs: a charge
  that would take the federation's spend above a budget raises
  :class:`PrivacyBudgetExceeded` and writes nothing, so nothing may be released. The
  budget stored first binds every later run; only ``fedvote ledger set-budget`` (a new,
  logged row) changes it. Charges are committed before ``charge``
  returns, so a crash between charge and release over-counts, never under-counts. A
  void (the release provably did not happen) is a new record pointing at the charge;
  no record is ever updated or deleted (SQLite triggers refuse both). A ledger carries a
  format marker and version in its SQLite header (:data:`LEDGER_APPLICATION_ID`,
  :data:`LEDGER_FORMAT_VERSION`); anything else given as a ledger (a text file, another
  application's database, a newer format) is refused and left byte for byte as it was.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import attr
from dp_accounting import dp_event

from fedvote.errors import ConfigError
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.discrete import DiscreteGaussianDpEvent
from fedvote.privacy.events import LEVELS, LevelEvents, ReplaceOneDpEvent, compose_events
from fedvote.privacy.gnss import SmoothSensitivityGaussianDpEvent
from fedvote.results import finite_or_none


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
    """The composition of ``releases`` at ``level`` by dp-accounting's ``DpEventBuilder``.

    No-ops are dropped and consecutive identical events merged into one
    ``SelfComposedDpEvent(e, n)`` (:func:`~fedvote.privacy.events.compose_events`).
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    return compose_events(release.at(level) for release in releases)


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


# fedvote's own event classes, by the name event_to_json writes.
_FEDVOTE_EVENTS: dict[str, type] = {
    cls.__name__: cls for cls in (ReplaceOneDpEvent, DiscreteGaussianDpEvent, SmoothSensitivityGaussianDpEvent)
}


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "float" in value and len(value) == 1:
            return float(value["float"])
        name = value["class"]
        cls = _FEDVOTE_EVENTS.get(name) or getattr(dp_event, name, None)
        if not (isinstance(cls, type) and issubclass(cls, dp_event.DpEvent)):
            raise ValueError(f"unknown DpEvent class {name!r}")
        return cls(**{k: _decode(v) for k, v in value.items() if k != "class"})
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


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


@dataclass(frozen=True)
class Budget:
    """A federation's ε cap at one level, enforced at its own δ with its own accountant."""

    epsilon: float
    delta: float
    accountant: str


class PrivacyBudgetExceeded(ConfigError):
    """A charge would take the federation's spend above its budget; nothing was released."""

    def __init__(
        self,
        federation: str,
        spent: float,
        would_be: float,
        budget: float,
        level: str,
        what: str = "this release",
    ) -> None:
        super().__init__(
            "budget_epsilon",
            f"privacy budget exceeded for federation {federation!r}: {what} would bring "
            f"{level}-level ε from {spent:.4g} to {would_be:.4g}, above the budget {budget:.4g}; "
            "nothing was released",
        )
        self.federation = federation
        self.spent = spent
        self.would_be = would_be
        self.budget = budget
        self.level = level


# The schema, one statement each (run inside one transaction with the format marker).
_SCHEMA: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS records (
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
)""",
    "CREATE INDEX IF NOT EXISTS records_federation ON records (federation)",
    """CREATE TABLE IF NOT EXISTS budgets (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    federation TEXT NOT NULL,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    level TEXT NOT NULL,
    accountant TEXT NOT NULL,
    created REAL NOT NULL
)""",
    *(
        f"CREATE TRIGGER IF NOT EXISTS {table}_no_{action} BEFORE {action.upper()} ON {table} "
        "BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END"
        for table in ("records", "budgets")
        for action in ("update", "delete")
    ),
)

# The ledger's format marker, in the SQLite header: ``PRAGMA application_id`` (the bytes
# "FVLG") and ``PRAGMA user_version`` (the format version). A file that is not an SQLite
# database, another application's database, or a ledger of a newer format is refused and
# left as it is. A ledger written before the marker existed (fedvote's two tables and
# nothing else, no application id) is accepted and marked.
LEDGER_APPLICATION_ID = 0x46564C47  # "FVLG"
LEDGER_FORMAT_VERSION = 1
_SQLITE_MAGIC = b"SQLite format 3\x00"
_COLUMNS = {
    "records": {
        "id", "federation", "run", "kind", "target", "agent_event", "instance_event",
        "agent_sensitivity", "instance_sensitivity", "created",
    },
    "budgets": {"id", "federation", "epsilon", "delta", "level", "accountant", "created"},
}  # fmt: skip
_NOT_A_LEDGER = "give a new file name or an existing fedvote ledger"


def connect(path: str | Path, *, must_exist: bool = False) -> sqlite3.Connection:
    """An autocommit connection to the ledger at ``path`` with its schema (one-line errors).

    ``must_exist`` refuses a missing file instead of creating an empty ledger (for
    ``fedvote ledger show``/``verify``/``set-budget``, where a typo must not pass as empty).
    Anything but a fedvote ledger of this format or older (or a new, empty file) is refused
    before a byte of it is written (:data:`LEDGER_APPLICATION_ID`): a text file, another
    application's SQLite database, a ledger of a newer format (its version named).
    """
    file = Path(path)
    _check_sqlite_header(file)  # first: a path the system cannot look up (a name too long) is one line
    if must_exist and not file.is_file():
        raise ConfigError("ledger", f"no ledger at {path}")
    try:
        db = sqlite3.connect(file, isolation_level=None, timeout=30.0)
    except sqlite3.Error as error:
        raise ConfigError("ledger", f"cannot open {path}: {error}") from error
    try:
        if _ledger_state(db, path) != "marked":  # read only, so far: a foreign file stays as it is
            db.execute("BEGIN IMMEDIATE")
            try:
                if _ledger_state(db, path) != "marked":  # another process may have marked it since
                    for statement in _SCHEMA:
                        db.execute(statement)
                    db.execute(f"PRAGMA application_id = {LEDGER_APPLICATION_ID}")
                    db.execute(f"PRAGMA user_version = {LEDGER_FORMAT_VERSION}")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
    except sqlite3.DatabaseError as error:
        db.close()
        raise ConfigError("ledger", f"{path} is not a fedvote ledger ({error}); {_NOT_A_LEDGER}") from error
    except BaseException:
        db.close()
        raise
    return db


def _check_sqlite_header(file: Path) -> None:
    """Refuse, without opening it as a database, a non-empty file that is not SQLite."""
    try:
        with file.open("rb") as handle:
            head = handle.read(len(_SQLITE_MAGIC))
    except FileNotFoundError:
        return
    except OSError as error:
        raise ConfigError("ledger", f"cannot read {file}: {error.strerror or error}") from error
    if head and head != _SQLITE_MAGIC:
        raise ConfigError(
            "ledger", f"{file} is not a fedvote ledger (not an SQLite database); {_NOT_A_LEDGER}"
        )


def _ledger_state(db: sqlite3.Connection, path: str | Path) -> str:
    """``"marked"`` (a ledger of this format), ``"unmarked"`` (new and empty, or an older fedvote ledger).

    Raises :class:`ConfigError` for anything else; reads only.
    """
    application_id = int(db.execute("PRAGMA application_id").fetchone()[0])
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    tables = {
        str(row[0])
        for row in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    }
    if application_id == LEDGER_APPLICATION_ID:
        if version > LEDGER_FORMAT_VERSION:
            raise ConfigError(
                "ledger",
                f"{path} is a fedvote ledger of format version {version}, newer than this fedvote "
                f"reads (version {LEDGER_FORMAT_VERSION}); upgrade fedvote to use it",
            )
        if version < 1 or not set(_COLUMNS) <= tables:
            raise ConfigError(
                "ledger",
                f"{path} carries fedvote's ledger mark but is damaged (format version {version}, "
                f"tables {', '.join(sorted(tables)) or 'none'})",
            )
        return "marked"
    if application_id != 0:
        raise ConfigError(
            "ledger",
            f"{path} is not a fedvote ledger (an SQLite database of another application, id "
            f"{application_id:#010x}); it was left as it is; {_NOT_A_LEDGER}",
        )
    if not tables and version == 0:
        return "unmarked"  # new
    columns = {
        table: {str(row[1]) for row in db.execute(f"PRAGMA table_info({table})")} for table in _COLUMNS
    }
    if version == 0 and tables == set(_COLUMNS) and columns == _COLUMNS:
        return "unmarked"  # written by a fedvote from before the marker
    held = f"table(s) {', '.join(sorted(tables))}" if tables else f"user_version {version}"
    raise ConfigError(
        "ledger",
        f"{path} is an SQLite database but not a fedvote ledger (it holds {held}); "
        f"it was left as it is; {_NOT_A_LEDGER}",
    )


def stored_budgets(db: sqlite3.Connection, keys: Sequence[str]) -> dict[str, Budget]:
    """The budget in force per level for the first of ``keys`` that has one.

    The latest row of a (federation, level) is in force (``set-budget`` appends, never
    updates). ``keys`` is the federation's content key, then its legacy keys: a budget
    stored under an old config fingerprint still binds the same federation.
    """
    found: dict[str, Budget] = {}
    for level in LEVELS:
        for key in keys:
            row = db.execute(
                "SELECT epsilon, delta, accountant FROM budgets WHERE federation = ? AND level = ? "
                "ORDER BY id DESC LIMIT 1",
                (key, level),
            ).fetchone()
            if row is not None:
                found[level] = Budget(float(row[0]), float(row[1]), str(row[2]))
                break
    return found


def append_budget(db: sqlite3.Connection, federation: str, level: str, budget: Budget) -> None:
    """Append a budget row (the new one in force for ``federation`` at ``level``)."""
    db.execute(
        "INSERT INTO budgets (federation, epsilon, delta, level, accountant, created) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (federation, budget.epsilon, budget.delta, level, budget.accountant, time.time()),
    )


def charges_in_force(db: sqlite3.Connection | sqlite3.Cursor, keys: Sequence[str]) -> list[LevelEvents]:
    """Every charge of the federation (any of ``keys``) not voided, oldest first."""
    marks = ", ".join("?" for _ in keys)
    rows = db.execute(
        "SELECT id, agent_event, instance_event, agent_sensitivity, instance_sensitivity "
        f"FROM records WHERE federation IN ({marks}) AND kind = 'charge' AND id NOT IN "
        f"(SELECT target FROM records WHERE federation IN ({marks}) AND kind = 'void') ORDER BY id",
        (*keys, *keys),
    ).fetchall()
    return [_level_events(*row[1:]) for row in rows]


def _level_events(agent: str, instance: str, agent_s: float | None, instance_s: float | None) -> LevelEvents:
    return LevelEvents(
        agent=event_from_json(agent),
        instance=event_from_json(instance),
        agent_sensitivity=_float(agent_s),
        instance_sensitivity=_float(instance_s),
    )


class PersistentLedger(PrivacyLedger):
    """A :class:`PrivacyLedger` persisted in SQLite, with a budget per federation and level.

    ``federation`` names the federation whose spend accumulates across runs: the content
    key of its agents' records (:func:`fedvote.runner.federation_content_key`);
    ``aliases`` are older keys of the same federation (its legacy config fingerprint),
    whose charges and budgets count too.

    **The stored budget binds.** The first ``budget_epsilon`` given for a federation is
    stored as its agent-level budget; every later run is bound by the stored budgets
    whether or not it gives one, and a run giving a *different* ``budget_epsilon`` is
    refused (raise or lower it with ``fedvote ledger set-budget``, an appended, logged
    row). An instance-level budget, set with ``set-budget``, binds the instance level the
    same way. Each budget is enforced at its own δ and accountant, whatever the run's.

    :meth:`event` and :attr:`charges` describe *this run* (what the run reports);
    :meth:`total_event` and :meth:`spent` everything charged to the federation so far.
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
        self._session: dict[int, LevelEvents] = {}
        self._db = connect(self.path)
        try:
            self.budgets = self._bind_budget(budget_epsilon)
        except BaseException:
            self._db.close()
            raise

    def _bind_budget(self, given: float | None) -> dict[str, Budget]:
        """The budgets in force; stores ``given`` as the agent budget of a new federation."""
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

    @property
    def budget_epsilon(self) -> float | None:
        """The agent-level budget in force (None: none)."""
        budget = self.budgets.get("agent")
        return budget.epsilon if budget is not None else None

    def close(self) -> None:
        """Close the database (every charge is already committed)."""
        self._db.close()

    def __enter__(self) -> PersistentLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ----------------------------------------------------------------------------

    def _in_force(self, cursor: sqlite3.Cursor | sqlite3.Connection) -> list[LevelEvents]:
        return charges_in_force(cursor, self.keys)

    @property
    def charges(self) -> tuple[LevelEvents, ...]:
        """Charges of this run still in force, in order."""
        return tuple(self._session[i] for i in sorted(self._session))

    def total_event(self, level: str) -> dp_event.DpEvent:
        """Everything charged to this federation (all runs, voids excluded) at ``level``."""
        return compose_releases(self._in_force(self._db), level)

    def _delta_accountant(self, level: str) -> tuple[float, str]:
        budget = self.budgets.get(level)
        return (budget.delta, budget.accountant) if budget is not None else (self.delta, self.accountant)

    def spent(self, level: str | None = None) -> float:
        """The federation's ε so far at ``level`` (default: this ledger's), at its budget's δ."""
        chosen = level or self.level
        return epsilon_for(self.total_event(chosen), *self._delta_accountant(chosen))

    def remaining(self, level: str | None = None) -> float:
        """Budget left at ``level`` (default: this ledger's; ``inf`` without a budget there)."""
        chosen = level or self.level
        budget = self.budgets.get(chosen)
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
        return self._check(self._in_force(self._db), list(releases), what)

    def _check(self, current: list[LevelEvents], releases: list[LevelEvents], what: str) -> float:
        for level, budget in self.budgets.items():
            planned = compose_releases([*current, *releases], level)
            would_be = epsilon_for(planned, budget.delta, budget.accountant)
            if would_be > budget.epsilon:
                spent = epsilon_for(compose_releases(current, level), budget.delta, budget.accountant)
                raise PrivacyBudgetExceeded(self.federation, spent, would_be, budget.epsilon, level, what)
        total = compose_releases([*current, *releases], self.level)
        return epsilon_for(total, *self._delta_accountant(self.level))

    def charge(self, release: LevelEvents, run: str | None = None) -> int:
        """Persist ``release`` (committed before returning) and return its record id.

        Raises :class:`PrivacyBudgetExceeded`, writing nothing, if the federation's spend
        including this release would exceed a budget. The check and the insert run in one
        ``BEGIN IMMEDIATE`` transaction, so concurrent runs cannot both pass. ``run``
        labels the record (default: this ledger's run).
        """
        cursor = self._db.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        try:
            self._check(self._in_force(cursor), [release], "this release")
            cursor.execute(
                "INSERT INTO records (federation, run, kind, agent_event, instance_event, "
                "agent_sensitivity, instance_sensitivity, created) VALUES (?, ?, 'charge', ?, ?, ?, ?, ?)",
                (
                    self.federation,
                    run if run is not None else self.run,
                    event_to_json(release.agent),
                    event_to_json(release.instance),
                    finite_or_none(release.agent_sensitivity),
                    finite_or_none(release.instance_sensitivity),
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
        """Every record of this federation (all its keys), oldest first (for audit)."""
        marks = ", ".join("?" for _ in self.keys)
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


def _float(value: float | None) -> float:
    return math.inf if value is None else float(value)


# --- audit: what `fedvote ledger show / verify / set-budget` read and write ------------------

# δ and accountant of the spend shown at a level without a budget (the run defaults).
DEFAULT_DELTA = 1e-3
DEFAULT_ACCOUNTANT = "pld"


def federations(db: sqlite3.Connection) -> list[str]:
    """Every federation key with a record or a budget, sorted."""
    rows = db.execute("SELECT federation FROM records UNION SELECT federation FROM budgets").fetchall()
    return sorted(str(row[0]) for row in rows)


def _budget_json(budget: Budget | None) -> dict[str, Any] | None:
    return None if budget is None else dataclasses.asdict(budget)


def _spent(db: sqlite3.Connection, federation: str, level: str, budget: Budget | None) -> dict[str, Any]:
    """ε spent by ``federation`` at ``level``, at its budget's δ and accountant (else the defaults)."""
    delta = budget.delta if budget is not None else DEFAULT_DELTA
    accountant = budget.accountant if budget is not None else DEFAULT_ACCOUNTANT
    epsilon = epsilon_for(compose_releases(charges_in_force(db, [federation]), level), delta, accountant)
    return {"epsilon": finite_or_none(epsilon), "delta": delta, "accountant": accountant}


def _charges_json(db: sqlite3.Connection, federation: str) -> list[dict[str, Any]]:
    rows = db.execute(
        "SELECT id, run, created, agent_event, instance_event, "
        "EXISTS (SELECT 1 FROM records v WHERE v.kind = 'void' AND v.target = r.id) "
        "FROM records r WHERE federation = ? AND kind = 'charge' ORDER BY id",
        (federation,),
    ).fetchall()
    return [
        {
            "id": charge_id,
            "run": run,
            "created": created,
            "voided": bool(voided),
            "agent_event": json.loads(agent),
            "instance_event": json.loads(instance),
        }
        for charge_id, run, created, agent, instance, voided in rows
    ]


def _budget_history(db: sqlite3.Connection, federation: str) -> list[dict[str, Any]]:
    rows = db.execute(
        "SELECT id, level, epsilon, delta, accountant, created FROM budgets WHERE federation = ? ORDER BY id",
        (federation,),
    ).fetchall()
    keys = ("id", "level", "epsilon", "delta", "accountant", "created")
    return [dict(zip(keys, row, strict=True)) for row in rows]


def ledger_report(path: str | Path) -> list[dict[str, Any]]:
    """Per federation: the budget in force per level, its history, every charge, ε spent per level."""
    db = connect(path, must_exist=True)
    try:
        report = []
        for federation in federations(db):
            budgets = stored_budgets(db, [federation])
            spent = {level: _spent(db, federation, level, budgets.get(level)) for level in LEVELS}
            report.append(
                {
                    "federation": federation,
                    "budget": {level: _budget_json(budgets.get(level)) for level in LEVELS},
                    "budget_history": _budget_history(db, federation),
                    "charges": _charges_json(db, federation),
                    "spent": {level: spent[level]["epsilon"] for level in LEVELS},
                    "spent_at": spent,
                }
            )
        return report
    finally:
        db.close()


def verify_ledger(path: str | Path) -> list[str]:
    """Every violation found by recomputing each federation's spend from its stored events.

    Checks that every event decodes, that every void points at a charge of the same
    federation (at most once), and that the spend of the charges made while each budget
    row was in force never exceeded it, at each level. An empty list: the ledger holds.
    """
    db = connect(path, must_exist=True)
    try:
        problems: list[str] = []
        for federation in federations(db):
            problems += _verify_voids(db, federation)
            try:
                problems += _verify_budgets(db, federation)
            except (ValueError, KeyError, TypeError) as error:
                problems.append(f"{federation}: a stored event does not decode ({error})")
        return problems
    finally:
        db.close()


def _verify_voids(db: sqlite3.Connection, federation: str) -> list[str]:
    rows = db.execute(
        "SELECT v.id, v.target, t.kind, t.federation FROM records v "
        "LEFT JOIN records t ON t.id = v.target WHERE v.federation = ? AND v.kind = 'void'",
        (federation,),
    ).fetchall()
    problems = [
        f"{federation}: void {void_id} points at record {target}, not a charge of this federation"
        for void_id, target, kind, owner in rows
        if kind != "charge" or owner != federation
    ]
    targets = [target for _, target, _, _ in rows]
    twice = sorted(t for t in set(targets) if targets.count(t) > 1)
    problems += [f"{federation}: charge {t} is voided more than once" for t in twice]
    return problems


def _verify_budgets(db: sqlite3.Connection, federation: str) -> list[str]:
    """Each budget row against the spend of the charges made before the next row of its level."""
    problems = []
    for level in LEVELS:
        rows = db.execute(
            "SELECT id, epsilon, delta, accountant, created FROM budgets WHERE federation = ? AND level = ? "
            "ORDER BY id",
            (federation, level),
        ).fetchall()
        for position, (row_id, epsilon, delta, accountant, _) in enumerate(rows):
            until = rows[position + 1][4] if position + 1 < len(rows) else math.inf
            charges = [
                _level_events(*row[1:])
                for row in db.execute(
                    "SELECT id, agent_event, instance_event, agent_sensitivity, instance_sensitivity "
                    "FROM records r WHERE federation = ? AND kind = 'charge' AND created < ? AND NOT EXISTS "
                    "(SELECT 1 FROM records v WHERE v.kind = 'void' AND v.target = r.id) ORDER BY id",
                    (federation, until if math.isfinite(until) else 1e300),
                ).fetchall()
            ]
            spent = epsilon_for(compose_releases(charges, level), delta, accountant)
            if spent > epsilon:
                problems.append(
                    f"{federation}: {level}-level ε spent {spent:.4g} exceeds budget row {row_id} "
                    f"(ε = {epsilon:g} at δ = {delta:g}, {accountant})"
                )
    return problems


def set_budget(
    path: str | Path,
    federation: str,
    epsilon: float,
    levels: Sequence[str] = LEVELS,
    delta: float | None = None,
    accountant: str | None = None,
) -> dict[str, Budget]:
    """Append a budget row per level of ``levels`` for a federation already in the ledger.

    δ and the accountant default to the level's current budget's (else 1e-3, pld). A
    budget below what the federation has already spent at that level is refused: it
    could not hold. Returns the new budgets.
    """
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ConfigError("epsilon", f"must be a finite number > 0, got {epsilon}")
    db = connect(path, must_exist=True)
    try:
        if federation not in federations(db):
            raise ConfigError(
                "federation", f"no federation {federation!r} in {path} (see `fedvote ledger show`)"
            )
        current = stored_budgets(db, [federation])
        new: dict[str, Budget] = {}
        for level in levels:
            old = current.get(level)
            budget = Budget(
                epsilon,
                delta if delta is not None else (old.delta if old else DEFAULT_DELTA),
                accountant if accountant is not None else (old.accountant if old else DEFAULT_ACCOUNTANT),
            )
            if not 0.0 < budget.delta < 1.0:
                raise ConfigError("delta", f"must lie in (0, 1), got {budget.delta}")
            spent = epsilon_for(
                compose_releases(charges_in_force(db, [federation]), level), budget.delta, budget.accountant
            )
            if spent > epsilon:
                raise ConfigError(
                    "epsilon",
                    f"federation {federation!r} has already spent {level}-level ε = {spent:.4g} "
                    f"at δ = {budget.delta:g}; a budget of {epsilon:g} could not hold",
                )
            new[level] = budget
        for level, budget in new.items():
            append_budget(db, federation, level, budget)
        return new
    finally:
        db.close()
