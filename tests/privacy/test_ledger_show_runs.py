"""Issue 47, item 11 (ledger): ``ledger show`` gives one line per run, not one per charge.

Three DP-FedAvg runs charged 300 lines under raw Unix-time ids. Now each run is one line
(its start, the method that made it, its number of charges, its ε at both levels);
``--charges`` and ``--json`` still give every charge.
"""

import json

import pytest

from fedvote.cli import main
from fedvote.privacy.events import pate_fl_events
from fedvote.privacy.ledger import LedgerSession, PersistentLedger, ledger_report

ROUND = pate_fl_events(60.0, 5)  # one small release per round


def three_runs(path, rounds: int = 20) -> None:
    for _ in range(3):
        with PersistentLedger(path, "fed", command="dp-fedavg") as ledger:
            for _ in range(rounds):
                ledger.charge(ROUND)


def test_show_gives_one_line_per_run_with_its_charges_method_and_epsilon(tmp_path, capsys):
    path = tmp_path / "l.db"
    three_runs(path)
    main(["ledger", "show", str(path)])
    out = capsys.readouterr().out
    run_lines = [line for line in out.splitlines() if line.strip().startswith("run ")]
    assert len(run_lines) == 3 and len(out.splitlines()) < 10
    assert all(" dp-fedavg: 20 charge(s), ε agent " in line and "UTC" in line for line in run_lines)
    assert "3 run(s), 60 charge(s), 0 voided" in out
    assert "#" not in out  # no charge ids without --charges


def test_every_charge_is_still_listed_with_charges_and_json(tmp_path, capsys):
    path = tmp_path / "l.db"
    three_runs(path)
    main(["ledger", "show", "--charges", str(path)])
    out = capsys.readouterr().out
    assert sum(line.strip().startswith("#") for line in out.splitlines()) == 60
    main(["ledger", "show", "--json", str(path)])
    (entry,) = json.loads(capsys.readouterr().out)
    assert len(entry["charges"]) == 60
    assert [(r["command"], r["charges"], r["voided"]) for r in entry["runs"]] == [("dp-fedavg", 20, 0)] * 3
    one_run = entry["runs"][0]["epsilon"]["agent"]
    assert 0 < one_run < entry["spent"]["agent"]  # a run's ε, below the three runs' composition


def test_sessions_of_a_compare_are_their_own_runs_and_voids_are_counted(tmp_path):
    path = tmp_path / "l.db"
    for _ in range(2):  # two compares, each with two rows
        with PersistentLedger(path, "fed", command="pate-fl") as parent:
            for row in ("compare pate-fl", "compare dp-fedavg"):
                session = LedgerSession(parent, row)
                session.charge(ROUND)
                session.void(session.charge(ROUND))
    (entry,) = ledger_report(path)
    runs = entry["runs"]
    assert [r["command"] for r in runs] == ["compare pate-fl", "compare dp-fedavg"] * 2
    assert all(r["charges"] == 2 and r["voided"] == 1 for r in runs)
    assert [c["run"] for c in entry["charges"]][:2] == ["compare pate-fl"] * 2  # labels as before
    assert runs[0]["epsilon"]["agent"] == pytest.approx(runs[1]["epsilon"]["agent"])
