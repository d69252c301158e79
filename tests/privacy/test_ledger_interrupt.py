"""Issue 47, defect 3: Ctrl-C during a charge leaves it whole or absent, and no sqlite error escapes.

``timeout -s INT 8 fedvote run --method dp-fedavg --ledger x.db`` could end in
``sqlite3.OperationalError: cannot rollback - no transaction is active``: the handler
rolled back after the COMMIT had succeeded. Here a ``KeyboardInterrupt`` is raised at every
step of a charge — before and after each SQLite statement it executes, as a signal lands
between two bytecodes — and after each one the ledger must be consistent: the charge is in
the file exactly when the run's own view holds it, no transaction is left open, the
ledger verifies and takes the next charge.
"""

import sqlite3

import pytest

from fedvote.privacy.events import pate_fl_events
from fedvote.privacy.ledger import LedgerSession, PersistentLedger, ledger_report, verify_ledger

RELEASE = pate_fl_events(20.0, 40)


class Interrupting:
    """A connection that raises ``KeyboardInterrupt`` once, before or after its ``at``-th statement."""

    def __init__(self, db: sqlite3.Connection, at: int, when: str) -> None:
        self._db, self.at, self.when, self.statements, self.fired = db, at, when, 0, False

    def _step(self, run):
        self.statements += 1
        if self.statements == self.at and self.when == "before" and not self.fired:
            self.fired = True
            raise KeyboardInterrupt
        result = run()
        if self.statements == self.at and self.when == "after" and not self.fired:
            self.fired = True
            raise KeyboardInterrupt
        return result

    def execute(self, *args):
        return self._step(lambda: self._db.execute(*args))

    def cursor(self):
        return _Cursor(self, self._db.cursor())

    def __getattr__(self, name):
        return getattr(self._db, name)


class _Cursor:
    def __init__(self, owner: Interrupting, cursor: sqlite3.Cursor) -> None:
        self._owner, self._cursor = owner, cursor

    def execute(self, *args):
        return self._owner._step(lambda: self._cursor.execute(*args))

    def __getattr__(self, name):
        return getattr(self._cursor, name)


def charges_in_file(path) -> int:
    return sum(len(entry["charges"]) for entry in ledger_report(path))


def statements_of_one_charge(path) -> int:
    with PersistentLedger(path, "fed", budget_epsilon=50.0) as ledger:
        counter = Interrupting(ledger._db, at=0, when="never")  # noqa: SLF001 - the seam under test
        ledger._db = counter  # noqa: SLF001
        ledger.charge(RELEASE)
        ledger._db = counter._db  # noqa: SLF001
    return counter.statements


def test_an_interrupt_at_every_step_of_a_charge_leaves_it_whole_or_absent(tmp_path):
    steps = statements_of_one_charge(tmp_path / "count.db")
    assert steps >= 4  # BEGIN, the budget's reads, INSERT, COMMIT
    outcomes = set()
    for at in range(1, steps + 1):
        for when in ("before", "after"):
            path = tmp_path / f"l-{at}-{when}.db"
            with PersistentLedger(path, "fed", budget_epsilon=50.0) as ledger:
                ledger.charge(RELEASE)  # an earlier charge of this run
                real = ledger._db  # noqa: SLF001
                ledger._db = Interrupting(real, at, when)  # noqa: SLF001
                with pytest.raises(KeyboardInterrupt):  # the interrupt, never a sqlite3 error
                    ledger.charge(RELEASE)
                ledger._db = real  # noqa: SLF001
                assert not real.in_transaction, (at, when)
                stored = charges_in_file(path)
                assert stored in (1, 2), (at, when)
                assert len(ledger.charges) == stored, (at, when)  # the run's view is the file's
                outcomes.add(stored)
                ledger.charge(RELEASE)  # the connection still charges
            assert verify_ledger(path) == []
            assert charges_in_file(path) == stored + 1
    assert outcomes == {1, 2}  # interrupts before the COMMIT drop the charge, after it keep it


def test_an_interrupt_after_the_commit_of_a_compare_row_keeps_the_charge(tmp_path):
    path = tmp_path / "l.db"
    with PersistentLedger(path, "fed", budget_epsilon=50.0) as parent:
        steps = statements_of_one_charge(tmp_path / "count.db")
        real = parent._db  # noqa: SLF001
        parent._db = Interrupting(real, steps, "after")  # noqa: SLF001 - right after COMMIT
        session = LedgerSession(parent, "compare pate-fl")
        with pytest.raises(KeyboardInterrupt):
            session.charge(RELEASE)
        parent._db = real  # noqa: SLF001
        assert len(parent.charges) == 1 and not real.in_transaction
    (entry,) = ledger_report(path)
    assert [c["run"] for c in entry["charges"]] == ["compare pate-fl"]
