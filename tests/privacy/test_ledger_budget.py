"""The ledger's budget binds every later run, at both levels, keyed by the agents' records."""

import sqlite3
import time

import numpy as np
import pytest

from fedvote.cli import main
from fedvote.config import PrivacyConfig, RunConfig
from fedvote.data.federation import Federation, LabeledData
from fedvote.errors import ConfigError
from fedvote.privacy.events import pate_fl_events
from fedvote.privacy.ledger import (
    PersistentLedger,
    PrivacyBudgetExceeded,
    ledger_report,
    set_budget,
    verify_ledger,
)
from fedvote.runner import federation_content_key, federation_fingerprint, open_ledger

RECORDS = np.random.default_rng(0).normal(size=(60, 4)).astype(np.float32)
LABELS = np.arange(60, dtype=np.int64) % 3


def dealt(seed: int, agents: int = 5, features=RECORDS, labels=LABELS) -> Federation:
    """The same records dealt to ``agents`` agents in an order fixed by ``seed``."""
    order = np.random.default_rng(seed).permutation(len(labels))
    parts = np.array_split(order, agents)
    empty = LabeledData(features=features[:1], labels=labels[:1])
    return Federation(
        dataset_name="toy",
        agents=tuple(LabeledData(features=features[p], labels=labels[p]) for p in parts),
        public=empty,
        test=empty,
        num_classes=3,
        example_shape=(4,),
    )


def config(ledger, seed: int = 0, budget: float | None = None) -> RunConfig:
    return RunConfig(privacy=PrivacyConfig(ledger=str(ledger), budget_epsilon=budget), seed=seed)


def test_content_key_is_the_records_not_the_dealing():
    key = federation_content_key(dealt(0))
    assert federation_content_key(dealt(1)) == key  # another seed
    assert federation_content_key(dealt(7, agents=3)) == key  # another partition of the same records
    other_label = LABELS.copy()
    other_label[5] = (other_label[5] + 1) % 3
    assert federation_content_key(dealt(0, labels=other_label)) != key
    other_record = RECORDS.copy()
    other_record[9, 2] += 1e-3
    assert federation_content_key(dealt(0, features=other_record)) != key


def test_re_dealing_under_another_seed_meets_the_same_budget(tmp_path):
    path = tmp_path / "l.sqlite"
    assert federation_fingerprint(config(path, 0)) != federation_fingerprint(config(path, 1))
    first = open_ledger(config(path, seed=0, budget=5.0), dealt(0))
    assert isinstance(first, PersistentLedger)
    first.charge(pate_fl_events(5.2, 40))  # ε ≈ 4
    first.close()
    with open_ledger(config(path, seed=1), dealt(1)) as again:  # no --budget-epsilon
        assert isinstance(again, PersistentLedger)
        assert again.federation == first.federation and again.budget_epsilon == 5.0
        with pytest.raises(PrivacyBudgetExceeded):
            again.charge(pate_fl_events(5.2, 40))


def test_a_different_budget_is_refused_in_one_line_naming_the_flag(tmp_path):
    path = tmp_path / "l.sqlite"
    PersistentLedger(path, "fed", budget_epsilon=5.0).close()
    with PersistentLedger(path, "fed", budget_epsilon=5.0) as same:  # the stored one: fine
        assert same.budget_epsilon == 5.0
    for other in (1000.0, 1.0):
        with pytest.raises(ConfigError) as caught:
            PersistentLedger(path, "fed", budget_epsilon=other)
        assert caught.value.argument == "budget_epsilon"
        assert "fedvote ledger set-budget" in caught.value.detail and "\n" not in caught.value.detail
    assert len(ledger_report(path)[0]["budget_history"]) == 1  # refusals append nothing


def test_set_budget_appends_a_row_and_never_updates(tmp_path):
    path = tmp_path / "l.sqlite"
    with PersistentLedger(path, "fed", budget_epsilon=5.0) as ledger:
        ledger.charge(pate_fl_events(5.2, 40))
    set_budget(path, "fed", 8.0, levels=("agent",))
    (entry,) = ledger_report(path)
    assert [row["epsilon"] for row in entry["budget_history"]] == [5.0, 8.0]
    assert entry["budget"]["agent"]["epsilon"] == 8.0
    with PersistentLedger(path, "fed") as later:
        assert later.budget_epsilon == 8.0
        later.charge(pate_fl_events(5.2, 40))  # fits now
    with pytest.raises(ConfigError, match="could not hold") as caught:
        set_budget(path, "fed", 2.0)  # below what was spent
    assert caught.value.argument == "epsilon"
    with pytest.raises(ConfigError) as caught:
        set_budget(path, "nope", 9.0)
    assert caught.value.argument == "federation"
    db = sqlite3.connect(path)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db.execute("UPDATE budgets SET epsilon = 1000")


def test_an_instance_budget_binds_the_instance_level(tmp_path):
    path = tmp_path / "l.sqlite"
    with PersistentLedger(path, "fed", budget_epsilon=5.0) as ledger:
        ledger.charge(pate_fl_events(5.2, 40))  # agent ≈ 4.0, instance ≈ 6.2
    set_budget(path, "fed", 7.0, levels=("instance",))
    with PersistentLedger(path, "fed") as later:
        with pytest.raises(PrivacyBudgetExceeded) as caught:
            later.check(pate_fl_events(10.0, 40))  # agent 4.66 fits 5; instance 7.28 not 7
        assert caught.value.level == "instance"
    (entry,) = ledger_report(path)
    assert entry["spent"]["instance"] > entry["spent"]["agent"]


def test_charges_under_the_legacy_fingerprint_still_count(tmp_path):
    path = tmp_path / "l.sqlite"
    with PersistentLedger(path, "digits-10-legacy", budget_epsilon=5.0) as old:
        old.charge(pate_fl_events(5.2, 40))
    with PersistentLedger(path, "records-new", aliases=("digits-10-legacy",)) as new:
        assert new.budget_epsilon == 5.0
        assert new.spent() == pytest.approx(4.0, abs=0.01)
        with pytest.raises(PrivacyBudgetExceeded):
            new.check(pate_fl_events(5.2, 40))


def test_verify_recomputes_every_spend_and_catches_a_budget_below_it(tmp_path, capsys):
    path = tmp_path / "l.sqlite"
    with PersistentLedger(path, "fed", budget_epsilon=5.0) as ledger:
        ledger.charge(pate_fl_events(5.2, 40))
    assert verify_ledger(path) == []
    main(["ledger", "verify", str(path)])  # returns: exit status 0
    assert "every spend within its budgets" in capsys.readouterr().out
    db = sqlite3.connect(path)  # tamper without updating anything: a lower budget row, back-dated
    db.execute(
        "INSERT INTO budgets (federation, epsilon, delta, level, accountant, created) VALUES (?, ?, ?, ?, ?, ?)",
        ("fed", 3.0, 1e-3, "agent", "pld", time.time()),
    )
    db.commit()
    db.close()
    problems = verify_ledger(path)
    assert len(problems) == 1 and "exceeds budget row" in problems[0]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["ledger", "verify", str(path)])
    assert exit_info.value.code == 1
    assert "violation" in capsys.readouterr().out


def test_show_lists_budget_charges_and_spend_per_level(tmp_path, capsys):
    path = tmp_path / "l.sqlite"
    with PersistentLedger(path, "fed", budget_epsilon=5.0) as ledger:
        ledger.charge(pate_fl_events(5.2, 40))
        ledger.void(ledger.charge(pate_fl_events(20.0, 40)))
    main(["ledger", "show", str(path)])
    out = capsys.readouterr().out
    assert "federation fed" in out and "agent" in out and "instance" in out and "1 voided" in out
    (entry,) = ledger_report(path)
    assert set(entry) >= {"federation", "budget", "charges", "spent"}
    assert set(entry["spent"]) == {"agent", "instance"}
    assert [c["voided"] for c in entry["charges"]] == [False, True]
    with pytest.raises(ConfigError):
        ledger_report(tmp_path / "missing.sqlite")

