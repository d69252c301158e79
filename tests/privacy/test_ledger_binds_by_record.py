"""Issue 42, defect 2: the ledger's budget binds every record, not the exact record multiset.

Nudging a public flag (``--test-fraction 0.149``) gave the agents the same records plus
two, a new content key and a fresh budget. Now every stored federation that shares a
record with a run counts: its charges compose with the run's, its budget binds.
"""

import json
import sqlite3

import numpy as np
import pytest

from fedvote.cli import main
from fedvote.config import PrivacyConfig, RunConfig
from fedvote.data.federation import Federation, LabeledData
from fedvote.data.record_hashes import sorted_hashes_of
from fedvote.errors import ConfigError
from fedvote.privacy.events import pate_fl_events
from fedvote.privacy.ledger import (
    LEDGER_APPLICATION_ID,
    LEDGER_FORMAT_VERSION,
    PersistentLedger,
    PrivacyBudgetExceeded,
    ledger_report,
    set_budget,
    verify_ledger,
)
from fedvote.runner import federation_content_key, open_ledger

RECORDS = np.random.default_rng(0).normal(size=(80, 4)).astype(np.float32)
LABELS = np.arange(80, dtype=np.int64) % 3
RELEASE = pate_fl_events(5.2, 40)  # agent ε ≈ 4 at δ = 1e-3 (pld); two of them ≈ 6.1


def federation(rows: slice | np.ndarray, labels=LABELS, features=RECORDS, agents: int = 4) -> Federation:
    """The records ``rows`` dealt to ``agents`` agents."""
    index = np.arange(len(features))[rows]
    parts = np.array_split(index, agents)
    empty = LabeledData(features=features[:1], labels=labels[:1])
    return Federation(
        dataset_name="toy",
        agents=tuple(LabeledData(features=features[p], labels=labels[p]) for p in parts),
        public=empty,
        test=empty,
        num_classes=3,
        example_shape=(4,),
    )


def config(ledger, budget: float | None = None) -> RunConfig:
    return RunConfig(privacy=PrivacyConfig(ledger=str(ledger), budget_epsilon=budget))


def opened(path, fed: Federation, budget: float | None = None) -> PersistentLedger:
    ledger = open_ledger(config(path, budget), fed)
    assert isinstance(ledger, PersistentLedger)
    return ledger


def test_the_same_records_plus_two_meet_the_spent_budget(tmp_path):
    path = tmp_path / "l.db"
    first, nudged = federation(slice(0, 60)), federation(slice(0, 62))
    assert federation_content_key(first) != federation_content_key(nudged)  # another key, as before
    with opened(path, first, budget=7.0) as ledger:
        ledger.charge(RELEASE)
        ledger.charge(RELEASE)  # ε ≈ 6.1 of 7
    with opened(path, nudged, budget=7.0) as again:
        with pytest.raises(PrivacyBudgetExceeded) as refused:
            again.charge(RELEASE)
        assert again.overlaps == {federation_content_key(first): 60}
        assert again.spent() > 6.0  # its 60 shared records have spent the first federation's ε
        assert refused.value.argument == "budget_epsilon" and refused.value.budget == 7.0
        assert "60 records" in str(refused.value)
        assert again.charges == ()
    (untouched,) = [e for e in ledger_report(path) if e["federation"] == federation_content_key(nudged)]
    assert untouched["charges"] == []  # nothing was charged: nothing was released


def test_records_are_their_features_whatever_their_labels(tmp_path):
    path = tmp_path / "l.db"
    with opened(path, federation(slice(0, 40)), budget=5.0) as ledger:
        ledger.charge(RELEASE)
    relabelled = federation(slice(0, 40), labels=(LABELS + 1) % 3)
    with opened(path, relabelled) as again:
        with pytest.raises(PrivacyBudgetExceeded):
            again.charge(RELEASE)
        assert len(again.overlaps) == 1  # another content key, the same people's records


def test_disjoint_federations_keep_their_own_budgets(tmp_path):
    path = tmp_path / "l.db"
    with opened(path, federation(slice(0, 40)), budget=5.0) as ledger:
        ledger.charge(RELEASE)
    with opened(path, federation(slice(40, 80)), budget=5.0) as other:
        assert other.overlaps == {}
        other.charge(RELEASE)  # no shared record: its own budget, untouched
        assert other.spent() == pytest.approx(4.0, abs=0.01)


def test_the_smallest_budget_of_the_overlapping_federations_binds(tmp_path):
    path = tmp_path / "l.db"
    with opened(path, federation(slice(0, 40)), budget=5.0):
        pass
    with opened(path, federation(slice(20, 60)), budget=100.0) as wider:
        assert wider.budgets["agent"].epsilon == 100.0  # its own, stored
        assert wider.budget_epsilon == 5.0  # but the overlapping federation's smaller one binds
        wider.charge(RELEASE)
        with pytest.raises(PrivacyBudgetExceeded) as refused:
            wider.charge(RELEASE)
        assert refused.value.federation == federation_content_key(federation(slice(0, 40)))


def test_a_federation_stored_while_a_run_is_open_counts_at_its_next_charge(tmp_path):
    path = tmp_path / "l.db"
    early = opened(path, federation(slice(0, 40)), budget=7.0)
    try:
        with opened(path, federation(slice(10, 50)), budget=7.0) as late:
            late.charge(RELEASE)
            late.charge(RELEASE)
        with pytest.raises(PrivacyBudgetExceeded):
            early.charge(RELEASE)  # the later federation, stored after `early` opened, counts
    finally:
        early.close()


def test_show_names_the_overlapping_federations_and_their_shared_records(tmp_path, capsys):
    path = tmp_path / "l.db"
    a, b = federation(slice(0, 60)), federation(slice(0, 62))
    with opened(path, a, budget=9.0) as ledger:
        ledger.charge(RELEASE)
    with opened(path, b) as ledger:
        ledger.charge(RELEASE)
    main(["ledger", "show", str(path)])
    out = capsys.readouterr().out
    assert f"shares 60 records with federation {federation_content_key(a)}" in out
    assert f"shares 60 records with federation {federation_content_key(b)}" in out
    assert "(60 records)" in out and "(62 records)" in out
    main(["ledger", "show", "--json", str(path)])
    report = {e["federation"]: e for e in json.loads(capsys.readouterr().out)}
    assert report[federation_content_key(b)]["overlaps"] == [
        {"federation": federation_content_key(a), "shared_records": 60}
    ]
    assert report[federation_content_key(b)]["records"] == 62
    assert report[federation_content_key(b)]["spent_with_overlaps"]["agent"] > 6.0
    assert verify_ledger(path) == []  # 6.1 ≤ 9: within the budget of every shared record


def test_verify_and_set_budget_count_the_overlapping_charges(tmp_path):
    path = tmp_path / "l.db"
    a, b = federation(slice(0, 60)), federation(slice(0, 62))
    with opened(path, a, budget=5.0) as ledger:
        ledger.charge(RELEASE)
    with opened(path, b) as ledger:  # no budget of its own yet: the shared records' binds
        ledger.check(pate_fl_events(40.0, 40))  # a small one passes
    with pytest.raises(ConfigError) as refused:  # 4 spent by its records: a budget of 3 could not hold
        set_budget(path, federation_content_key(b), 3.0, levels=("agent",))
    assert refused.value.argument == "epsilon"
    # A ledger written by a fedvote that keyed by multiset: both charged beyond the budget.
    db = sqlite3.connect(path)
    db.execute(
        "INSERT INTO records (federation, run, kind, agent_event, instance_event, created) "
        "SELECT ?, run, kind, agent_event, instance_event, created + 1 FROM records WHERE kind = 'charge'",
        (federation_content_key(b),),
    )
    db.commit()
    db.close()
    (problem,) = verify_ledger(path)
    assert "exceeds budget row" in problem and "60 records shared with" in problem


def _v1_ledger(path, key: str) -> None:
    """A version-1 ledger (before record hashes) holding one charge and a budget of 7 under ``key``."""
    with PersistentLedger(path, key, budget_epsilon=7.0) as ledger:
        ledger.charge(RELEASE)
        ledger.charge(RELEASE)
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(
        """
        DROP TRIGGER federations_no_update; DROP TRIGGER federations_no_delete; DROP TABLE federations;
        CREATE TABLE r1 AS SELECT id, federation, run, kind, target, agent_event, instance_event,
            agent_sensitivity, instance_sensitivity, created FROM records;
        DROP TRIGGER records_no_update; DROP TRIGGER records_no_delete; DROP TABLE records;
        CREATE TABLE records (
            id INTEGER PRIMARY KEY AUTOINCREMENT, federation TEXT NOT NULL, run TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('charge', 'void')), target INTEGER REFERENCES records(id),
            agent_event TEXT, instance_event TEXT, agent_sensitivity REAL, instance_sensitivity REAL,
            created REAL NOT NULL);
        INSERT INTO records SELECT * FROM r1; DROP TABLE r1;
        PRAGMA user_version = 1;
        """
    )
    db.close()


def test_an_older_ledger_migrates_and_binds_by_record_once_its_federations_reopen(tmp_path):
    path = tmp_path / "old.db"
    first, nudged = federation(slice(0, 60)), federation(slice(0, 62))
    _v1_ledger(path, federation_content_key(first))
    (entry,) = ledger_report(path)  # migrated on opening: version 2, the charges kept, no hashes yet
    assert entry["records"] is None and len(entry["charges"]) == 2
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA application_id").fetchone()[0] == LEDGER_APPLICATION_ID
    assert db.execute("PRAGMA user_version").fetchone()[0] == LEDGER_FORMAT_VERSION == 2
    db.close()
    with opened(path, first) as again:  # the key matches as before; its hashes are stored now
        assert again.budget_epsilon == 7.0 and again.spent() > 6.0
    with opened(path, nudged) as nudge:
        assert nudge.overlaps == {federation_content_key(first): 60}
        with pytest.raises(PrivacyBudgetExceeded):
            nudge.charge(RELEASE)
    assert {e["federation"]: e["records"] for e in ledger_report(path)} == {
        federation_content_key(first): 60,
        federation_content_key(nudged): 62,
    }


def test_the_deploy_server_file_carries_the_record_hashes_so_the_server_binds_by_record(tmp_path):
    from fedvote.flower.files import load_server_file, write_deployment_files
    from fedvote.runner import make_federation

    run_config = RunConfig(privacy=PrivacyConfig(ledger=str(tmp_path / "l.db"), budget_epsilon=5.0))
    write_deployment_files(run_config, tmp_path / "deploy")
    files = load_server_file(tmp_path / "deploy" / "server.npz")
    built = make_federation(run_config)
    assert files.record_hashes is not None
    np.testing.assert_array_equal(files.record_hashes, sorted_hashes_of(a.features for a in built.agents))
    with opened(tmp_path / "l.db", federation(slice(0, 10), features=built.agents[0].features)) as local:
        local.charge(RELEASE)  # a local run on some of the same records
    server = open_ledger(run_config, content_key=files.ledger_key, record_hashes=files.record_hashes)
    assert isinstance(server, PersistentLedger)
    with server:
        assert len(server.overlaps) == 1
        with pytest.raises(PrivacyBudgetExceeded):
            server.charge(RELEASE)


# The command line, as the issue measured it: ε-2-σ PATE-FL runs (agent ε 5.59, then 8.79
# composed) on budget 10; the third is refused; then the same records plus two.
TINY = ["--agents", "5", "--queries", "10", "--epochs", "2", "--teacher-model", "logistic",
        "--student-model", "logistic", "--noise-seed", "1", "--sigma", "2", "--accountant", "exact"]


def test_a_nudged_test_fraction_is_refused_once_the_budget_is_spent(tmp_path, invoke):
    ledger = tmp_path / "l.db"
    base = ["run", *TINY, "--ledger", ledger, "--budget-epsilon", "10"]
    for i in (1, 2):
        code, _, err = invoke([*base, "--out", tmp_path / f"r{i}"])
        assert code == 0, err
    code, _, err = invoke([*base, "--out", tmp_path / "r3"])
    assert code == 2 and "privacy budget exceeded" in err
    code, _, err = invoke([*base, "--test-fraction", "0.149", "--out", tmp_path / "nudged"])
    assert code == 2, err
    (line,) = err.strip().splitlines()
    assert line.startswith("fedvote: error: --budget-epsilon: privacy budget exceeded")
    assert "1257 records" in line and "above the budget 10" in line
    assert not (tmp_path / "nudged").exists()


def test_a_server_file_without_hashes_uses_those_stored_under_its_key(tmp_path):
    path = tmp_path / "l.db"
    first, nudged = federation(slice(0, 60)), federation(slice(0, 62))
    with opened(path, first, budget=7.0) as ledger:
        ledger.charge(RELEASE)
        ledger.charge(RELEASE)
    with opened(path, nudged):  # a local run stores the nudged federation's hashes
        pass
    old_server = open_ledger(config(path), content_key=federation_content_key(nudged))  # no hashes given
    assert isinstance(old_server, PersistentLedger)
    with old_server:
        with pytest.raises(PrivacyBudgetExceeded):
            old_server.charge(RELEASE)
        assert old_server.overlaps == {federation_content_key(first): 60}
