"""What ``fedvote ledger show / verify / set-budget`` read and write.

* :func:`ledger_report` — per federation: its budgets and their history, its runs (its
  charges grouped by the run that made them), every charge, the ε spent at each level, its
  record count and the federations it shares records with.
* :func:`verify_ledger` — every violation found by recomputing each spend from the stored
  events, record by record: the records held by the same set of federations spent the
  composition of all those federations' charges, which must stay within each of their
  budgets (``docs/privacy.md``, "Ledger").
* :func:`integrity_report` — for a damaged file: SQLite's ``PRAGMA integrity_check`` and
  what still reads (each table, each federation).
* :func:`set_budget` — the one way to change a budget: an appended row, refused below what
  the federation's records have already spent.

Reads the file through :mod:`fedvote.privacy.ledger_store`; composes with
:func:`~fedvote.privacy.events.compose_events` (what ``compose_releases`` does).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sqlite3
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from dp_accounting import dp_event

from fedvote.errors import ConfigError
from fedvote.privacy.accountant import epsilon_bound
from fedvote.privacy.events import LEVELS, LevelEvents, compose_events
from fedvote.privacy.ledger_store import (
    TABLES,
    Budget,
    append_budget,
    charges_in_force,
    connect,
    damaged,
    federation_keys,
    integrity_lines,
    level_events,
    reading,
    record_hashes_since,
    stored_budgets,
)
from fedvote.results import finite_or_none

# δ and accountant of the spend shown at a level without a budget (the run defaults).
DEFAULT_DELTA = 1e-3
DEFAULT_ACCOUNTANT = "pld"


def federations(db: sqlite3.Connection) -> list[str]:
    """Every federation key with a record, a budget or stored record hashes, sorted."""
    return federation_keys(db)


def _composed(releases: Iterable[LevelEvents], level: str) -> dp_event.DpEvent:
    return compose_events(release.at(level) for release in releases)


def _epsilon(releases: Sequence[LevelEvents], level: str, delta: float, accountant: str) -> float:
    return epsilon_bound(_composed(releases, level), delta, accountant)


# --- who shares records with whom ----------------------------------------------------------------


def overlaps(db: sqlite3.Connection) -> dict[str, dict[str, int]]:
    """Per federation with stored record hashes: every other one sharing records, and how many."""
    stored = [(key, hashes) for _, key, hashes in record_hashes_since(db, 0)]
    found: dict[str, dict[str, int]] = {key: {} for key, _ in stored}
    for i, (first, first_hashes) in enumerate(stored):
        for second, second_hashes in stored[i + 1 :]:
            shared = int(np.intersect1d(first_hashes, second_hashes, assume_unique=True).size)
            if shared:
                found[first][second] = shared
                found[second][first] = shared
    return found


def record_cells(db: sqlite3.Connection) -> list[tuple[tuple[str, ...], int]]:
    """The records grouped by the set of federations holding them: ``(federations, records)``.

    Each federation without stored hashes is its own cell (its key alone identifies it;
    records 0 = unknown), as is one with hashes whose records all lie in no cell otherwise.
    """
    stored = record_hashes_since(db, 0)
    cells: list[tuple[tuple[str, ...], int]] = []
    if stored:
        every = np.unique(np.concatenate([hashes for _, _, hashes in stored]))
        held = np.zeros((every.size, len(stored)), dtype=bool)  # (records, federations)
        for column, (_, _, hashes) in enumerate(stored):
            held[np.searchsorted(every, hashes), column] = True
        patterns, counts = np.unique(held, axis=0, return_counts=True)
        cells = [
            (tuple(stored[j][1] for j in np.flatnonzero(pattern)), int(count))
            for pattern, count in zip(patterns, counts, strict=True)
        ]
    covered = {key for members, _ in cells for key in members}
    cells += [((key,), 0) for key in federation_keys(db) if key not in covered]
    return cells


# --- show ---------------------------------------------------------------------------------------


def _budget_json(budget: Budget | None) -> dict[str, Any] | None:
    return None if budget is None else dataclasses.asdict(budget)


def _shown_at(budget: Budget | None) -> tuple[float, str]:
    return (budget.delta, budget.accountant) if budget is not None else (DEFAULT_DELTA, DEFAULT_ACCOUNTANT)


def _spent(db: sqlite3.Connection, keys: Sequence[str], level: str, budget: Budget | None) -> dict[str, Any]:
    """ε spent by the charges of ``keys`` at ``level``, at the budget's δ and accountant (else defaults)."""
    delta, accountant = _shown_at(budget)
    epsilon = _epsilon(charges_in_force(db, keys), level, delta, accountant)
    return {"epsilon": finite_or_none(epsilon), "delta": delta, "accountant": accountant}


def _charge_rows(db: sqlite3.Connection, federation: str) -> list[tuple[Any, ...]]:
    """A federation's charge rows: id, run, created, events, sensitivities, voided, session, command."""
    return db.execute(
        "SELECT id, run, created, agent_event, instance_event, agent_sensitivity, instance_sensitivity, "
        "EXISTS (SELECT 1 FROM records v WHERE v.kind = 'void' AND v.target = r.id), session, command "
        "FROM records r WHERE federation = ? AND kind = 'charge' ORDER BY id",
        (federation,),
    ).fetchall()


def _charges_json(rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    return [
        {
            "id": row[0],
            "run": row[1],
            "created": row[2],
            "voided": bool(row[7]),
            "agent_event": json.loads(row[3]),
            "instance_event": json.loads(row[4]),
        }
        for row in rows
    ]


def _started(session: str | None, label: str, created: float) -> float:
    """A run's start: its session id (Unix time), else a time label (older ledgers), else its 1st charge."""
    for text in (session, label):
        try:
            value = float(text) if text is not None else math.nan
        except ValueError:
            continue
        if math.isfinite(value):
            return value
    return float(created)


def _runs_json(rows: list[tuple[Any, ...]], budgets: dict[str, Budget]) -> list[dict[str, Any]]:
    """The charges grouped by run (session and label), in first-charge order: count, voids, ε per level.

    ``command`` is what made the run: the method recorded with it, or its label when that
    names it (``"compare pate-fl"``, ``"sweep pate-fl epsilon=1"``); None when neither does.
    """
    grouped: dict[tuple[str | None, str], list[tuple[Any, ...]]] = {}
    for row in rows:
        grouped.setdefault((row[8], str(row[1])), []).append(row)
    runs = []
    for (session, label), members in grouped.items():
        started = _started(session, label, members[0][2])
        named = label if label != session and not _is_time(label) else None
        in_force = [level_events(*row[3:7]) for row in members if not row[7]]
        epsilon = {
            level: finite_or_none(_epsilon(in_force, level, *_shown_at(budgets.get(level))))
            for level in LEVELS
        }
        runs.append(
            {
                "run": label,
                "session": session,
                "started": started,
                "command": named or members[0][9],
                "charges": len(members),
                "voided": sum(bool(row[7]) for row in members),
                "epsilon": epsilon,
            }
        )
    return runs


def _is_time(label: str) -> bool:
    try:
        return math.isfinite(float(label))
    except ValueError:
        return False


def _budget_history(db: sqlite3.Connection, federation: str) -> list[dict[str, Any]]:
    rows = db.execute(
        "SELECT id, level, epsilon, delta, accountant, created FROM budgets WHERE federation = ? ORDER BY id",
        (federation,),
    ).fetchall()
    keys = ("id", "level", "epsilon", "delta", "accountant", "created")
    return [dict(zip(keys, row, strict=True)) for row in rows]


def ledger_report(path: str | Path) -> list[dict[str, Any]]:
    """Per federation: budgets, history, runs, every charge, ε spent per level, records and overlaps.

    ``spent`` composes the federation's own charges; ``spent_with_overlaps`` (when it shares
    records) also every overlapping federation's — what a run on it is checked against.
    """
    db = connect(path, must_exist=True)
    try:
        with reading(path):
            shared = overlaps(db)
            counts = {key: int(n) for key, n in db.execute("SELECT federation, records FROM federations")}
            report = []
            for federation in federations(db):
                budgets = stored_budgets(db, [federation])
                spent = {level: _spent(db, [federation], level, budgets.get(level)) for level in LEVELS}
                rows = _charge_rows(db, federation)
                neighbours = shared.get(federation, {})
                entry: dict[str, Any] = {
                    "federation": federation,
                    "records": counts.get(federation),
                    "overlaps": [
                        {"federation": k, "shared_records": n} for k, n in sorted(neighbours.items())
                    ],
                    "budget": {level: _budget_json(budgets.get(level)) for level in LEVELS},
                    "budget_history": _budget_history(db, federation),
                    "runs": _runs_json(rows, budgets),
                    "charges": _charges_json(rows),
                    "spent": {level: spent[level]["epsilon"] for level in LEVELS},
                    "spent_at": spent,
                }
                if neighbours:
                    keys = [federation, *sorted(neighbours)]
                    entry["spent_with_overlaps"] = {
                        level: _spent(db, keys, level, budgets.get(level))["epsilon"] for level in LEVELS
                    }
                report.append(entry)
            return report
    finally:
        db.close()


# --- verify ------------------------------------------------------------------------------------


def verify_ledger(path: str | Path) -> list[str]:
    """Every violation found by recomputing each spend from the stored events.

    Runs SQLite's ``PRAGMA integrity_check`` (a damaged file is refused:
    :class:`~fedvote.privacy.ledger_store.LedgerDamaged`); checks that every event decodes,
    that every void points at a charge of the same federation (at most once), and, for the
    records held by each set of federations, that the composition of those federations'
    charges made while each of their budget rows was in force never exceeded it, at each
    level. An empty list: the ledger holds.
    """
    db = connect(path, must_exist=True)
    try:
        with reading(path):
            integrity = integrity_lines(db.execute("PRAGMA integrity_check(20)").fetchall())
            if integrity != ["ok"]:
                raise damaged(path, sqlite3.DatabaseError("; ".join(integrity)))
            problems: list[str] = []
            for federation in federations(db):
                problems += _verify_voids(db, federation)
            try:
                problems += _verify_budgets(db)
            except (ValueError, KeyError, TypeError) as error:
                problems.append(f"a stored event does not decode ({error})")
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


def _verify_budgets(db: sqlite3.Connection) -> list[str]:
    """Each budget row against the spend of its records: per cell, every holder's charges before the next row.

    A record held by federations S spent the composition of the charges of all of S; each
    budget row of each member binds it. The worst cell is reported once per budget row.
    """
    worst: dict[int, tuple[float, str]] = {}
    spends: dict[tuple[tuple[str, ...], float, str, float, str], float] = {}
    for members, count in record_cells(db):
        for federation in members:
            for level in LEVELS:
                rows = db.execute(
                    "SELECT id, epsilon, delta, accountant, created FROM budgets "
                    "WHERE federation = ? AND level = ? ORDER BY id",
                    (federation, level),
                ).fetchall()
                for position, (row_id, epsilon, delta, accountant, _) in enumerate(rows):
                    until = float(rows[position + 1][4]) if position + 1 < len(rows) else math.inf
                    key = (members, until, level, float(delta), str(accountant))
                    if key not in spends:
                        charges = charges_in_force(db, members, before=until)
                        spends[key] = _epsilon(charges, level, float(delta), str(accountant))
                    spent = spends[key]
                    if spent > epsilon and spent > worst.get(row_id, (-math.inf, ""))[0]:
                        others = [m for m in members if m != federation]
                        by = f" (its {count} records shared with {', '.join(others)})" if others else ""
                        worst[row_id] = (
                            spent,
                            f"{federation}: {level}-level ε spent {spent:.4g}{by} exceeds budget row "
                            f"{row_id} (ε = {epsilon:g} at δ = {delta:g}, {accountant})",
                        )
    return [message for _, (_, message) in sorted(worst.items())]


def integrity_report(path: str | Path) -> list[str]:
    """What still reads in a damaged ledger: SQLite's ``integrity_check``, each table, each federation.

    Opens the file read-only and never writes; every failure is a line, never an exception.
    """
    try:
        db = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as error:
        return [f"cannot open {path} read-only: {error}"]
    try:
        lines = [f"SQLite integrity_check: {_integrity_check(db)}"]
        keys: set[str] = set()
        for table in TABLES:
            try:
                # every column, so the table itself is read (not a covering index)
                rows = db.execute(f"SELECT * FROM {table}").fetchall()  # noqa: S608 - fixed names
            except sqlite3.Error as error:
                lines.append(f"table {table}: unreadable ({error})")
                continue
            keys |= {str(row[1]) for row in rows}  # each table's second column is its federation
            lines.append(f"table {table}: intact, {len(rows)} row(s) read")
        for key in sorted(keys):
            lines.append(f"federation {key}: {_federation_reads(db, key)}")
        return lines
    finally:
        db.close()


def _integrity_check(db: sqlite3.Connection) -> str:
    try:
        found = integrity_lines(db.execute("PRAGMA integrity_check(5)").fetchall())
    except sqlite3.Error as error:
        return f"fails ({error})"
    return "ok" if found == ["ok"] else "; ".join(found)


def _federation_reads(db: sqlite3.Connection, key: str) -> str:
    """Whether a federation's budgets and charges still read and decode, in words."""
    parts = []
    try:
        budgets = stored_budgets(db, [key])
        parts.append(f"budgets read ({', '.join(budgets) or 'none'})")
    except (sqlite3.Error, ValueError) as error:
        parts.append(f"budgets unreadable ({error})")
    try:
        parts.append(f"{len(charges_in_force(db, [key]))} charge(s) in force read")
    except (sqlite3.Error, ValueError, KeyError, TypeError) as error:
        parts.append(f"charges unreadable ({error})")
    return ", ".join(parts)


# --- set-budget --------------------------------------------------------------------------------


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
    budget below what the federation's records have already spent at that level (its
    charges with every overlapping federation's, as a run is checked) is refused: it
    could not hold. Returns the new budgets.
    """
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ConfigError("epsilon", f"must be a finite number > 0, got {epsilon}")
    db = connect(path, must_exist=True)
    try:
        with reading(path):
            if federation not in federations(db):
                raise ConfigError(
                    "federation", f"no federation {federation!r} in {path} (see `fedvote ledger show`)"
                )
            keys = [federation, *sorted(overlaps(db).get(federation, {}))]
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
                spent = _epsilon(charges_in_force(db, keys), level, budget.delta, budget.accountant)
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


def started_text(started: float) -> str:
    """A run's start (Unix time) as UTC, to the second: ``2026-11-28 00:07:05 UTC``."""
    return datetime.fromtimestamp(started, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def federations_in(path: str | Path) -> int:
    """How many federations the ledger at ``path`` holds."""
    db = connect(path, must_exist=True)
    try:
        with reading(path):
            return len(federations(db))
    finally:
        db.close()
