"""The ledger's SQLite file: its format, schema, migration, rows and the one safe transaction.

What :class:`~fedvote.privacy.ledger.PersistentLedger` and the audit commands
(:mod:`fedvote.privacy.ledger_audit`) read and write, and nothing about budgets' logic:

* **Format.** A ledger carries a marker and version in its SQLite header
  (:data:`LEDGER_APPLICATION_ID`, :data:`LEDGER_FORMAT_VERSION`); anything else given as a
  ledger (a text file, another application's database, a newer format) is refused and
  left byte for byte as it was. Version 1 ledgers (and unmarked ones from before the
  marker) are migrated to version 2 in one transaction when opened: the ``federations``
  table is added, nothing else changes.
* **Append-only.** Triggers refuse every UPDATE and DELETE on every table.
* **Records.** Version 2 stores, per federation, the sorted distinct 64-bit hashes of its
  agents' records (:mod:`fedvote.data.record_hashes`, features only) as one BLOB, so that a
  budget binds every federation that shares a record (``docs/privacy.md``, "Ledger").
  These hashes permit membership tests on the records: the file is as sensitive as the
  records' identities.
* **Damage.** A file SQLite cannot read (a page overwritten) is refused in one line naming
  it (:func:`damaged`), never a ``sqlite3.DatabaseError`` traceback.
* **Interrupts.** :func:`transaction` commits as its last step and rolls back only a
  transaction still active, so Ctrl-C at any point leaves a write either whole or absent.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import stat
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import attr
import numpy as np
from dp_accounting import dp_event

from fedvote.errors import ConfigError
from fedvote.privacy.discrete import DiscreteGaussianDpEvent
from fedvote.privacy.events import LEVELS, LevelEvents, ReplaceOneDpEvent
from fedvote.privacy.gnss import SmoothSensitivityGaussianDpEvent
from fedvote.results import finite_or_none


@dataclass(frozen=True)
class Budget:
    """A federation's ε cap at one level, enforced at its own δ with its own accountant."""

    epsilon: float
    delta: float
    accountant: str


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
    cls.__name__: cls
    for cls in (ReplaceOneDpEvent, DiscreteGaussianDpEvent, SmoothSensitivityGaussianDpEvent)
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


# --- the format -------------------------------------------------------------------------------

# Version 1: records and budgets. Version 2 adds federations (each one's record hashes).
_SCHEMA_V1: tuple[str, ...] = (
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
)
_SCHEMA_V2: tuple[str, ...] = (
    # One row per federation key whose records are known: ``hashes`` is the sorted distinct
    # uint64 record hashes, little-endian, 8 bytes each; ``records`` their count.
    """CREATE TABLE IF NOT EXISTS federations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    federation TEXT NOT NULL UNIQUE,
    records INTEGER NOT NULL,
    hashes BLOB NOT NULL,
    created REAL NOT NULL
)""",
)
# Version 2 also adds two columns to records: ``session`` (the id of the ledger opening that
# charged it: one command's run, compare or sweep) and ``command`` (the method that made it),
# so that ``fedvote ledger show`` groups charges by run. NULL in rows of older versions.
_RECORDS_V2_COLUMNS: tuple[tuple[str, str], ...] = (("session", "TEXT"), ("command", "TEXT"))
_TRIGGERS: tuple[str, ...] = tuple(
    f"CREATE TRIGGER IF NOT EXISTS {table}_no_{action} BEFORE {action.upper()} ON {table} "
    "BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END"
    for table in ("records", "budgets", "federations")
    for action in ("update", "delete")
)

# The ledger's format marker, in the SQLite header: ``PRAGMA application_id`` (the bytes
# "FVLG") and ``PRAGMA user_version`` (the format version). A ledger written before the
# marker existed (fedvote's two tables and nothing else, no application id) is accepted,
# migrated and marked.
LEDGER_APPLICATION_ID = 0x46564C47  # "FVLG"
LEDGER_FORMAT_VERSION = 2
_SQLITE_MAGIC = b"SQLite format 3\x00"
# The tables every version has (and exactly the columns of the unmarked ledgers).
_COLUMNS = {
    "records": {
        "id", "federation", "run", "kind", "target", "agent_event", "instance_event",
        "agent_sensitivity", "instance_sensitivity", "created",
    },
    "budgets": {"id", "federation", "epsilon", "delta", "level", "accountant", "created"},
}  # fmt: skip
TABLES = ("records", "budgets", "federations")
_NOT_A_LEDGER = "give a new file name or an existing fedvote ledger"


class LedgerDamaged(ConfigError):
    """The ledger file is damaged: SQLite cannot read (some of) it. Names ``--ledger``."""


def damaged(path: str | Path, error: BaseException) -> LedgerDamaged:
    """The one-line refusal of a ledger SQLite cannot read (a page overwritten, a truncated file)."""
    return LedgerDamaged(
        "ledger",
        f"{path} is damaged: SQLite cannot read it ({error}); nothing was charged or written; "
        f"`fedvote ledger verify {path}` says what still reads; restore the file from a copy",
    )


def is_damage(error: BaseException) -> bool:
    """Whether ``error`` is SQLite finding the file unreadable (not a lock, a constraint, a bug)."""
    if not isinstance(error, sqlite3.DatabaseError):
        return False
    name = getattr(error, "sqlite_errorname", "")
    if name in {"SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_IOERR_SHORT_READ"} or name.startswith(
        "SQLITE_CORRUPT"
    ):
        return True
    return type(error) is sqlite3.DatabaseError and "malformed" in str(error)


@contextmanager
def reading(path: str | Path) -> Iterator[None]:
    """Turn SQLite's damage errors inside the block into the one-line :func:`damaged` refusal."""
    try:
        yield
    except sqlite3.DatabaseError as error:
        if is_damage(error):
            raise damaged(path, error) from error
        raise


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    """One ``BEGIN IMMEDIATE`` transaction, whole or absent whatever interrupts it.

    The COMMIT is the block's last step; on any exception (a ``KeyboardInterrupt``
    included) the transaction is rolled back only while it is still active
    (``connection.in_transaction``): an interrupt that lands after the COMMIT returned
    leaves the committed write and never asks SQLite to roll back what is not there
    ("cannot rollback - no transaction is active", issue 47, defect 3).
    """
    try:
        db.execute("BEGIN IMMEDIATE")
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def connect(path: str | Path, *, must_exist: bool = False) -> sqlite3.Connection:
    """An autocommit connection to the ledger at ``path`` in this format (one-line errors).

    ``must_exist`` refuses a missing file instead of creating an empty ledger (for
    ``fedvote ledger show``/``verify``/``set-budget``, where a typo must not pass as empty).
    Anything but a fedvote ledger of this format or older (or a new, empty file) is refused
    before a byte of it is written: a text file, another application's SQLite database, a
    ledger of a newer format (its version named). An older ledger is migrated
    (:data:`LEDGER_FORMAT_VERSION`); a damaged one is refused (:func:`damaged`) after
    SQLite's ``PRAGMA quick_check``.
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
        with reading(path):
            state = _ledger_state(db, path)  # read only, so far: a foreign file stays as it is
            check_intact(db, path)  # before any write: a damaged file is left as it is
            if state != "current":
                with transaction(db):
                    if _ledger_state(db, path) != "current":  # another process may have done it since
                        _create_or_migrate(db)
                        db.execute(f"PRAGMA application_id = {LEDGER_APPLICATION_ID}")
                        db.execute(f"PRAGMA user_version = {LEDGER_FORMAT_VERSION}")
    except ConfigError:
        db.close()
        raise
    except sqlite3.DatabaseError as error:
        db.close()
        raise ConfigError("ledger", f"{path} is not a fedvote ledger ({error}); {_NOT_A_LEDGER}") from error
    except BaseException:
        db.close()
        raise
    return db


def probe(path: str | Path) -> None:
    """Refuse (:class:`ConfigError` naming ``ledger``) a path no run could charge to; cheap, leaves nothing.

    Made before a run loads its data or fits anything, so that a bad ``--ledger`` costs no
    time (the ledger itself is opened, by :func:`connect`, only once the federation's records
    are known). A path that does not exist yet needs a parent that is a directory in which a
    file can be created: a probe file is created there and removed. An existing path must be
    a regular file that is empty (a new ledger) or a fedvote ledger SQLite reads: it is opened
    read-only and checked as :func:`connect` checks it (the header, the format mark and tables,
    ``PRAGMA quick_check``), and nothing in it is changed. Whether SQLite can write beside it
    (its journal) is asked of the system. What only the real opening can tell (a lock held by
    another run) is left to it.
    """
    file = Path(path)
    try:
        found = file.stat()
    except FileNotFoundError:
        _probe_new(file)
        return
    except NotADirectoryError:
        raise ConfigError("ledger", f"{file.parent} is not a directory; give a path in a directory") from None
    except OSError as error:
        raise ConfigError("ledger", f"cannot look up {file}: {error.strerror or error}") from error
    if stat.S_ISDIR(found.st_mode):
        raise ConfigError("ledger", f"{file} is a directory; give a file name, e.g. {file / 'ledger.db'}")
    if not stat.S_ISREG(found.st_mode):
        raise ConfigError("ledger", f"{file} is not a regular file; {_NOT_A_LEDGER}")
    if found.st_size:
        _check_sqlite_header(file)
        _probe_read_only(file)
    for place, what in ((file, f"{file} is read-only"), (file.parent, f"cannot write in {file.parent}")):
        if not os.access(place, os.W_OK):
            raise ConfigError("ledger", f"{what}: every release is charged to the ledger before it happens")


def _probe_new(file: Path) -> None:
    """Refuse a new ledger's path whose directory is missing, not a directory, or refuses a new file."""
    parent = file.parent
    try:
        if not stat.S_ISDIR(parent.stat().st_mode):
            raise ConfigError("ledger", f"{parent} is not a directory; give a path in a directory")
    except FileNotFoundError:
        raise ConfigError(
            "ledger", f"the directory {parent} does not exist; create it or give a ledger path in another one"
        ) from None
    except OSError as error:
        raise ConfigError("ledger", f"cannot look up {parent}: {error.strerror or error}") from error
    probe_file = parent / f".fedvote-ledger-probe-{os.urandom(6).hex()}"
    try:
        os.close(os.open(probe_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as error:
        raise ConfigError(
            "ledger", f"cannot create the ledger {file}: {error.strerror or error} (in {parent})"
        ) from error
    finally:
        probe_file.unlink(missing_ok=True)


def _probe_read_only(file: Path) -> None:
    """Check an existing, non-empty file as :func:`connect` does, opened read-only (nothing written)."""
    try:
        db = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error as error:
        raise ConfigError("ledger", f"cannot open {file}: {error}") from error
    try:
        with reading(file):
            _ledger_state(db, file)
            check_intact(db, file)
    except sqlite3.OperationalError:
        pass  # locked, busy, a journal to roll back (damage is refused by reading): the real opening decides
    except sqlite3.DatabaseError as error:
        raise ConfigError("ledger", f"{file} is not a fedvote ledger ({error}); {_NOT_A_LEDGER}") from error
    finally:
        db.close()


def _create_or_migrate(db: sqlite3.Connection) -> None:
    """Bring a new, unmarked or version-1 ledger to this format (inside the caller's transaction)."""
    for statement in (*_SCHEMA_V1, *_SCHEMA_V2):
        db.execute(statement)
    columns = {str(row[1]) for row in db.execute("PRAGMA table_info(records)")}
    for name, kind in _RECORDS_V2_COLUMNS:
        if name not in columns:
            db.execute(f"ALTER TABLE records ADD COLUMN {name} {kind}")
    for statement in _TRIGGERS:
        db.execute(statement)


def check_intact(db: sqlite3.Connection, path: str | Path) -> None:
    """Refuse (:func:`damaged`) a ledger whose pages SQLite's ``PRAGMA quick_check`` finds broken."""
    try:
        rows = db.execute("PRAGMA quick_check(1)").fetchall()
    except sqlite3.DatabaseError as error:
        raise damaged(path, error) from error
    found = integrity_lines(rows)
    if found != ["ok"]:
        raise damaged(path, sqlite3.DatabaseError("; ".join(found) or "quick_check failed"))


def integrity_lines(rows: list[Any]) -> list[str]:
    """The findings of ``PRAGMA quick_check``/``integrity_check`` rows, one per line, headers dropped."""
    lines = [line.strip() for row in rows for line in str(row[0]).splitlines()]
    return [line for line in lines if line and not line.startswith("***")]


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
    """``"current"`` (this format), ``"older"`` (new and empty, an older fedvote ledger: to migrate).

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
        if version < 1 or not set(_COLUMNS) <= tables or (version >= 2 and "federations" not in tables):
            raise ConfigError(
                "ledger",
                f"{path} carries fedvote's ledger mark but is damaged (format version {version}, "
                f"tables {', '.join(sorted(tables)) or 'none'})",
            )
        return "current" if version == LEDGER_FORMAT_VERSION else "older"
    if application_id != 0:
        raise ConfigError(
            "ledger",
            f"{path} is not a fedvote ledger (an SQLite database of another application, id "
            f"{application_id:#010x}); it was left as it is; {_NOT_A_LEDGER}",
        )
    if not tables and version == 0:
        return "older"  # new
    columns = {
        table: {str(row[1]) for row in db.execute(f"PRAGMA table_info({table})")} for table in _COLUMNS
    }
    if version == 0 and tables == set(_COLUMNS) and columns == _COLUMNS:
        return "older"  # written by a fedvote from before the marker
    held = f"table(s) {', '.join(sorted(tables))}" if tables else f"user_version {version}"
    raise ConfigError(
        "ledger",
        f"{path} is an SQLite database but not a fedvote ledger (it holds {held}); "
        f"it was left as it is; {_NOT_A_LEDGER}",
    )


# --- rows --------------------------------------------------------------------------------------


def federation_keys(db: sqlite3.Connection) -> list[str]:
    """Every federation key with a record, a budget or stored record hashes, sorted."""
    rows = db.execute(
        "SELECT federation FROM records UNION SELECT federation FROM budgets "
        "UNION SELECT federation FROM federations"
    ).fetchall()
    return sorted(str(row[0]) for row in rows)


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


def insert_charge(
    db: sqlite3.Connection,
    federation: str,
    run: str,
    release: LevelEvents,
    session: str | None = None,
    command: str | None = None,
) -> int:
    """Append a charge row of ``release``; returns its id (the caller holds the transaction).

    ``run`` labels it (a compare's row, a sweep's point, else the session), ``session`` is
    the ledger opening that charged it, ``command`` the method that made it.
    """
    cursor = db.execute(
        "INSERT INTO records (federation, run, kind, agent_event, instance_event, agent_sensitivity, "
        "instance_sensitivity, created, session, command) VALUES (?, ?, 'charge', ?, ?, ?, ?, ?, ?, ?)",
        (
            federation,
            run,
            event_to_json(release.agent),
            event_to_json(release.instance),
            finite_or_none(release.agent_sensitivity),
            finite_or_none(release.instance_sensitivity),
            time.time(),
            session,
            command,
        ),
    )
    charge_id = cursor.lastrowid
    assert charge_id is not None
    return int(charge_id)


def charges_in_force(
    db: sqlite3.Connection | sqlite3.Cursor, keys: Sequence[str], before: float = math.inf
) -> list[LevelEvents]:
    """Every charge of the federations ``keys`` not voided (made before ``before``), oldest first."""
    marks = ", ".join("?" for _ in keys)
    rows = db.execute(
        "SELECT id, agent_event, instance_event, agent_sensitivity, instance_sensitivity "
        f"FROM records WHERE federation IN ({marks}) AND kind = 'charge' AND created < ? AND id NOT IN "
        f"(SELECT target FROM records WHERE federation IN ({marks}) AND kind = 'void') ORDER BY id",
        (*keys, before if math.isfinite(before) else 1e300, *keys),
    ).fetchall()
    return [level_events(*row[1:]) for row in rows]


def level_events(agent: str, instance: str, agent_s: float | None, instance_s: float | None) -> LevelEvents:
    """A stored charge's events at both levels (None sensitivities read back as ∞)."""
    return LevelEvents(
        agent=event_from_json(agent),
        instance=event_from_json(instance),
        agent_sensitivity=math.inf if agent_s is None else float(agent_s),
        instance_sensitivity=math.inf if instance_s is None else float(instance_s),
    )


# --- record hashes ---------------------------------------------------------------------------


def hashes_to_blob(hashes: np.ndarray) -> bytes:
    """The stored form of a sorted distinct uint64 hash array: 8 little-endian bytes each."""
    return np.asarray(hashes, dtype="<u8").tobytes()


def hashes_from_blob(blob: bytes) -> np.ndarray:
    """The sorted uint64 hash array stored by :func:`hashes_to_blob`."""
    return np.frombuffer(blob, dtype="<u8").astype(np.uint64)


def store_record_hashes(db: sqlite3.Connection, federation: str, hashes: np.ndarray) -> bool:
    """Store ``federation``'s record hashes unless it has some already; whether it stored them.

    Append-only: the first hashes stored for a key stay (the key is a hash of the records,
    so the same key cannot hold other records).
    """
    cursor = db.execute(
        "INSERT OR IGNORE INTO federations (federation, records, hashes, created) VALUES (?, ?, ?, ?)",
        (federation, int(hashes.size), hashes_to_blob(hashes), time.time()),
    )
    return cursor.rowcount == 1


def has_record_hashes(db: sqlite3.Connection, federation: str) -> bool:
    """Whether ``federation`` has stored record hashes."""
    return stored_record_hashes(db, federation) is not None


def stored_record_hashes(db: sqlite3.Connection, federation: str) -> np.ndarray | None:
    """The record hashes stored for ``federation`` (None: none stored)."""
    row = db.execute("SELECT hashes FROM federations WHERE federation = ?", (federation,)).fetchone()
    return None if row is None else hashes_from_blob(row[0])


def has_rows(db: sqlite3.Connection, federation: str) -> bool:
    """Whether ``federation`` has a record (charge or void) or a budget row."""
    return (
        db.execute(
            "SELECT 1 FROM records WHERE federation = ? UNION SELECT 1 FROM budgets WHERE federation = ?",
            (federation, federation),
        ).fetchone()
        is not None
    )


def record_hashes_since(db: sqlite3.Connection, after: int) -> list[tuple[int, str, np.ndarray]]:
    """``(row id, federation, hashes)`` of every federation whose hashes were stored after row ``after``."""
    rows = db.execute(
        "SELECT id, federation, hashes FROM federations WHERE id > ? ORDER BY id", (after,)
    ).fetchall()
    return [(int(row_id), str(key), hashes_from_blob(blob)) for row_id, key, blob in rows]
