"""One line, not a traceback (issue 18, item 3), for the issue's examples as written.

`--seed -1`, `--noise-seed -1`, `--seed 99999999999999999999999`, `--sigma 1e308` (an
overflow after 14 s of work), `--ledger notes.txt` (whose format check is item 4's) and
`fedvote deploy server --data agent-0.npz` (a Flower ServerApp traceback, and "see the
log" pointing at a log already deleted).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from fedvote.cli import main

TINY = ["--agents", "3", "--epochs", "1", "--teacher-model", "logistic", "--student-model", "logistic",
        "--queries", "5", "--self-training-rounds", "0"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--seed", "-1"], "--seed: must be an integer from 0 to 4294967295, got -1"),
        (["--noise-seed", "-1"], "--noise-seed: must be an integer from 0 to 9223372036854775807, got -1"),
        (["--seed", "99999999999999999999999"],
         "--seed: must be an integer from 0 to 4294967295, got 99999999999999999999999"),
        (["--sigma", "1e308"],
         "--sigma: must be at most 1e+06 (noise that drowns every release: ε ≈ 0, nothing is learned), got 1e+308"),
    ],
)
def test_bad_seeds_and_a_huge_sigma_are_one_line_before_any_work(flags, message, tmp_path, invoke):
    started = time.perf_counter()
    code, out, err = invoke(["run", *TINY, *flags, "--out", str(tmp_path / "out"),
                             "--ledger", str(tmp_path / "l.db")])
    assert code == 2
    assert err.strip() == f"fedvote: error: {message}"
    assert out == "" and not (tmp_path / "out").exists() and not (tmp_path / "l.db").exists()
    assert time.perf_counter() - started < 5  # refused up front, not after 14 s of work


def test_the_largest_seeds_run(invoke):
    code, out, err = invoke(["run", *TINY, "--sigma", "2", "--seed", "4294967295",
                             "--noise-seed", "9223372036854775807", "--json"])
    assert code == 0, err
    assert json.loads(out)["config"]["seed"] == 4294967295


def test_a_ledger_that_is_a_text_file_is_refused_in_one_line(tmp_path, invoke):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    code, _, err = invoke(["run", *TINY, "--sigma", "2", "--ledger", str(notes)])
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("fedvote: error: --ledger: ")
    assert notes.read_text() == "my notes\n"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    root = tmp_path_factory.mktemp("deploy")
    (root / "run.json").write_text(json.dumps({"federation": {"agents": 3}, "queries": 5,
                                               "teacher": {"model": "logistic", "epochs": 1}}))
    with pytest.raises(SystemExit) as exit_info:
        main(["deploy", "split", "--config", str(root / "run.json"), "--out", str(root / "fed")])
        raise SystemExit(0)
    assert exit_info.value.code == 0
    return root / "fed"


def test_deploy_server_refuses_an_agent_file_as_data_before_flower_starts(deployment, tmp_path, monkeypatch, invoke):
    """`fedvote deploy server --data agent-0.npz`: one line naming the file's role; Flower never starts."""
    import fedvote.cli.deploy as deploy

    def no_flower(*args, **kwargs):
        raise AssertionError("Flower was started")

    monkeypatch.setattr(deploy, "_flower_executable", no_flower)
    agent_file = deployment / "agent-0.npz"
    code, _, err = invoke(["deploy", "server", "--config", str(deployment / "run.json"), "--data", str(agent_file),
                           "--out", str(tmp_path / "out"), "--insecure"])
    assert code == 2
    assert err.strip() == (
        f"fedvote: error: --data: {agent_file} is no fedvote server file: it is an agent's file "
        "(agent-<i>.npz from fedvote deploy split); give the server's file (server.npz from fedvote deploy split)"
    )
    assert not (tmp_path / "out" / "result.json").exists()


def test_a_failed_deployment_names_a_log_that_is_still_there(deployment, tmp_path, monkeypatch, invoke):
    """"see the log" pointed at a log already deleted with Flower's temporary home."""
    import fedvote.cli.deploy as deploy

    script = "import time; print('ServerApp: Traceback (most recent call last): boom', flush=True); time.sleep(60)"
    monkeypatch.setattr(deploy, "_superlink_command", lambda host, port, tls: [sys.executable, "-c", script])
    monkeypatch.setattr(deploy, "_wait_for_port", lambda *args, **kwargs: time.sleep(1.0))
    monkeypatch.setattr(deploy, "_flower_executable", lambda name: name)
    monkeypatch.setattr(deploy, "run_foreground", lambda command, home: 1)  # flwr run failed
    code, _, err = invoke(["deploy", "server", "--config", str(deployment / "run.json"),
                           "--data", str(deployment / "server.npz"), "--out", str(tmp_path / "out"),
                           "--insecure"])
    assert code == 1
    line = err.strip().splitlines()[-1]
    prefix = "fedvote: error: the run wrote no result (flwr run exited with 1); the SuperLink's log (with the " \
             "ServerApp's output) is kept at "
    assert line.startswith(prefix)
    log = Path(line.removeprefix(prefix))
    try:
        assert "boom" in log.read_text()
    finally:
        import shutil

        shutil.rmtree(log.parent, ignore_errors=True)
