"""``fedvote sweep --resume`` of a sweep that recorded a relative ``--ledger`` (started before e8d909d).

The resume stays refused (a relative path resolved from another directory names another
file, and the remaining points would be charged to a second ledger, splitting the
federation's budget), but its one line says why and what to do instead of only
"they differ in privacy.ledger".
"""

from __future__ import annotations

import json
from pathlib import Path

import fedvote.sweep.execute as sweep_module
from fedvote.privacy.ledger import ledger_report
from fedvote.sweep.identity import check_same_sweep

# Tiny settings (as tests/test_sweep_resume.py's).
SMALL = ["--agents", "10", "--queries", "40", "--epochs", "2", "--teacher-model", "logistic",
         "--student-model", "logistic", "--self-training-rounds", "0", "--noise-seed", "0",
         "--accountant", "rdp"]  # fmt: skip


def interrupt_at(monkeypatch, call: int | None) -> list:
    """Make the sweep's per-point run raise KeyboardInterrupt on its ``call``-th call; record the calls."""
    calls = []
    real_run = sweep_module.run

    def run(config, **kwargs):
        calls.append(config)
        if len(calls) == call:
            raise KeyboardInterrupt
        return real_run(config, **kwargs)

    monkeypatch.setattr(sweep_module, "run", run)
    return calls


def charges_in(ledger) -> int:
    return sum(len(federation["charges"]) for federation in ledger_report(ledger))


def _snapshot(out):
    return {path.relative_to(out): path.read_bytes() for path in out.rglob("*") if path.is_file()}


def _relative(plan_path: Path, ledger: str) -> None:
    """Rewrite ``plan.json`` as a sweep started before e8d909d wrote it: the ledger as typed."""
    plan = json.loads(plan_path.read_text())
    for config in plan["configs"]:
        config["privacy"]["ledger"] = ledger
    plan_path.write_text(json.dumps(plan, indent=2) + "\n")


def test_resume_of_a_sweep_with_a_relative_ledger_says_why_and_what_to_do(tmp_path, monkeypatch, invoke):
    monkeypatch.chdir(tmp_path)
    args = ["sweep", "--method", "pate-fl", *SMALL, "--grid", "sigma=4,8,16", "--ledger", "ledger.db",
            "--out", "D"]  # fmt: skip
    interrupt_at(monkeypatch, 2)
    code, _, _ = invoke(args)
    assert code == 130 and charges_in(tmp_path / "ledger.db") == 1
    _relative(tmp_path / "D" / "points" / "plan.json", "ledger.db")
    before = _snapshot(tmp_path / "D")

    calls = interrupt_at(monkeypatch, None)
    code, stdout, err = invoke([*args, "--resume"])
    assert code == 2 and stdout == "" and calls == []
    assert err.count("\n") == 1 and err.startswith("fedvote: error: --resume: D holds a sweep that recorded a ")
    assert "relative ledger path ('ledger.db'" in err
    assert "ambiguous" in err and "no longer accepted" in err
    assert "start the sweep again" in err and "with the same flags" in err and "an absolute --ledger" in err
    assert "differ in privacy.ledger" not in err and "also differ" not in err
    # nothing was resumed, charged or written
    assert _snapshot(tmp_path / "D") == before and charges_in(tmp_path / "ledger.db") == 1


def test_a_relative_ledger_refusal_also_names_the_other_differences():
    config = {"method": "pate-fl", "privacy": {"ledger": "l.db"}, "seed": 0}
    plan = {"methods": ["pate-fl"], "grid": {"sigma": [4]}, "seeds": [0], "configs": [config]}
    identity = {**plan, "configs": [{**config, "privacy": {"ledger": "/abs/l.db"}, "seed": 1}]}
    try:
        check_same_sweep(Path("D"), plan, identity)
    except ValueError as error:
        message = str(error)
    else:
        raise AssertionError("the resume was not refused")
    assert message.startswith("resume: D holds a sweep that recorded a relative ledger path ('l.db'")
    assert "its settings also differ in seed;" in message


def test_an_absolute_recorded_ledger_is_still_refused_as_other_settings():
    config = {"privacy": {"ledger": "/a/l.db"}}
    plan = {"methods": ["pate-fl"], "grid": {}, "seeds": [0], "configs": [config]}
    identity = {**plan, "configs": [{"privacy": {"ledger": "/b/l.db"}}]}
    try:
        check_same_sweep(Path("D"), plan, identity)
    except ValueError as error:
        assert "they differ in privacy.ledger" in str(error) and "relative" not in str(error)
    else:
        raise AssertionError("the resume was not refused")
