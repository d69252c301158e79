"""The sweep's charge journal never holds less than the ledger (issue 47, defect 6).

Each charge is journaled before the ledger records it; a charge the ledger refuses is
cancelled, a voided one too, and a last line cut short (the process stopped while writing
it, before its charge) is ignored — so a resumed sweep's total composes exactly the
charges in force.
"""

from __future__ import annotations

import pytest

from fedvote.errors import ConfigError
from fedvote.privacy.events import LevelEvents, gaussian_release_event
from fedvote.privacy.ledger import PersistentLedger, PrivacyBudgetExceeded, PrivacyLedger
from fedvote.sweep.journal import ChargeJournal, JournaledSession


def release(sigma: float) -> LevelEvents:
    return LevelEvents(
        agent=gaussian_release_event(sigma, 1.0, 10),
        instance=gaussian_release_event(sigma, 2**0.5, 10),
        agent_sensitivity=1.0,
        instance_sensitivity=2**0.5,
    )


def test_the_journal_holds_each_charge_in_force_in_order_and_drops_a_void(tmp_path):
    journal = ChargeJournal(tmp_path / "charges.jsonl")
    session = JournaledSession(PrivacyLedger(), "sweep point 1", journal=journal, point=1)
    first = session.charge(release(4.0))
    session.charge(release(8.0))
    session.void(first)
    later = JournaledSession(PrivacyLedger(), "sweep point 2", journal=journal, point=2)
    later.charge(release(16.0))
    assert ChargeJournal(journal.path).read() == [release(8.0), release(16.0)]
    assert journal.charged == 2


def test_a_charge_the_ledger_refuses_is_cancelled_in_the_journal(tmp_path):
    journal = ChargeJournal(tmp_path / "charges.jsonl")
    with PersistentLedger(tmp_path / "ledger.db", "federation", budget_epsilon=1.0, accountant="rdp") as ledger:
        session = JournaledSession(ledger, "sweep point 1", journal=journal, point=1)
        with pytest.raises(PrivacyBudgetExceeded):
            session.charge(release(0.5))  # far above the budget
        assert ledger.charges == ()
    assert ChargeJournal(journal.path).read() == [] and journal.charged == 0


def test_a_last_line_cut_short_is_ignored_and_an_earlier_damaged_line_refused(tmp_path):
    journal = ChargeJournal(tmp_path / "charges.jsonl")
    JournaledSession(PrivacyLedger(), "sweep point 1", journal=journal, point=1).charge(release(4.0))
    text = journal.path.read_text()
    journal.path.write_text(text + text[: len(text) // 2])  # stopped while appending the next charge
    assert ChargeJournal(journal.path).read() == [release(4.0)]
    journal.path.write_text(text[: len(text) // 2] + "\n" + text)
    with pytest.raises(ConfigError, match="line 1 is not a sweep.s charge"):
        ChargeJournal(journal.path).read()


def test_the_journal_says_which_point_made_each_charge(tmp_path):
    """A resumed sweep counts each earlier charge against its point's ledger (sweep.json's ``charges``)."""
    journal = ChargeJournal(tmp_path / "charges.jsonl")
    JournaledSession(PrivacyLedger(), "sweep point 1", journal=journal, point=1).charge(release(4.0))
    second = JournaledSession(PrivacyLedger(), "sweep point 3", journal=journal, point=3)
    voided = second.charge(release(8.0))
    second.charge(release(16.0))
    second.void(voided)
    assert ChargeJournal(journal.path).read_points() == [(1, release(4.0)), (3, release(16.0))]
