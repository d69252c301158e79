"""A ledger nothing splits, a result never lost to stdout, a bad --ledger refused before anything
is loaded, and an --out directory that holds one run's outcome at a time.

1. The ledger path is recorded absolute, so ``fedvote run --config DIR/result.json`` from
   another directory charges the same ledger; a recorded config whose ledger is missing is
   refused (it would start a new ledger with the recorded budget and split the spend).
2. A result stdout cannot take (full, closed) is saved as a result --out cannot take is,
   one line says where, exit 1.
3. ``--ledger`` is probed before the data is loaded: a missing or non-directory parent, a
   text file, a damaged SQLite file, a device are one line naming --ledger, exit 2.
4. ``--out DIR`` never presents two runs as one: an interrupted run moves an earlier
   result aside, a result replaces an earlier charged.json.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import fedvote.privacy.ledger_store as ledger_store
import fedvote.runner as runner
from fedvote.cli import app
from fedvote.errors import ConfigError
from fedvote.settings import build_config

# Tiny and fast: σ given (no calibration), the exact accountant, 3 logistic teachers.
TINY = ["--agents", "3", "--queries", "5", "--epochs", "1", "--teacher-model", "logistic",
        "--student-model", "logistic", "--self-training-rounds", "0", "--noise-seed", "1",
        "--sigma", "5", "--accountant", "exact"]  # fmt: skip


def one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if not line.startswith("fedvote run [")]
    assert len(lines) == 1, err
    assert lines[0].startswith("fedvote: error: ") and "Traceback" not in err
    return lines[0]


def ledger_charges(ledger: Path, invoke) -> int:
    code, out, err = invoke(["ledger", "show", ledger, "--json"])
    assert code == 0, err
    return sum(len(entry["charges"]) for entry in json.loads(out))


def listing(directory: Path) -> list[str]:
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*"))


# --- 1: the ledger path is recorded absolute; a recorded, missing ledger is refused --------------


def test_a_relative_ledger_is_recorded_absolute_and_a_rerun_elsewhere_charges_it(tmp_path, invoke, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = invoke(["run", *TINY, "--ledger", "rel.db", "--budget-epsilon", "50", "--out", "rr"])
    assert code == 0, err
    recorded = json.loads((tmp_path / "rr" / "result.json").read_text())
    assert recorded["config"]["privacy"]["ledger"] == str(tmp_path / "rel.db")
    assert ledger_charges(tmp_path / "rel.db", invoke) == 1
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    code, _, err = invoke(["run", "--config", "../rr/result.json"])
    assert code == 0, err
    assert os.listdir(tmp_path / "sub") == []  # no second ledger here
    assert ledger_charges(tmp_path / "rel.db", invoke) == 2  # the same federation's ledger, charged again


def test_fedvote_run_keywords_and_every_flag_path_record_the_ledger_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert build_config(ledger="l.db").privacy.ledger == str(tmp_path / "l.db")
    assert build_config(ledger=Path("d/../l.db")).privacy.ledger == str(tmp_path / "l.db")
    assert build_config(ledger=str(tmp_path / "x.db")).privacy.ledger == str(tmp_path / "x.db")
    assert build_config().privacy.ledger is None
    with pytest.raises(ConfigError) as refused:
        build_config(ledger="")
    assert refused.value.argument == "ledger"
    assert os.listdir(tmp_path) == []  # probed, nothing left behind


def test_a_recorded_config_whose_ledger_is_missing_is_refused(
    tmp_path, invoke, monkeypatch, no_run, relative_ledger_result
):
    recorded = relative_ledger_result([*TINY, "--budget-epsilon", "50"])
    no_run.clear()
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    code, stdout, err = invoke(["run", "--config", recorded])
    assert code == 2 and stdout == ""
    line = one_error_line(err)
    assert line.startswith(f"fedvote: error: --config: {recorded}: privacy.ledger: the ledger recorded, rel.db ")
    assert str(tmp_path / "sub" / "rel.db") in line and "is missing" in line and "split" in line
    assert no_run == [] and os.listdir(tmp_path / "sub") == []  # nothing trained, nothing created
    # Where it was recorded, the relative path names the ledger: the rerun charges it.
    monkeypatch.chdir(tmp_path)
    code, _, err = invoke(["run", "--config", recorded, "--out", "again"])
    assert code == 0, err
    again = json.loads((tmp_path / "again" / "result.json").read_text())
    assert again["config"]["privacy"]["ledger"] == str(tmp_path / "rel.db")
    assert ledger_charges(tmp_path / "rel.db", invoke) == 2


def test_a_hand_written_config_may_start_a_new_ledger(tmp_path, invoke, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = {
        "federation": {"agents": 3},
        "privacy": {"sigma": 5.0, "accountant": "exact", "ledger": "hand.db", "noise_seed": 1},
        "teacher": {"model": "logistic", "epochs": 1},
        "student": {"model": "logistic", "epochs": 1},
        "queries": 5,
        "self_training_rounds": 0,
    }
    (tmp_path / "hand.json").write_text(json.dumps(config))
    code, stdout, err = invoke(["run", "--config", "hand.json", "--json"])
    assert code == 0, err
    assert json.loads(stdout)["config"]["privacy"]["ledger"] == str(tmp_path / "hand.db")
    assert ledger_charges(tmp_path / "hand.db", invoke) == 1


# --- 2: a result stdout cannot take is saved, one line, exit 1 --------------------------------------


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "summary"])
def test_a_result_stdout_cannot_take_is_saved_beside_the_ledger(tmp_path, as_json):
    ledger = tmp_path / "full.db"
    argv = ["run", *TINY, "--ledger", str(ledger), *(["--json"] if as_json else [])]
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "fedvote.cli", *argv], stdout=full, stderr=subprocess.PIPE, text=True,
            timeout=300, cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    line = one_error_line(done.stderr)
    (saved,) = tmp_path.glob("fedvote-result-*/result.json")
    assert line == f"fedvote: error: cannot print the result on stdout (No space left on device); it was saved to {saved}"
    result = json.loads(saved.read_text())
    assert result["ledger"]["path"] == str(ledger) and result["accuracy"] is not None


@pytest.mark.parametrize("with_out", [True, False])
def test_a_result_a_closed_stdout_cannot_take_is_saved(tmp_path, invoke, monkeypatch, with_out):
    ledger, out = tmp_path / "l.db", tmp_path / "out"
    monkeypatch.setattr(sys, "stdout", None)  # started with stdout closed
    code, _, err = invoke(["run", *TINY, "--ledger", ledger, *(["--out", out] if with_out else [])])
    assert code == 1
    if with_out:
        assert err.strip().splitlines()[-2] == f"wrote {out / 'result.json'}"
        saved = out / "result.json"
        assert [p.name for p in tmp_path.glob("fedvote-result-*")] == []
    else:
        one_error_line(err)
        (saved,) = tmp_path.glob("fedvote-result-*/result.json")  # beside the ledger
    assert err.strip().splitlines()[-1] == (
        f"fedvote: error: cannot print the result on stdout (standard output is closed); it was saved to {saved}"
    )
    assert json.loads(saved.read_text())["ledger"]["path"] == str(ledger)


# --- 3: --ledger is probed before anything is loaded ----------------------------------------------


def damaged_sqlite(path: Path) -> Path:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (x)")
        db.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 50)
    db.close()
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the first page's b-tree overwritten
    path.write_bytes(bytes(data))
    return path


def bad_ledger(kind: str, tmp_path: Path) -> tuple[str, str]:
    """A --ledger no run could charge to, and what its one line says."""
    if kind == "proc":
        return "/proc/x/l.db", "the directory /proc/x does not exist"
    if kind == "text":
        (tmp_path / "notes.txt").write_text("my notes\n")
        return str(tmp_path / "notes.txt"), "is not a fedvote ledger (not an SQLite database)"
    if kind == "damaged":
        return str(damaged_sqlite(tmp_path / "damaged.db")), "damaged.db is damaged: SQLite cannot read it"
    if kind == "file-as-parent":
        (tmp_path / "afile").write_text("x")
        return str(tmp_path / "afile" / "x.db"), f"{tmp_path / 'afile'} is not a directory"
    if kind == "directory":
        (tmp_path / "adir").mkdir()
        return str(tmp_path / "adir"), "is a directory"  # the command line's own check says so first
    if kind == "device":
        return "/dev/null", "/dev/null is not a regular file"
    raise AssertionError(kind)


KINDS = ["proc", "text", "damaged", "file-as-parent", "directory", "device"]
NAMES_LEDGER = ("fedvote: error: --ledger: ", "fedvote: error: Invalid value for '--ledger': ")


@pytest.mark.parametrize("kind", KINDS)
def test_a_bad_ledger_is_refused_before_the_data_is_loaded(kind, tmp_path, invoke, monkeypatch, no_run):
    ledger, says = bad_ledger(kind, tmp_path)
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    loaded = []
    monkeypatch.setattr(runner, "make_federation", lambda *a, **k: loaded.append(a))
    code, stdout, err = invoke(["run", *TINY, "--ledger", ledger, "--out", tmp_path / "out"])
    assert code == 2 and stdout == ""
    line = one_error_line(err)
    assert line.startswith(NAMES_LEDGER) and says in line, line
    assert no_run == [] and loaded == []
    after = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    assert after == before  # nothing created, nothing changed (the probe left no file)


@pytest.mark.parametrize("kind", KINDS)
def test_the_python_api_and_sweep_refuse_a_bad_ledger_too(kind, tmp_path, invoke):
    ledger, says = bad_ledger(kind, tmp_path)
    with pytest.raises(ConfigError) as refused:
        build_config(ledger=ledger)
    assert refused.value.argument == "ledger" and says in refused.value.detail
    code, _, err = invoke(["sweep", *TINY, "--grid", "sigma=5,6", "--ledger", ledger, "--out", tmp_path / "s"])
    assert code == 2 and one_error_line(err).startswith(NAMES_LEDGER)


def test_a_damaged_ledger_made_by_fedvote_is_refused_by_the_probe(tmp_path, invoke):
    ledger = tmp_path / "l.db"
    code, _, err = invoke(["run", *TINY, "--ledger", ledger])
    assert code == 0, err
    data = bytearray(ledger.read_bytes())
    data[len(data) // 2 :] = b"\x00" * (len(data) - len(data) // 2)
    ledger.write_bytes(bytes(data))
    with pytest.raises(ConfigError) as refused:
        ledger_store.probe(ledger)
    assert refused.value.argument == "ledger" and "damaged" in refused.value.detail
    assert ledger.read_bytes() == bytes(data)


def test_the_probe_passes_a_new_path_an_empty_file_and_a_ledger_and_leaves_them_as_they_were(tmp_path, invoke):
    ledger_store.probe(tmp_path / "new.db")
    assert os.listdir(tmp_path) == []
    (tmp_path / "empty.db").write_bytes(b"")
    ledger_store.probe(tmp_path / "empty.db")
    ledger = tmp_path / "l.db"
    code, _, err = invoke(["run", *TINY, "--ledger", ledger])
    assert code == 0, err
    held = ledger.read_bytes()
    ledger_store.probe(ledger)
    assert ledger.read_bytes() == held and sorted(os.listdir(tmp_path)) == ["empty.db", "l.db"]


def test_another_applications_database_is_refused_and_left_as_it_is(tmp_path):
    foreign = tmp_path / "app.db"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE users (name TEXT)")
    db.close()
    held = foreign.read_bytes()
    with pytest.raises(ConfigError, match="not a fedvote ledger"):
        ledger_store.probe(foreign)
    assert foreign.read_bytes() == held


def test_a_directory_that_refuses_a_new_file_is_refused(tmp_path, monkeypatch):
    directory = tmp_path / "ro"
    directory.mkdir()
    real_open = os.open

    def refusing_open(path, flags, *args, **kwargs):  # what the kernel answers a user in a 0o500 directory
        if Path(path).parent == directory and flags & os.O_CREAT:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    with pytest.raises(ConfigError) as refused:
        ledger_store.probe(directory / "l.db")
    assert refused.value.detail == f"cannot create the ledger {directory / 'l.db'}: Permission denied (in {directory})"


# --- 4: --out DIR holds one run's outcome at a time ----------------------------------------------


def test_an_interrupted_run_moves_an_earlier_result_aside(tmp_path, invoke, monkeypatch):
    out = tmp_path / "out"
    code, _, err = invoke(["run", *TINY, "--out", out])
    assert code == 0, err
    earlier = {name: (out / name).read_bytes() for name in os.listdir(out)}
    assert "result.json" in earlier

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "measure", interrupted)
    code, _, err = invoke(["run", *TINY, "--out", out])
    assert code == 130
    (aside,) = out.glob("earlier-run-*")
    assert sorted(os.listdir(out)) == sorted(["charged.json", aside.name])  # this run's outcome alone
    assert json.loads((out / "charged.json").read_text())["result"] is None
    assert {name: (aside / name).read_bytes() for name in os.listdir(aside)} == earlier  # kept whole
    assert f"; the earlier run's result there was moved to {aside}" in err


def test_a_result_replaces_an_earlier_charged_json_and_stale_companions(tmp_path, invoke, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "charged.json").write_text('{"result": null}\n')
    (out / "report.html").write_text("<p>an earlier run</p>\n")
    (out / "analysis.npz").write_bytes(b"an earlier run's arrays")
    code, _, err = invoke(["run", *TINY, "--out", out])
    assert code == 0, err
    assert sorted(os.listdir(out)) == ["analysis.npz", "result.json"]
    assert (out / "analysis.npz").read_bytes() != b"an earlier run's arrays"


def test_a_write_that_fails_puts_the_earlier_outcome_back(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "result.json").write_text("earlier\n")
    (out / "analysis.npz").write_text("earlier arrays\n")

    def failing(directory: Path) -> Path:
        (directory / "result.json").write_text("part of this one\n")
        (directory / "charged.json").write_text("part of this one\n")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        app._write_outcome(out, failing, stopped=True)
    assert listing(out) == ["analysis.npz", "result.json"]
    assert (out / "result.json").read_text() == "earlier\n"


def test_nothing_earlier_nothing_moved(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")  # not a run's file: left alone
    path, kept = app._write_outcome(out, lambda d: app.write_atomic(d / "charged.json", "{}\n"), stopped=True)
    assert kept is None and listing(out) == ["charged.json", "notes.txt"] and path == out / "charged.json"
