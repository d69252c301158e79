"""A compare stopped after a charge keeps its finished rows and says what *every* charge cost.

QA found that ``fedvote compare`` interrupted in its second row lost the first row's charged
result (no ``--out`` directory at all) and its abort line stated the stopped row's charges
only (ε 0.65 of a ledger holding ε 4.11). Now the rows done are written (an incomplete
``compare.json`` beside ``charged.json``), and the line and the files cover every charge of
the compare, at both levels, as the ledger holds them. A comparison that cannot be printed
(stdout full) is saved, in one line, not a traceback. Progress off a terminal is plain lines
for compare, label and audit, as for run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fedvote.runner as runner
from fedvote.cli import main
from fedvote.privacy.ledger_audit import ledger_report

# Tiny and fast: 5 agents, 5 queries, 1 epoch, 3 rounds of a logistic DP-FedAvg. The default accountant
# (PLD at δ = 1e-3), the one `fedvote ledger show` states the ledger's spend with.
TINY = ["--dataset", "digits", "--agents", "5", "--queries", "5", "--epochs", "1", "--rounds", "3",
        "--sampling-rate", "1", "--gradient-model", "logistic", "--noise-seed", "1"]  # fmt: skip
METHODS = ["--methods", "pate-fl,dp-fedavg"]
CHARGED = re.compile(
    r"(\d+) release\(s\) were charged before it stopped: agent-level ε (\S+), instance-level ε (\S+) "
    r"at δ = 0\.001 \[pld\], recorded in the ledger (.+) \(federation (records-\w+)\)"
)


def stop_second_row(monkeypatch, error: BaseException) -> None:
    """The second row's run raises ``error`` once its releases are charged (before its result)."""
    calls = []
    real_measure = runner.measure

    def measure(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise error
        return real_measure(*args, **kwargs)

    monkeypatch.setattr(runner, "measure", measure)


def ledger_state(path: Path) -> tuple[int, float, float]:
    """(charges, agent ε, instance ε) the ledger holds, over its one federation."""
    (federation,) = ledger_report(path)
    return len(federation["charges"]), federation["spent"]["agent"], federation["spent"]["instance"]


def test_a_compare_interrupted_in_its_second_row_keeps_the_first_and_states_every_charge(
    tmp_path, monkeypatch, invoke
):
    ledger, out = tmp_path / "cmp.db", tmp_path / "cmp"
    stop_second_row(monkeypatch, KeyboardInterrupt())
    code, _, err = invoke(["compare", *METHODS, *TINY, "--ledger", ledger, "--out", out])
    assert code == 130
    lines = [line for line in err.splitlines() if line.strip()]
    charges, agent, instance = ledger_state(ledger)
    assert charges > 1  # the first row's release and the second row's
    # the abort line covers every charge of the compare: the ledger's figures, not the stopped row's
    assert lines[-1].startswith("fedvote: aborted; ")
    found = CHARGED.fullmatch(lines[-1].removeprefix("fedvote: aborted; "))
    assert found, lines[-1]
    assert int(found[1]) == charges and found[2] == f"{agent:.4f}" and found[3] == f"{instance:.4f}"
    assert lines[-2] == (
        f"fedvote: wrote {out / 'compare.json'} (incomplete; rows done before it stopped: pate-fl) "
        f"and {out / 'charged.json'} (what every row charged)"
    )
    saved = json.loads((out / "compare.json").read_text())
    assert saved["complete"] is False and saved["stopped_by"] == "interrupt"
    assert [row["method"] for row in saved["rows"]] == ["pate-fl"] and saved["methods_without_row"] == ["dp-fedavg"]
    assert 3.9 <= saved["rows"][0]["epsilon_agent"] <= 4.0  # the finished row's result, calibrated to ε 4
    assert saved["charges"] == charges and saved["charged"] == lines[-1].removeprefix("fedvote: aborted; ")
    assert saved["total_epsilon"]["agent"] == pytest.approx(agent, rel=1e-9)
    assert saved["total_epsilon"]["instance"] == pytest.approx(instance, rel=1e-9)
    record = json.loads((out / "charged.json").read_text())
    assert record["charged"] == saved["charged"] and record["result"] is None
    assert record["stopped_by"] == "interrupt" and record["rows_in_compare_json"] == ["pate-fl"]
    assert record["charges"] == charges and record["total_epsilon"] == saved["total_epsilon"]


def test_a_failed_row_without_out_keeps_the_rows_done_beside_the_ledger(tmp_path, monkeypatch, invoke):
    ledger = tmp_path / "cmp.db"
    stop_second_row(monkeypatch, RuntimeError("disk\nfull"))
    code, _, err = invoke(["compare", *METHODS, *TINY, "--ledger", ledger])
    assert code == 1 and "Traceback" not in err
    wrote, failure = err.strip().splitlines()
    (kept,) = tmp_path.glob("fedvote-result-*/compare.json")
    assert wrote.startswith(f"fedvote: wrote {kept} (incomplete; rows done before it stopped: pate-fl)")
    assert failure.startswith("fedvote: error: the run failed after releases were charged: RuntimeError: disk full")
    charges, agent, _ = ledger_state(ledger)
    found = CHARGED.fullmatch(failure.split("; ", 1)[1])
    assert found and int(found[1]) == charges and found[2] == f"{agent:.4f}"
    saved = json.loads(kept.read_text())
    assert saved["complete"] is False and saved["stopped_by"].startswith("RuntimeError: disk full")
    assert [row["method"] for row in saved["rows"]] == ["pate-fl"] and saved["charges"] == charges


def test_a_compare_stopped_before_any_charge_writes_nothing(tmp_path, monkeypatch, invoke):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "execute", interrupted)
    out = tmp_path / "cmp"
    code, _, err = invoke(["compare", *METHODS, *TINY, "--out", out])
    assert code == 130 and err.strip() == "fedvote: aborted"
    assert not out.exists()


def test_a_compare_whose_stdout_is_full_saves_its_result_and_logs_progress(tmp_path):
    """``fedvote compare > /dev/full 2> err``: no traceback, the result kept, one error line; progress lines."""
    ledger, log = tmp_path / "cmp.db", tmp_path / "err.log"
    with open("/dev/full", "w") as full, log.open("w") as stderr:
        done = subprocess.run([sys.executable, "-m", "fedvote.cli", "compare", *METHODS, *TINY, "--ledger",
                               str(ledger)], stdout=full, stderr=stderr, timeout=600)  # fmt: skip
    lines = log.read_text().splitlines()
    assert done.returncode == 1, lines
    progress = [line for line in lines if line.startswith("fedvote compare [")]
    assert all(re.fullmatch(r"fedvote compare \[\d+:\d\d\] .+: (started.*|\d+/\d+, ETA \d+:\d\d|done in \d+:\d\d)", x)
               for x in progress)  # fmt: skip
    for phase in ("training teachers", "training the student", "evaluating and accounting"):
        assert any(phase in x for x in progress), progress
    (error,) = [line for line in lines if line not in progress]
    (kept,) = tmp_path.glob("fedvote-result-*/compare.json")
    assert error == (
        f"fedvote: error: cannot print the comparison on stdout (No space left on device); it is saved in {kept}"
    )
    saved = json.loads(kept.read_text())
    assert saved["complete"] is True and [row["method"] for row in saved["rows"]] == ["pate-fl", "dp-fedavg"]
    assert saved["charges"] == ledger_state(ledger)[0]


def run_with_stderr_in(log: Path, argv: list[str], monkeypatch) -> int:
    """``fedvote argv`` in process, its stderr a file (not a terminal, not captured)."""
    with log.open("w") as stderr:
        monkeypatch.setattr(sys, "stderr", stderr)
        with pytest.raises(SystemExit) as exit_info:
            main([str(arg) for arg in argv])
            raise SystemExit(0)
    monkeypatch.undo()
    return int(exit_info.value.code or 0)


def test_label_and_audit_log_a_line_per_phase_when_stderr_is_a_file(tmp_path, monkeypatch, digits):
    queries = tmp_path / "q.npy"
    np.save(queries, digits.features[:4].reshape(4, -1))
    small = ["--agents", "3", "--epochs", "1", "--teacher-model", "logistic", "--sigma", "5", "--noise-seed", "1"]
    for command, argv, phase in [
        ("label", ["label", *small, "--accountant", "exact", "--queries", queries, "--json"], "training"),
        ("audit", ["audit", "--method", "pate-fl", "--level", "agent", "--trials", "50", *small, "--json"],
         "releasing on D and D'"),
    ]:  # fmt: skip
        log = tmp_path / f"{command}.log"
        assert run_with_stderr_in(log, argv, monkeypatch) == 0, log.read_text()
        lines = log.read_text().splitlines()
        assert lines and all(
            re.fullmatch(rf"fedvote {command} \[\d+:\d\d\] .+: (started.*|done in \d+:\d\d)", x) for x in lines
        ), lines
        assert any(phase in x and "started" in x for x in lines), lines
