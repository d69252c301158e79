"""Issue 16, "a ledger nothing bypasses": compare, later runs and sweeps are charged and bound.

The bar: with ``--ledger L --budget-epsilon 5`` after one ε-4 run, ``compare --config``
on it, a later ``run`` without ``--budget-epsilon`` (or with a larger one) and a sweep
whose points total more than the remaining budget are each refused with one line and
nothing released; ``fedvote ledger show L --json`` lists every charge; a sweep within
budget records one charge per released point.
"""

import json

import pytest

SMALL = ["--agents", "10", "--queries", "40", "--epochs", "3", "--teacher-model", "logistic",
         "--student-model", "logistic", "--noise-seed", "1"]  # fmt: skip


def show(ledger, invoke):
    code, out, _ = invoke(["ledger", "show", str(ledger), "--json"])
    assert code == 0
    return json.loads(out)


def charges(ledger, invoke):
    return [charge for entry in show(ledger, invoke) for charge in entry["charges"]]


def assert_refused(code, err, flag):
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fedvote: error: {flag}: "), err


def test_after_an_epsilon_4_run_on_budget_5_every_bypass_is_refused(tmp_path, invoke):
    ledger, first = tmp_path / "ledger.sqlite", tmp_path / "first"
    code, _, _ = invoke(
        [
            "run",
            *SMALL,
            "--epsilon",
            "4",
            "--ledger",
            str(ledger),
            "--budget-epsilon",
            "5",
            "--out",
            str(first),
        ],
    )
    assert code == 0
    assert len(charges(ledger, invoke)) == 1

    # compare --config keeps the run's ledger and budget: another ε-4 row does not fit
    code, _, err = invoke(
        [
            "compare",
            "--config",
            str(first / "result.json"),
            "--methods",
            "pate-fl",
            "--out",
            str(tmp_path / "c"),
        ],
    )
    assert_refused(code, err, "--budget-epsilon")
    assert "this compare's 1 runs" in err and "nothing was released" in err
    assert not (tmp_path / "c").exists()

    # a later run without --budget-epsilon is bound by the stored budget
    code, _, err = invoke(["run", *SMALL, "--epsilon", "4", "--ledger", str(ledger)])
    assert_refused(code, err, "--budget-epsilon")
    assert "above the budget 5" in err

    # a larger --budget-epsilon is refused by name, pointing at set-budget
    code, _, err = invoke(
        ["run", *SMALL, "--epsilon", "1", "--ledger", str(ledger), "--budget-epsilon", "1000"]
    )
    assert_refused(code, err, "--budget-epsilon")
    assert "fedvote ledger set-budget" in err

    # a sweep whose points each fit but together overrun the budget: refused before the first
    code, _, err = invoke(
        ["sweep", *SMALL, "--ledger", str(ledger), "--grid", "epsilon=1.5,2", "--out", str(tmp_path / "s")],
    )
    assert_refused(code, err, "--budget-epsilon")
    assert "this sweep's 2 points" in err
    assert not (tmp_path / "s" / "sweep.json").exists()

    (entry,) = show(ledger, invoke)
    assert len(entry["charges"]) == 1  # nothing of the refused commands was charged
    assert entry["budget"]["agent"]["epsilon"] == 5.0
    assert entry["spent"]["agent"] == pytest.approx(4.0, abs=1e-3)


def test_a_sweep_within_budget_records_one_charge_per_released_point(tmp_path, invoke):
    ledger, out = tmp_path / "ledger.sqlite", tmp_path / "sweep"
    code, _, _ = invoke(
        [
            "sweep",
            *SMALL,
            "--ledger",
            str(ledger),
            "--budget-epsilon",
            "10",
            "--grid",
            "epsilon=1,2",
            "--out",
            str(out),
        ],
    )
    assert code == 0
    sweep = json.loads((out / "sweep.json").read_text())
    (entry,) = show(ledger, invoke)
    assert len(entry["charges"]) == len(sweep["rows"]) == 2
    assert all(charge["run"].startswith("sweep pate-fl") for charge in entry["charges"])
    assert sweep["total_epsilon"]["agent"] == pytest.approx(entry["spent"]["agent"], rel=1e-9)
    assert 2.0 < sweep["total_epsilon"]["agent"] <= 3.0 + 1e-9  # 1 ⊕ 2, sub-additive
    assert sweep["ledgers"][0]["charges"] == 2


def test_compare_config_charges_every_row_to_the_runs_ledger(tmp_path, invoke):
    ledger, first = tmp_path / "ledger.sqlite", tmp_path / "first"
    code, _, _ = invoke(
        [
            "run",
            *SMALL,
            "--epsilon",
            "2",
            "--ledger",
            str(ledger),
            "--budget-epsilon",
            "20",
            "--out",
            str(first),
        ],
    )
    assert code == 0
    code, out, _ = invoke(
        ["compare", "--config", str(first / "result.json"), "--methods", "pate-fl", "--epsilon", "2",
         "--out", str(tmp_path / "c")],
    )  # fmt: skip
    assert code == 0
    assert "total ε spent by all rows: agent-level " in out
    compared = json.loads((tmp_path / "c" / "compare.json").read_text())
    assert compared["total_epsilon"]["agent"] == pytest.approx(2.0, abs=1e-3)
    (entry,) = show(ledger, invoke)
    assert [c["run"] for c in entry["charges"]][1:] == ["compare pate-fl"]
    assert entry["spent"]["agent"] > 2.5  # both releases count
