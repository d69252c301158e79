"""A Ctrl-C during ``fedvote sweep --out D`` keeps every completed point; ``--resume`` runs the rest (issue 18, item 5).

Each point's row is written to ``D/points/<n>.json`` as it completes; an interrupted sweep
rewrites ``D/sweep.json`` with the rows so far; ``--resume`` refuses another sweep's
directory in one line, skips the completed points (not rerun, not charged again: the
budget check covers only the remaining ones) and shows progress as plain lines on a
stderr that is not a terminal. A sweep that recorded a relative ``--ledger`` (started
before e8d909d) stays refused — resolved from another directory it names another file,
splitting the federation's budget — with a line that says why and what to do.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import fedvote.sweep.execute as sweep_module
from fedvote.cli import main
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.models.training import TrainingConfig
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.ledger import compose_releases, ledger_report
from fedvote.privacy.noise_seeds import run_noise_seed
from fedvote.runner import make_federation, planned_release
from fedvote.sweep import format_duration, point_config
from fedvote.sweep.identity import check_same_sweep

# Tiny settings; the RDP accountant because it is fast (the ledger computes ε at every charge).
SMALL = ["--agents", "10", "--queries", "40", "--epochs", "2", "--teacher-model", "logistic",
         "--student-model", "logistic", "--self-training-rounds", "0", "--noise-seed", "0",
         "--accountant", "rdp"]  # fmt: skip


def interrupt_at(monkeypatch, call: int | None) -> list:
    """Make the sweep's per-point run raise KeyboardInterrupt (a Ctrl-C) on its ``call``-th call; record the calls."""
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


def test_a_ctrl_c_during_sweep_out_keeps_the_completed_points_and_resume_runs_the_rest(tmp_path, monkeypatch, invoke):
    """The issue's example: Ctrl-C during ``fedvote sweep --out D`` after the 2nd of 4 points."""
    out, ledger = tmp_path / "D", tmp_path / "ledger.db"
    args = ["sweep", "--method", "pate-fl", *SMALL, "--grid", "epsilon=1,2,4,8", "--ledger", str(ledger),
            "--out", str(out)]  # fmt: skip
    calls = interrupt_at(monkeypatch, 3)
    code, _, err = invoke(args)
    assert code == 130 and len(calls) == 3
    assert "interrupted with 2 of 4 points done" in err and "--resume" in err
    # the two completed points are on disk, each in its own file, and in sweep.json
    assert sorted(path.name for path in (out / "points").iterdir()) == ["1.json", "2.json", "charges.jsonl",
                                                                         "plan.json"]  # fmt: skip
    rows = [json.loads((out / "points" / f"{n}.json").read_text())["row"] for n in (1, 2)]
    assert [row["point"] for row in rows] == [{"epsilon": 1.0}, {"epsilon": 2.0}]
    partial = json.loads((out / "sweep.json").read_text())
    assert partial["sweep"]["complete"] is False and partial["rows"] == rows
    assert (partial["sweep"]["points_done"], partial["sweep"]["points_total"]) == (2, 4)
    assert (out / "sweep.csv").read_text().count("\n") == 3  # header and two rows
    assert charges_in(ledger) == 2

    calls = interrupt_at(monkeypatch, None)
    code, _, err = invoke([*args, "--resume"])
    assert code == 0, err
    # exactly the remaining points ran, with the noise seeds an uninterrupted sweep gives them
    assert [config.privacy.epsilon for config in calls] == [4.0, 8.0]
    assert [config.privacy.noise_seed for config in calls] == [run_noise_seed(0, "pate-fl", k) for k in (2, 3)]
    assert charges_in(ledger) == 4  # the first two points were not charged again
    final = json.loads((out / "sweep.json").read_text())
    assert final["sweep"]["complete"] is True and final["sweep"]["points_done"] == 4
    assert [row["point"]["epsilon"] for row in final["rows"]] == [1.0, 2.0, 4.0, 8.0]
    assert final["rows"][:2] == rows
    # the total ε of all points: the resumed points' charges, kept with their rows, and the new ones
    (state,) = final["ledgers"]
    assert final["total_epsilon"]["agent"] == pytest.approx(state["spent_agent_epsilon"], rel=1e-9)
    assert (state["charges"], state["charges_before_resume"]) == (4, 2)  # the sweep's, across the resume
    # progress: plain lines on a stderr that is not a terminal, counting the resumed points
    lines = [line for line in err.splitlines() if line.startswith("fedvote sweep: point")]
    assert len(lines) == 2
    assert re.fullmatch(r"fedvote sweep: point 3/4 done \(pate-fl seed 0 at epsilon=4\), ETA \d+ s", lines[0])
    assert re.fullmatch(r"fedvote sweep: point 4/4 done \(pate-fl seed 0 at epsilon=8\), ETA 0 s", lines[1])


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """``fedvote sweep --grid sigma=4,8,16`` in D, interrupted after its first point: (args, D).

    Shared by the tests that must leave it as it is (they check that they do).
    """
    out = tmp_path_factory.mktemp("interrupted") / "D"
    args = ["sweep", "--method", "pate-fl", *SMALL, "--out", str(out)]
    with pytest.MonkeyPatch.context() as monkeypatch:
        interrupt_at(monkeypatch, 2)
        with pytest.raises(SystemExit) as exit_info:
            main([*args, "--grid", "sigma=4,8,16"])
    assert exit_info.value.code == 130 and (out / "points" / "1.json").exists()
    return args, out


def _snapshot(out):
    return {path.relative_to(out): path.read_bytes() for path in out.rglob("*") if path.is_file()}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--grid", "sigma=4,8"], "holds a sweep over another grid (sigma=4,8,16, not sigma=4,8); resume with the "
                                  "flags it was started with, or write to another directory"),
        (["--grid", "sigma=4,8,16", "--epochs", "3"], "holds a sweep with other settings (they differ in "
                                                      "student.epochs, teacher.epochs)"),
        (["--grid", "sigma=4,8,16", "--seeds", "0,1"], "holds a sweep with seeds 0, not 0,1"),
        (["--grid", "sigma=4,8,16", "--method", "pate-fl,majority-vote"], "holds a sweep of pate-fl, not "
                                                                           "pate-fl,majority-vote"),
    ],
)
def test_resume_with_another_grid_or_settings_is_refused_in_one_line(interrupted, monkeypatch, invoke, extra, message):
    args, out = interrupted
    before = _snapshot(out)
    calls = interrupt_at(monkeypatch, None)
    code, stdout, err = invoke([*args, *extra, "--resume"])
    assert code == 2 and stdout == "" and calls == []
    assert err.startswith("fedvote: error: --resume: ") and err.count("\n") == 1
    assert message in err
    assert _snapshot(out) == before


def test_a_fresh_sweep_over_an_unfinished_one_is_refused_and_resume_needs_a_sweep(interrupted, tmp_path, invoke):
    args, out = interrupted
    before = _snapshot(out)
    code, _, err = invoke([*args, "--grid", "sigma=4,8,16"])
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"fedvote: error: --out: {out} holds an unfinished sweep (1 of 3 points done); "
                          "continue it with --resume")
    elsewhere = tmp_path / "empty"
    code, _, err = invoke([*args[:-1], str(elsewhere), "--grid", "sigma=4,8,16", "--resume"])
    assert code == 2 and err.strip() == (
        f"fedvote: error: --resume: {elsewhere} holds no sweep to resume (no {elsewhere}/points/plan.json)"
    )
    assert not elsewhere.exists() and _snapshot(out) == before


def test_a_sweep_interrupted_before_its_first_point_leaves_nothing(tmp_path, monkeypatch, invoke):
    out = tmp_path / "D"
    interrupt_at(monkeypatch, 1)
    code, _, _ = invoke(["sweep", *SMALL, "--grid", "sigma=4,8", "--out", str(out)])
    assert code == 130 and not out.exists()


def test_resume_checks_the_budget_against_the_remaining_points_only(tmp_path, monkeypatch, invoke):
    """A budget that holds the four points but not six: resuming after two must be admitted, and charge two."""
    sigmas = [6.0, 8.0, 10.0, 12.0]
    config = RunConfig(
        federation=FederationConfig(agents=10),
        privacy=PrivacyConfig(noise_seed=0, accountant="rdp"),
        teacher=TrainingConfig(model="logistic", epochs=2),
        student=TrainingConfig(model="logistic", epochs=2),
        queries=40,
        self_training_rounds=0,
    )
    federation = make_federation(config)
    planned = [planned_release(point_config(config, {"sigma": sigma}), federation) for sigma in sigmas]

    def epsilon(releases):
        return epsilon_for(compose_releases(releases, "agent"), 1e-3, "rdp")

    all_four, six = epsilon(planned), epsilon(planned + planned[:2])
    budget = (all_four + six) / 2  # admits the four points, refuses the four again after two
    assert all_four < budget < six
    out, ledger = tmp_path / "D", tmp_path / "ledger.db"
    args = ["sweep", *SMALL, "--grid", "sigma=" + ",".join(f"{s:g}" for s in sigmas), "--ledger", str(ledger),
            "--budget-epsilon", f"{budget!r}", "--out", str(out)]  # fmt: skip
    interrupt_at(monkeypatch, 3)
    code, _, _ = invoke(args)
    assert code == 130 and charges_in(ledger) == 2
    calls = interrupt_at(monkeypatch, None)
    code, _, err = invoke([*args, "--resume"])
    assert code == 0, err
    assert len(calls) == 2 and charges_in(ledger) == 4
    saved = json.loads((out / "sweep.json").read_text())
    assert [row["sigma"] for row in saved["rows"]] == sigmas
    assert saved["total_epsilon"]["agent"] == pytest.approx(all_four, rel=1e-9)


def test_format_duration():
    assert [format_duration(s) for s in (0, 40.4, 60, 185, 7800)] == ["0 s", "40 s", "1 min 00 s", "3 min 05 s",
                                                                      "2 h 10 min"]


def interrupt_after_charge(monkeypatch, call: int) -> list:
    """Make the ``call``-th point run in full — charged and released — then raise KeyboardInterrupt before its row is kept."""
    calls = []
    real_run = sweep_module.run

    def run(config, **kwargs):
        calls.append(config)
        outcome = real_run(config, **kwargs)
        if len(calls) == call:
            raise KeyboardInterrupt
        return outcome

    monkeypatch.setattr(sweep_module, "run", run)
    return calls


def test_a_resumed_sweep_reports_the_charge_of_the_point_interrupted_after_its_release(tmp_path, monkeypatch, invoke):
    """Issue 47, defect 6: stopped in point 3 after its release, then resumed, the sweep reported less than the ledger.

    Point 3 runs again on resume, a second release charged again (the ledger cannot tell it
    repeats the first), so the ledger holds five charges; the sweep's total must compose all five.
    """
    out, ledger = tmp_path / "D", tmp_path / "ledger.db"
    args = ["sweep", "--method", "pate-fl", *SMALL, "--grid", "epsilon=1,2,4,8", "--ledger", str(ledger),
            "--out", str(out)]  # fmt: skip
    interrupt_after_charge(monkeypatch, 3)
    code, _, _ = invoke(args)
    assert code == 130 and charges_in(ledger) == 3
    calls = interrupt_at(monkeypatch, None)
    code, stdout, err = invoke([*args, "--resume"])
    assert code == 0, err
    assert [config.privacy.epsilon for config in calls] == [4.0, 8.0]
    assert charges_in(ledger) == 5  # point 3's first release and its second
    final = json.loads((out / "sweep.json").read_text())
    (state,) = final["ledgers"]
    assert final["total_epsilon"]["agent"] == pytest.approx(state["spent_agent_epsilon"], rel=1e-9, abs=1e-9)
    assert final["total_epsilon"]["instance"] == pytest.approx(state["spent_instance_epsilon"], rel=1e-9, abs=1e-9)
    # the count is of the charges the totals compose: all five, three of them before the resume
    assert (state["charges"], state["charges_before_resume"]) == (5, 3)
    (line,) = [line for line in stdout.splitlines() if line.startswith(f"ledger {ledger}:")]
    assert " charged 5 time(s) by this sweep (3 of them before --resume), has spent agent-level ε = " in line


def test_a_sweep_interrupted_after_its_first_charge_keeps_its_directory_for_resume(tmp_path, monkeypatch, invoke):
    """Stopped after point 1's release but before its row: the charge is spent, so the directory stays resumable."""
    out = tmp_path / "D"
    args = ["sweep", *SMALL, "--grid", "sigma=8,16", "--out", str(out)]
    interrupt_after_charge(monkeypatch, 1)
    code, _, err = invoke(args)
    assert code == 130 and (out / "points" / "plan.json").exists()
    assert "--resume" in err
    calls = interrupt_at(monkeypatch, None)
    code, _, err = invoke([*args, "--resume"])
    assert code == 0, err
    assert [config.privacy.sigma for config in calls] == [8.0, 16.0]
    final = json.loads((out / "sweep.json").read_text())
    # point 1 charged twice (its first release and the resumed one), point 2 once
    charged = [planned_release(config, make_federation(config)) for config in (calls[0], *calls)]
    assert final["total_epsilon"]["agent"] == pytest.approx(
        epsilon_for(compose_releases(charged, "agent"), 1e-3, "rdp"), rel=1e-9
    )


# --- a sweep that recorded a relative ledger -------------------------------------------------


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
