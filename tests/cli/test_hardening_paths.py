"""Issue 18, items 1 and 6: output paths are checked before anything is charged, a charged
result is never lost, and the small one-line messages and exit statuses are right."""

import errno
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

import fedvote.results as results
from fedvote.config import FederationConfig, RunConfig
from fedvote.privacy.ledger import PersistentLedger
from fedvote.runner import federation_content_key, make_federation

# Tiny and fast: σ given (no calibration), the exact accountant, 5 logistic teachers.
TINY = ["--agents", "5", "--queries", "10", "--epochs", "2", "--teacher-model", "logistic",
        "--student-model", "logistic", "--noise-seed", "1", "--sigma", "5", "--accountant", "exact"]
# The federation TINY deals (digits, 5 agents, seed 0): the ledger's key for it.
TINY_CONFIG = RunConfig(federation=FederationConfig(agents=5))


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("fedvote: error: ") and "Traceback" not in err
    return lines[0]


def charges(ledger: Path) -> list[dict]:
    """Every record the ledger holds for TINY's federation, keyed by its records' content."""
    key = federation_content_key(make_federation(TINY_CONFIG))
    with PersistentLedger(ledger, federation=key) as opened:
        return opened.history()


def _can_write(directory: Path) -> bool:
    probe = directory / ".can-write"
    try:
        probe.write_text("x")
    except OSError:
        return False
    probe.unlink()
    return True


def make_unwritable(directory: Path, request, monkeypatch) -> None:
    """chmod 0o500 ``directory``; as root (whom the mode does not bind) also make it immutable.

    Where neither binds (root on a filesystem without ``chattr +i``), the kernel's answer is
    simulated: creating a file in ``directory`` fails with EACCES, as it would for a user.
    """
    directory.mkdir()
    directory.chmod(0o500)
    request.addfinalizer(lambda: directory.chmod(0o700))
    if _can_write(directory) and os.geteuid() == 0 and shutil.which("chattr"):
        if subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode == 0:
            request.addfinalizer(lambda: subprocess.run(["chattr", "-i", str(directory)], check=True))
    if _can_write(directory):
        real_open = os.open

        def refusing_open(path, flags, *args, **kwargs):
            if Path(path).parent == directory and flags & os.O_CREAT:
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(os, "open", refusing_open)


# --------------------------------------------------------------------------- item 1


def test_an_unwritable_out_dir_is_refused_before_any_training_or_charge(tmp_path, invoke, request, monkeypatch, no_run):
    # Issue 18, item 1: `fedvote run --out DIR --ledger l.db` with DIR not writable.
    out = tmp_path / "DIR"
    make_unwritable(out, request, monkeypatch)
    ledger = tmp_path / "l.db"
    code, stdout, err = invoke(["run", *TINY, "--out", out, "--ledger", ledger])
    assert code == 2 and stdout == ""
    assert one_error_line(err).startswith(f"fedvote: error: --out: cannot write in {out}: ")
    assert no_run == []  # nothing trained
    assert not ledger.exists()  # the ledger was not even opened
    assert charges(ledger) == []  # and holds no charge for the federation
    assert os.listdir(out) == []  # the probe left nothing


def test_out_under_proc_is_refused_before_any_training_or_charge(tmp_path, invoke, no_run):
    # Issue 18, item 1: `--out /proc/x`.
    ledger = tmp_path / "l.db"
    code, stdout, err = invoke(["run", *TINY, "--out", "/proc/x", "--ledger", ledger])
    assert code == 2 and stdout == ""
    assert one_error_line(err) == "fedvote: error: --out: cannot create /proc/x: No such file or directory"
    assert no_run == [] and charges(ledger) == []


def test_a_missing_out_dir_is_probed_without_leaving_a_trace(tmp_path, invoke):
    """The probe creates missing directories and removes them: a refused run leaves nothing."""
    out = tmp_path / "a" / "b"
    code, _, err = invoke(["run", *TINY, "--queries", "100000", "--out", out])
    assert code == 2 and "--queries" in one_error_line(err)
    assert not (tmp_path / "a").exists()


@pytest.fixture
def deployment_inputs(tmp_path):
    """A config file, a (dummy) server file and a data directory: enough to reach the --out check."""
    config = tmp_path / "run.json"
    config.write_text(json.dumps(TINY_CONFIG.to_dict()))
    server = tmp_path / "server.npz"
    server.write_bytes(b"")
    return config, server, tmp_path


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["compare", "--methods", "pate-fl", "--agents", "5", "--epochs", "2", "--ledger", "{ledger}",
          "--out", "/proc/x"], "--out: cannot create /proc/x"),
        (["sweep", *TINY, "--grid", "sigma=5,10", "--ledger", "{ledger}", "--out", "/proc/x"],
         "--out: cannot create /proc/x"),
        (["report", "/proc"], "Invalid value for DIRECTORY: cannot write in /proc"),
        (["plot", "tradeoff", "{config}", "--out", "/proc/x/t.png"], "--out: cannot create /proc/x"),
        (["deploy", "split", "--config", "{config}", "--out", "/proc/x"], "--out: cannot create /proc/x"),
        (["deploy", "app", "/proc/x"], "Invalid value for DIRECTORY: cannot create /proc/x"),
        (["deploy", "server", "--config", "{config}", "--data", "{server}", "--out", "/proc/x", "--insecure"],
         "--out: cannot create /proc/x"),
        (["deploy", "simulate", "--data-dir", "{folder}", "--out", "/proc/x"], "--out: cannot create /proc/x"),
    ],
    ids=["compare", "sweep", "report", "plot", "deploy-split", "deploy-app", "deploy-server", "deploy-simulate"],
)
def test_every_command_that_writes_probes_its_output_first(
    command, message, deployment_inputs, tmp_path, invoke, no_run
):
    config, server, folder = deployment_inputs
    ledger = tmp_path / "l.db"
    names = {"ledger": ledger, "config": config, "server": server, "folder": folder}
    code, stdout, err = invoke([part.format(**names) for part in command])
    assert code == 2 and stdout == ""
    assert one_error_line(err).startswith(f"fedvote: error: {message}")
    assert no_run == [] and not ledger.exists()


@pytest.mark.parametrize("with_ledger", [True, False], ids=["beside-the-ledger", "in-the-temp-dir"])
def test_a_result_that_cannot_be_written_at_the_end_is_saved_to_a_fallback(
    tmp_path, invoke, monkeypatch, with_ledger
):
    # Issue 18, item 1: "if writing still fails at the end (a full disk), write the result
    # next to the ledger or to a fallback path and say where, never lose it".
    out = tmp_path / "out"
    ledger = tmp_path / "ledgers" / "l.db"
    ledger.parent.mkdir()
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    real_write = results.write_atomic

    def full_disk(path, data):
        if Path(path) == out / "result.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_write(path, data)

    monkeypatch.setattr(results, "write_atomic", full_disk)
    args = ["run", *TINY, "--out", out, "--json", *(["--ledger", ledger] if with_ledger else [])]
    code, stdout, err = invoke(args)
    assert code == 1  # not a success: the result is not where it was asked for
    line = err.strip().splitlines()[-1]
    prefix = f"fedvote: error: --out: cannot write to {out} (No space left on device); the result was saved to "
    assert line.startswith(prefix) and line.endswith(" instead")
    saved = Path(line[len(prefix) : -len(" instead")])
    assert saved.name == "result.json" and saved.parent.name.startswith("fedvote-result-")
    assert saved.parent.parent == (ledger.parent if with_ledger else temp)
    assert json.loads(saved.read_text()) == json.loads(stdout)  # the whole result, as printed
    assert not (out / "result.json").exists()
    if with_ledger:  # the charge it was saved for
        history = charges(ledger)
        assert history and all(record["kind"] == "charge" for record in history)
        key = federation_content_key(make_federation(TINY_CONFIG))
        assert json.loads(saved.read_text())["ledger"]["federation"] == key


def test_write_or_fallback_raises_when_even_the_fallbacks_fail(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", "/proc/nowhere")

    def always_full(directory):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError, match="No space left"):
        results.write_or_fallback(always_full, tmp_path / "out", near="/proc/nowhere/l.db")


# --------------------------------------------------------------------------- item 6


@pytest.fixture
def query_file(tmp_path, digits):
    path = tmp_path / "q.npy"
    np.save(path, digits.features[:6].reshape(6, -1))
    return path


def test_label_stopping_early_at_the_budget_exits_3_and_help_says_so(query_file, tmp_path, invoke):
    # Issue 18, item 6: `fedvote label` exits 0 when it stops early at the budget.
    code, out, _ = invoke(["label", "--help"])
    assert code == 0 and "3 when it stopped early" in " ".join(out.split())
    args = ["label", "--agents", "10", "--epochs", "3", "--teacher-model", "logistic", "--noise-seed", "1",
            "--accountant", "exact", "--sigma", "4", "--queries", query_file,
            "--ledger", tmp_path / "l.db", "--budget-epsilon", "1.1"]  # fits two answers of six
    code, out, err = invoke(args)
    assert code == 3
    assert out.strip().splitlines()[-1].startswith("stopped before query 2: privacy budget exceeded")
    assert err.strip().splitlines()[-1] == (
        "fedvote: label stopped at the privacy budget after 2 of 6 answers (exit status 3)"
    )


def test_a_csv_parse_error_names_dataset_not_data_dir(tmp_path, invoke):
    # Issue 18, item 6: a CSV parse error names --data-dir instead of --dataset.
    bad = tmp_path / "bad.csv"
    bad.write_text("label,x\n1,abc\n")
    code, _, err = invoke(["run", *TINY, "--dataset", f"csv:{bad}"])
    assert code == 2
    line = one_error_line(err)
    assert line.startswith(f"fedvote: error: --dataset: {bad}: not a numeric table") and "--data-dir" not in line


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"federation": {"agents": "ten"}}, 'federation.agents must be an integer, got "ten"'),
        ({"agents": "ten"}, "unknown field agents (did you mean federation.agents?)"),
        ({"privacy": {"epsilon": "4"}}, 'privacy.epsilon must be a number or null, got "4"'),
        ({"teacher": {"epochs": True}}, "teacher.epochs must be an integer or null, got true"),
        ({"federation": "digits"}, 'federation must be an object, got "digits"'),
    ],
)
def test_a_config_type_error_names_the_field(config, expected, tmp_path, invoke):
    # Issue 18, item 6: a --config type error (e.g. "agents": "ten") names no field.
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    code, _, err = invoke(["run", "--config", path])
    assert code == 2
    assert one_error_line(err) == f"fedvote: error: --config: {path}: {expected}"


def test_data_list_calls_a_corrupt_file_corrupt_not_missing(tmp_path, invoke):
    # Issue 18, item 6: `fedvote data list` calls a corrupt file "missing".
    (tmp_path / "usps").mkdir()
    (tmp_path / "usps" / "zip.train.gz").write_bytes(b"\x1f\x8bgarbage")
    code, out, _ = invoke(["data", "list", "--data-dir", tmp_path])
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines() if line and not line.startswith(" ")}
    assert lines["usps"].startswith(f"usps    corrupt: {tmp_path / 'usps' / 'zip.train.gz'}: corrupt gzip data")
    assert lines["mnist"].startswith("mnist   missing ")
    code, out, _ = invoke(["data", "list", "--json", "--data-dir", tmp_path])
    state = {entry["name"]: entry["state"] for entry in json.loads(out)["datasets"]}
    assert {name: state[name] for name in ("digits", "mnist", "syndigits", "usps")} == {
        "digits": "available", "mnist": "missing", "syndigits": "available", "usps": "corrupt"
    }
