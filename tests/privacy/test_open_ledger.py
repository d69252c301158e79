"""``with open_ledger(...) as ledger:`` — the one way every command opens and closes its ledger (issue 44)."""

import sqlite3

import numpy as np
import pytest

from fedvote.config import PrivacyConfig, RunConfig
from fedvote.data.federation import Federation, LabeledData
from fedvote.privacy.events import pate_fl_events
from fedvote.privacy.ledger import LedgerSession, PersistentLedger, PrivacyLedger
from fedvote.runner import build_config, make_federation, open_ledger, run

RECORDS = np.random.default_rng(0).normal(size=(60, 4)).astype(np.float32)
LABELS = np.arange(60, dtype=np.int64) % 3


def dealt(seed: int) -> Federation:
    """The same records dealt to 5 agents in an order fixed by ``seed``."""
    parts = np.array_split(np.random.default_rng(seed).permutation(len(LABELS)), 5)
    empty = LabeledData(features=RECORDS[:1], labels=LABELS[:1])
    agents = tuple(LabeledData(features=RECORDS[p], labels=LABELS[p]) for p in parts)
    return Federation(
        dataset_name="toy", agents=agents, public=empty, test=empty, num_classes=3, example_shape=(4,)
    )


def config(ledger, budget: float | None = None) -> RunConfig:
    return RunConfig(privacy=PrivacyConfig(ledger=str(ledger), budget_epsilon=budget))


def _is_closed(ledger: PersistentLedger) -> bool:
    try:
        ledger._db.execute("SELECT 1")
    except sqlite3.ProgrammingError:  # "Cannot operate on a closed database."
        return True
    return False


def test_a_persisted_ledger_is_closed_on_leaving_the_block(tmp_path):
    with open_ledger(config(tmp_path / "l.sqlite", budget=5.0), dealt(0)) as ledger:
        assert isinstance(ledger, PersistentLedger)
        ledger.charge(pate_fl_events(8.0, 10))
        assert not _is_closed(ledger)
    assert _is_closed(ledger)
    with open_ledger(config(tmp_path / "l.sqlite"), dealt(1)) as again:  # the charge was committed
        assert again.spent("agent") > 0


def test_an_error_inside_the_block_closes_the_ledger_and_goes_on(tmp_path):
    with pytest.raises(KeyboardInterrupt), open_ledger(config(tmp_path / "l.sqlite"), dealt(0)) as ledger:
        raise KeyboardInterrupt
    assert _is_closed(ledger)


def test_an_in_memory_ledger_and_a_session_are_context_managers_too():
    with open_ledger(RunConfig(privacy=PrivacyConfig(ledger=None))) as ledger:
        assert type(ledger) is PrivacyLedger
        ledger.charge(pate_fl_events(8.0, 10))
    assert len(ledger.charges) == 1  # still readable: nothing to close
    with LedgerSession(ledger, "row") as session:
        session.charge(pate_fl_events(8.0, 10))
    assert len(ledger.charges) == 2 and len(session.charges) == 1


def test_leaving_a_session_leaves_its_parent_open(tmp_path):
    with open_ledger(config(tmp_path / "l.sqlite"), dealt(0)) as parent:
        with LedgerSession(parent, "row") as session:
            session.charge(pate_fl_events(8.0, 10))
        assert not _is_closed(parent)
        parent.charge(pate_fl_events(8.0, 10))
    assert _is_closed(parent)


def test_a_run_leaves_its_callers_ledger_open(tmp_path):
    run_config = build_config(
        agents=3, queries=5, epochs=1, teacher_model="logistic", student_model="logistic",
        self_training_rounds=0, sigma=5.0, noise_seed=1, ledger=str(tmp_path / "l.sqlite"),
    )  # fmt: skip
    federation = make_federation(run_config)
    with open_ledger(run_config, federation) as ledger:
        run(run_config, federation=federation, ledger=ledger)
        assert not _is_closed(ledger)  # the caller's: still open for its next row
        assert len(ledger.charges) == 1  # the 5 answers, one batched release
    assert _is_closed(ledger)
