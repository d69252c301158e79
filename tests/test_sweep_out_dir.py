"""``fedvote sweep --out D`` never replaces what D holds, and one sweep at a time writes D (issue 47, defect 5).

Two sweeps into one D at once both exited 0, both said they wrote ``D/sweep.json``, and
only the second grid survived; a new sweep into a finished sweep's D replaced it and
deleted its ``points/*.json`` while their ledger charges stayed. Now a fresh sweep refuses
a non-empty D unless ``--overwrite`` (``--resume`` continues the sweep there), and the
sweep holding D's lock (``D/.lock``) is the only one writing it: another is refused in one
line naming ``--out``. Both refusals come before anything is trained or charged, and leave
D as it was.
"""

from __future__ import annotations

import fcntl
import json
import os

import pytest

import fedvote.sweep.execute as execute_module
from fedvote.privacy.ledger import ledger_report
from fedvote.sweep.lock import LOCK_NAME

SMALL = ["--agents", "10", "--queries", "40", "--epochs", "2", "--teacher-model", "logistic",
         "--student-model", "logistic", "--self-training-rounds", "0", "--noise-seed", "0",
         "--accountant", "rdp"]  # fmt: skip


def record_runs(monkeypatch, during=None) -> list:
    """Record the sweep's per-point runs (calling ``during(config)`` inside each)."""
    calls = []
    real_run = execute_module.run

    def run(config, **kwargs):
        calls.append(config)
        if during is not None:
            during(config)
        return real_run(config, **kwargs)

    monkeypatch.setattr(execute_module, "run", run)
    return calls


def snapshot(out):
    return {path.relative_to(out): path.read_bytes() for path in out.rglob("*") if path.is_file()}


def charges_in(ledger) -> int:
    return sum(len(federation["charges"]) for federation in ledger_report(ledger))


def test_a_sweep_into_a_finished_sweep_directory_is_refused_unless_overwrite(tmp_path, monkeypatch, invoke):
    out, ledger = tmp_path / "S", tmp_path / "ledger.db"
    args = ["sweep", *SMALL, "--ledger", str(ledger), "--out", str(out)]
    code, _, err = invoke([*args, "--grid", "sigma=8"])
    assert code == 0, err
    before = snapshot(out)
    calls = record_runs(monkeypatch)
    code, stdout, err = invoke([*args, "--grid", "sigma=4,16"])
    assert code == 2 and stdout == "" and err.count("\n") == 1
    assert err.startswith(f"fedvote: error: --out: {out} holds a finished sweep (1 point); ")
    assert "--overwrite" in err
    assert calls == [] and charges_in(ledger) == 1 and snapshot(out) == before

    code, _, err = invoke([*args, "--grid", "sigma=4,16", "--overwrite"])
    assert code == 0, err
    assert [config.privacy.sigma for config in calls] == [4.0, 16.0]
    saved = json.loads((out / "sweep.json").read_text())
    assert [row["sigma"] for row in saved["rows"]] == [4.0, 16.0]
    assert sorted(path.name for path in (out / "points").glob("[0-9]*.json")) == ["1.json", "2.json"]


def test_a_sweep_into_a_directory_holding_other_files_is_refused_before_any_charge(tmp_path, monkeypatch, invoke):
    out, ledger = tmp_path / "S", tmp_path / "ledger.db"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    calls = record_runs(monkeypatch)
    code, _, err = invoke(["sweep", *SMALL, "--grid", "sigma=8", "--ledger", str(ledger), "--out", str(out)])
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"fedvote: error: --out: {out} is not empty (it holds notes.txt); ")
    assert calls == [] and not ledger.exists()
    assert snapshot(out) == {out.joinpath("notes.txt").relative_to(out): b"mine\n"}


def test_resume_and_overwrite_together_are_refused(tmp_path, invoke):
    code, _, err = invoke(["sweep", *SMALL, "--grid", "sigma=8", "--out", str(tmp_path / "S"), "--resume",
                           "--overwrite"])  # fmt: skip
    assert code == 2 and err.startswith("fedvote: error: --overwrite: ") and err.count("\n") == 1
    assert not (tmp_path / "S").exists()


def hold_lock(out):
    """Lock ``out/.lock`` as another sweep would; returns the descriptor holding it."""
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


@pytest.mark.parametrize("extra", [[], ["--overwrite"]])
def test_a_sweep_into_a_directory_another_sweep_holds_is_refused_in_one_line(tmp_path, monkeypatch, invoke, extra):
    out, ledger = tmp_path / "S", tmp_path / "ledger.db"
    fd = hold_lock(out)
    try:
        calls = record_runs(monkeypatch)
        args = ["sweep", *SMALL, "--grid", "sigma=8", "--ledger", str(ledger), "--out", str(out), *extra]
        code, stdout, err = invoke(args)
    finally:
        os.close(fd)
    assert code == 2 and stdout == "" and err.count("\n") == 1
    assert err.startswith(f"fedvote: error: --out: another sweep holds {out} ")
    assert calls == [] and not ledger.exists()
    assert [path.name for path in out.iterdir()] == [LOCK_NAME]


def test_a_sweep_holds_its_directory_locked_while_it_runs_and_lets_go_after(tmp_path, monkeypatch, invoke):
    out = tmp_path / "S"
    held = []

    def try_lock(_config):
        fd = os.open(out / LOCK_NAME, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held.append(False)
        except BlockingIOError:
            held.append(True)
        finally:
            os.close(fd)

    record_runs(monkeypatch, during=try_lock)
    code, _, err = invoke(["sweep", *SMALL, "--grid", "sigma=8,16", "--out", str(out)])
    assert code == 0, err
    assert held == [True, True]
    os.close(hold_lock(out))  # free again once the sweep is over
