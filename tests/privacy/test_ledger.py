"""The ledger: in-memory API, SQLite persistence, the budget, append-only, crash safety."""

import math
import sqlite3
import subprocess
import sys
import textwrap

import pytest
from dp_accounting import dp_event

from fedvote.errors import ConfigError
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import dp_fedavg_events, pate_fl_events, private_knn_fl_events
from fedvote.privacy.ledger import (
    PersistentLedger,
    PrivacyBudgetExceeded,
    PrivacyLedger,
    event_from_json,
    event_to_json,
)


def test_in_memory_api_is_unchanged():
    ledger = PrivacyLedger()
    first = ledger.charge(pate_fl_events(10.0, 100))
    second = ledger.charge(pate_fl_events(10.0, 50))
    ledger.void(second)
    assert (first, second) == (0, 1)
    assert ledger.charges == (pate_fl_events(10.0, 100),)
    assert ledger.event("agent") == dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(10.0), 100)
    assert ledger.sensitivity("agent") == 1.0
    with pytest.raises(ValueError):
        ledger.event("user")


@pytest.mark.parametrize(
    "event",
    [
        pate_fl_events(25.0, 500).agent,
        dp_fedavg_events(0.05, 1.0, 30).agent,
        dp_event.ComposedDpEvent([dp_event.GaussianDpEvent(2.0), dp_event.NoOpDpEvent()]),
        dp_event.NonPrivateDpEvent(),
    ],
)
def test_events_round_trip_through_json(event):
    assert event_from_json(event_to_json(event)) == event


def test_charges_persist_and_accumulate_across_runs(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with PersistentLedger(path, "fed-A", budget_epsilon=10.0, delta=1e-3) as run1:
        run1.charge(pate_fl_events(25.0, 250))
        run1.charge(pate_fl_events(25.0, 250))
        assert run1.event("agent") == pate_fl_events(25.0, 500).agent
    with PersistentLedger(path, "fed-A", budget_epsilon=10.0, delta=1e-3) as run2:
        assert run2.charges == ()  # this run has charged nothing yet
        assert run2.spent() == pytest.approx(epsilon_for(pate_fl_events(25.0, 500).agent, 1e-3))
        run2.charge(pate_fl_events(25.0, 500))
        assert run2.spent() == pytest.approx(epsilon_for(pate_fl_events(25.0, 1000).agent, 1e-3))
        assert run2.spent("instance") == pytest.approx(epsilon_for(pate_fl_events(25.0, 1000).instance, 1e-3))
    with PersistentLedger(path, "fed-B") as other:  # federations are separate
        assert other.spent() == 0.0
        assert math.isinf(other.remaining())


def test_budget_is_enforced_before_release_and_writes_nothing(tmp_path):
    path = tmp_path / "ledger.sqlite"
    ledger = PersistentLedger(path, "fed", budget_epsilon=3.0, delta=1e-3)
    ledger.charge(pate_fl_events(25.0, 500))  # ε ≈ 2.74
    records = len(ledger.history())
    with pytest.raises(PrivacyBudgetExceeded) as caught:
        ledger.charge(pate_fl_events(25.0, 100))
    assert isinstance(caught.value, ConfigError) and caught.value.argument == "budget_epsilon"
    assert "nothing was released" in str(caught.value) and "\n" not in str(caught.value)
    assert len(ledger.history()) == records
    with pytest.raises(PrivacyBudgetExceeded):
        ledger.check(pate_fl_events(25.0, 100))
    assert ledger.check(pate_fl_events(25.0, 10)) <= 3.0  # check() writes nothing either
    assert len(ledger.history()) == records
    assert ledger.remaining() == pytest.approx(3.0 - epsilon_for(pate_fl_events(25.0, 500).agent, 1e-3))


def test_void_appends_and_never_deletes(tmp_path):
    path = tmp_path / "ledger.sqlite"
    ledger = PersistentLedger(path, "fed", budget_epsilon=5.0, delta=1e-3)
    kept = ledger.charge(private_knn_fl_events(15.0, 100, 5))
    voided = ledger.charge(private_knn_fl_events(15.0, 100, 5))
    ledger.void(voided)
    assert [r["kind"] for r in ledger.history()] == ["charge", "charge", "void"]
    assert ledger.history()[-1]["target"] == voided
    assert ledger.charges == (private_knn_fl_events(15.0, 100, 5),)
    assert ledger.spent() == pytest.approx(epsilon_for(private_knn_fl_events(15.0, 100, 5).agent, 1e-3))
    with pytest.raises(ValueError):
        ledger.void(voided)  # already void
    db = sqlite3.connect(path)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db.execute("DELETE FROM records WHERE id = ?", (kept,))
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db.execute("UPDATE records SET kind = 'void' WHERE id = ?", (kept,))


def test_a_crash_between_charge_and_release_never_lowers_the_spend(tmp_path):
    path = tmp_path / "ledger.sqlite"
    script = textwrap.dedent(
        f"""
        import os
        from fedvote.privacy.events import pate_fl_events
        from fedvote.privacy.ledger import PersistentLedger
        ledger = PersistentLedger({str(path)!r}, "fed", budget_epsilon=4.0, delta=1e-3)
        ledger.charge(pate_fl_events(25.0, 500))
        os._exit(9)  # killed before releasing (and before any void or close)
        """
    )
    assert subprocess.run([sys.executable, "-c", script], check=False).returncode == 9
    rerun = PersistentLedger(path, "fed", budget_epsilon=4.0, delta=1e-3)
    assert rerun.spent() == pytest.approx(epsilon_for(pate_fl_events(25.0, 500).agent, 1e-3))
    with pytest.raises(ValueError):
        rerun.void(1)  # another run's charge cannot be voided after the fact
    with pytest.raises(PrivacyBudgetExceeded):
        rerun.charge(pate_fl_events(25.0, 500))


def test_bad_arguments(tmp_path):
    with pytest.raises(ConfigError):
        PersistentLedger(tmp_path / "l.sqlite", "fed", budget_epsilon=0.0)
    with pytest.raises(ConfigError):
        PersistentLedger(tmp_path / "l.sqlite", "fed", level="user")
    with pytest.raises(ConfigError):
        PersistentLedger(tmp_path / "missing-dir" / "l.sqlite", "fed")
