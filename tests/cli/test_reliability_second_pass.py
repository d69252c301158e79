"""Issue 47 ("A busy laptop, a bad file, a Ctrl-C"): a charge is never silent, bad input is
refused in one line naming its flag, and the documentation says what the code does."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest

import fedvote.runner as runner

# Tiny and fast: σ given (no calibration), the exact accountant, 3 logistic teachers.
TINY = ["--agents", "3", "--queries", "5", "--epochs", "1", "--teacher-model", "logistic",
        "--student-model", "logistic", "--self-training-rounds", "0", "--noise-seed", "1",
        "--sigma", "5", "--accountant", "exact"]


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("fedvote: error: ") and "Traceback" not in err
    return lines[0]


def one_class_npz(path: Path, labels) -> Path:
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.random((len(labels), 6)).astype(np.float32), y=np.asarray(labels))
    return path


# --- item 1: a single-class dataset is refused before the first charge ------------------------


@pytest.mark.parametrize("labels", [[0] * 120, ["cat"] * 120], ids=["int", "str"])
def test_single_class_dataset_refused_before_any_charge(tmp_path, invoke, labels):
    data = one_class_npz(tmp_path / "oneclass.npz", labels)
    ledger, out = tmp_path / "oc.db", tmp_path / "ocout"
    code, stdout, err = invoke(
        ["run", "--dataset", f"npz:{data}", *TINY, "--ledger", ledger, "--out", out]
    )
    assert code == 2, err
    line = one_error_line(err)
    assert line.startswith("fedvote: error: --dataset: ") and "at least two classes" in line
    assert not ledger.exists() and not out.exists()


def test_failure_after_a_charge_says_what_was_charged_and_where(tmp_path, invoke, monkeypatch):
    """The issue's IndexError in top_two_gap, reached by letting the single class through."""
    monkeypatch.setattr(runner, "check_agents_data", lambda federation: federation)
    data = one_class_npz(tmp_path / "oneclass.npz", [0] * 120)
    ledger = tmp_path / "oc.db"
    code, _, err = invoke(["run", "--dataset", f"npz:{data}", *TINY, "--ledger", ledger])
    assert code == 1 and "Traceback" not in err
    (failure,) = err.strip().splitlines()  # one line says the failure and the charge
    assert failure.startswith("fedvote: error: the run failed after releases were charged: IndexError")
    charge = failure.split("; ", 1)[1]
    assert "agent-level ε " in charge and "instance-level ε " in charge
    assert f"recorded in the ledger {ledger}" in charge and "federation records-" in charge


def test_failure_after_a_charge_with_out_writes_what_was_charged(tmp_path, invoke, monkeypatch):
    monkeypatch.setattr(runner, "check_agents_data", lambda federation: federation)
    data = one_class_npz(tmp_path / "oneclass.npz", [0] * 120)
    out = tmp_path / "ocout"
    code, _, err = invoke(["run", "--dataset", f"npz:{data}", *TINY, "--out", out])
    assert code == 1
    wrote, failure = err.strip().splitlines()
    assert wrote == f"fedvote: wrote {out / 'charged.json'} (what the stopped run charged; no result)"
    record = json.loads((out / "charged.json").read_text())
    assert failure.endswith("; " + record["charged"]) and record["result"] is None
    assert record["stopped_by"].startswith("IndexError") and record["config"]["federation"]["agents"] == 3
    assert not (out / "result.json").exists()


def test_failure_in_measure_after_a_charge_is_one_line(tmp_path, invoke, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("disk\nfull")

    monkeypatch.setattr(runner, "measure", broken)
    code, _, err = invoke(["run", *TINY])
    assert code == 1 and "Traceback" not in err
    (failure,) = err.strip().splitlines()
    assert "RuntimeError: disk full" in failure
    assert "in memory only, nothing recorded" in failure


# --- item 7: an interrupted run says what it had charged -----------------------------------


@pytest.mark.parametrize("with_ledger", [False, True])
def test_interrupt_after_release_states_the_charge(tmp_path, invoke, monkeypatch, with_ledger):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "measure", interrupted)
    ledger = tmp_path / "budget.db"
    code, _, err = invoke(["run", *TINY, *(["--ledger", ledger] if with_ledger else [])])
    assert code == 130
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert line.startswith("fedvote: aborted; 1 release(s) were charged")
    assert "agent-level ε " in line and "instance-level ε " in line and "δ = 0.001 [exact]" in line
    if with_ledger:
        assert f"recorded in the ledger {ledger}" in line
    else:
        assert "in memory only, nothing recorded" in line


def test_interrupt_before_any_release_stays_plain(invoke, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "execute", interrupted)
    code, _, err = invoke(["run", *TINY])
    assert code == 130
    assert err.strip() == "fedvote: aborted"


def test_python_api_error_carries_the_charge_note(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(runner, "measure", broken)
    import fedvote

    with pytest.raises(RuntimeError) as raised:
        fedvote.run(agents=3, queries=5, epochs=1, teacher_model="logistic", student_model="logistic",
                    self_training_rounds=0, sigma=5, accountant="exact", noise_seed=1)
    assert runner.charge_note_of(raised.value).startswith("1 release(s) were charged")
    assert any(note.startswith(runner.CHARGE_NOTE_PREFIX) for note in raised.value.__notes__)


# --- item 4, item 9 (account --queries 0), item 10 (account's δ) -----------------------------


def test_account_votes_string_histogram_is_one_line_naming_histogram(tmp_path, invoke):
    path = tmp_path / "S.npy"
    np.save(path, np.array([["a", "b"], ["c", "d"]]))
    code, _, err = invoke(["account", "votes", "--histogram", path, "--sigma", "5"])
    assert code == 2
    assert one_error_line(err).startswith("fedvote: error: --histogram: ")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["pate-fl", "--sigma", "5", "--queries", "0"], "--queries"),
        (["private-knn-fl", "--sigma", "5", "--queries", "0", "--k", "3"], "--queries"),
        (["gaussian", "--sigma", "5", "--count", "0"], "--count"),
    ],
)
def test_account_refuses_zero_releases_as_run_does(invoke, argv, flag):
    code, _, err = invoke(["account", *argv])
    assert code == 2
    assert one_error_line(err) == f"fedvote: error: {flag}: must be at least 1, got 0"


def test_account_delta_defaults_to_runs(invoke):
    code, out, _ = invoke(["account", "pate-fl", "--sigma", "25", "--queries", "500", "--json"])
    assert code == 0 and json.loads(out)["delta"] == 1e-3


# --- item 8: threads on a busy host -------------------------------------------------------


def test_fair_threads_take_only_idle_cpus():
    from fedvote.models.threads import fair_threads

    assert fair_threads(2, 0.0) == 2
    assert fair_threads(2, 0.4) == 2
    assert fair_threads(2, 1.0) == 1
    assert fair_threads(2, 5.5) == 1
    assert fair_threads(16, 3.0) == 13
    assert fair_threads(4, float("nan")) == 1


def test_host_policy_is_passive_and_fair_but_never_overrides_the_user():
    from fedvote.models.threads import apply_host_policy

    busy: dict[str, str] = {}
    assert apply_host_policy(busy, available=2, busy=5.5) == {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1"}
    quiet: dict[str, str] = {}
    assert apply_host_policy(quiet, available=2, busy=0.0) == {"OMP_WAIT_POLICY": "PASSIVE"}
    user = {"OMP_WAIT_POLICY": "ACTIVE", "OMP_NUM_THREADS": "2"}
    assert apply_host_policy(user, available=2, busy=5.5) == {}
    assert user == {"OMP_WAIT_POLICY": "ACTIVE", "OMP_NUM_THREADS": "2"}


def test_busy_cpus_reads_runnable_tasks_besides_this_one(tmp_path):
    from fedvote.models.threads import busy_cpus

    loadavg = tmp_path / "loadavg"
    loadavg.write_text("0.10 0.20 0.30 4/300 12345\n")  # 4 runnable: this process and 3 others
    assert busy_cpus(loadavg) == 3.0


# Runs `fedvote run` in a fresh interpreter under a fake load (2 CPUs, 5.5 busy); records the
# OpenMP variables when torch is first imported and torch's threads when the runner starts.
_BUSY_HOST = """
import json, os, sys
import fedvote.models.threads as threads
threads.available_cpus = lambda: 2
threads.busy_cpus = lambda loadavg=None: 5.5
seen = {}
class Watch:
    def find_spec(self, name, path, target=None):
        if name == "torch" and not seen:
            seen.update({k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")})
        return None
sys.meta_path.insert(0, Watch())
import types
runner = types.ModuleType("fedvote.runner")  # the real one imports torch: this one only when run
def started(config, **kwargs):
    import torch
    print(json.dumps({**seen, "torch_threads": torch.get_num_threads()}))
    raise SystemExit(0)
runner.run = started
sys.modules["fedvote.runner"] = runner
from fedvote.cli import main
assert "torch" not in sys.modules
main(sys.argv[1:])
"""


@pytest.mark.parametrize(("argv", "expected"), [([], 1), (["--threads", "2"], 2)], ids=["fair", "asked"])
def test_cli_sets_openmp_policy_before_torch_under_load(argv, expected):
    import subprocess
    import sys

    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OMP_")}
    done = subprocess.run([sys.executable, "-c", _BUSY_HOST, "run", *argv], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1", "torch_threads": expected}


def test_threads_flag_refuses_zero(invoke):
    code, _, err = invoke(["run", "--threads", "0"])
    assert code == 2 and one_error_line(err) == "fedvote: error: --threads: must be an integer from 1 to 1024, got 0"


# --- item 9: accepted silently, now refused in one line naming the flag --------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--out", ""], "--out: is empty; name a directory (. for the current one)"),
        (["run", "--release", "labels", "--threshold", "-5"],
         "--threshold: must be a finite number of votes >= 0, got -5.0"),
        (["audit", "--trials", "10000000000000"],
         "--trials: must be at most 10000000 (about eight hours on digits), got 10000000000000"),
    ],
)
def test_surely_a_mistake_is_refused_in_one_line(argv, message, invoke, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = invoke(argv)
    assert code == 2
    assert one_error_line(err) == f"fedvote: error: {message}"
    assert list(tmp_path.iterdir()) == []


def test_knn_k_beyond_the_smallest_agent_is_refused_before_any_charge(tmp_path, invoke):
    ledger = tmp_path / "l.db"
    code, _, err = invoke(["run", "--method", "private-knn-fl", "--k", str(10**9), "--agents", "5", "--sigma", "3",
                           "--ledger", ledger])
    assert code == 2
    line = one_error_line(err)
    assert line.startswith("fedvote: error: --k: 1000000000 neighbours but the smallest agent holds ")
    assert not ledger.exists()


def test_run_refuses_a_compare_json(tmp_path, invoke):
    path = tmp_path / "compare.json"
    config = {"method": "pate-fl", "federation": {"dataset": "digits", "agents": 3}}
    path.write_text(json.dumps({"rows": [{"method": "pate-fl"}, {"method": "dp-fedavg"}], "config": config}))
    code, _, err = invoke(["run", "--config", path])
    assert code == 2
    line = one_error_line(err)
    assert line.startswith(f"fedvote: error: --config: {path} is a compare.json") and "fedvote compare" in line


def test_run_refuses_a_config_without_its_federation(tmp_path, invoke):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"config": {"method": "pate-fl", "queries": 20}}))
    code, _, err = invoke(["run", "--config", path])
    assert code == 2
    assert one_error_line(err).startswith(f"fedvote: error: --config: {path} has no federation section")


def test_label_refuses_queries_far_outside_the_data(tmp_path, invoke):
    from fedvote.data.datasets import load_digits

    queries = load_digits().features[-3:].reshape(3, -1).copy()
    queries[1, 5] = 1e30
    path = tmp_path / "q.npy"
    np.save(path, queries)
    ledger = tmp_path / "l.db"
    code, _, err = invoke(["label", "--agents", "3", "--sigma", "3", "--queries", path, "--ledger", ledger])
    assert code == 2
    line = one_error_line(err)
    assert line.startswith(f"fedvote: error: --queries: {path}: query 1 holds 1e+30, far outside the data's range")
    assert not ledger.exists()


def test_csv_row_with_an_extra_field_is_refused(tmp_path, invoke):
    path = tmp_path / "extra.csv"
    path.write_text("a,b,label\n" + "".join(f"{i},{i + 1},{i % 2}\n" for i in range(40)) + "3,4,1,9\n")
    code, _, err = invoke(["run", "--dataset", f"csv:{path}", *TINY])
    assert code == 2
    line = one_error_line(err)
    assert line.startswith(f"fedvote: error: --dataset: {path}: line 42 has 4 fields but the header names 3 columns")


# --- item 10: the documentation says what the code does -------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def test_readme_method_row_names_every_registered_method():
    from fedvote.methods.registry import METHOD_NAMES

    (row,) = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `--method` |")]
    named = set(re.findall(r"`([a-z][a-z0-9-]+)`", row.split("|")[2]))
    assert named == set(METHOD_NAMES), set(METHOD_NAMES) ^ named
    assert "majority-vote` (PATE-FL without noise" in row


def test_python_md_defaults_agree_with_the_settings():
    from fedvote.runner import FEDERATION_SETTINGS, RUN_SETTINGS

    table = {}
    for line in (ROOT / "docs" / "python.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`\w+`", cells[0]):
            table[cells[0].strip("`")] = cells[1]
    checked = 0
    for setting in (*FEDERATION_SETTINGS, *RUN_SETTINGS):
        cell = table.get(setting.name, "")
        if not re.fullmatch(r"`[^`]+`", cell):
            continue
        try:
            documented = ast.literal_eval(cell.strip("`"))
        except (ValueError, SyntaxError):  # a name, not a value: N, $FEDVOTE_DATA
            continue
        assert documented == setting.default, setting.name  # one literal: it must be the default
        checked += 1
    assert checked > 20 and table["teacher_model"] == '`"auto"`'


def test_readme_label_example_names_the_federation_the_ledger_keys():
    from fedvote.config import FederationConfig, RunConfig
    from fedvote.runner import federation_content_key, make_federation

    key = federation_content_key(make_federation(RunConfig(federation=FederationConfig(agents=20))))
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## `fedvote label`") : text.index("## `fedvote account`")]
    assert set(re.findall(r"records-[0-9a-f]+", section)) == {key}


def test_data_list_says_multidigit_has_attributes_not_1024_classes(invoke):
    code, out, _ = invoke(["data", "list"])
    assert code == 0
    (line,) = [line for line in out.splitlines() if line.startswith("multidigit ")]
    assert "10 binary attributes (multi-label: 1024 label sets)" in line and "1024 classes" not in line


def test_epsilon_curve_names_the_accountant_that_drew_it_and_the_runs():
    from fedvote.report.curves import EpsilonCurve

    steps = np.array([1, 2])
    pld_run = EpsilonCurve("queries answered", steps, {"agent": np.ones(2)}, {}, "exact", 1e-3, "pld", {"agent": 1.0})
    assert pld_run.accountant_label() == "exact closed form; the run's ε: pld"
    assert EpsilonCurve("rounds", steps, {}, {}, "rdp", 1e-3, "rdp").accountant_label() == "rdp"


# --- item 11: progress off a terminal, the domain-shift header ------------------------------


def test_run_logs_a_line_per_phase_when_stderr_is_a_file(tmp_path):
    import subprocess
    import sys

    log = tmp_path / "err.log"
    with log.open("w") as stderr:
        done = subprocess.run([sys.executable, "-m", "fedvote.cli", "run", *TINY], stdout=subprocess.PIPE,
                              stderr=stderr, text=True, timeout=300)
    assert done.returncode == 0, log.read_text()
    lines = log.read_text().splitlines()
    assert lines and all(
        re.fullmatch(r"fedvote run \[\d+:\d\d\] .+: (started.*|\d+/\d+, ETA \d+:\d\d|done in \d+:\d\d)", x)
        for x in lines
    )
    # The student's phase names its training (digits: VAT) and counts its steps.
    for phase in ("loading and splitting the data", "training the student (vat)", "evaluating and accounting"):
        assert any(re.search(rf"{re.escape(phase)}: started( \(\d+ parts\))?$", x) for x in lines), lines
        assert any(f"{phase}: done in " in x for x in lines), lines
    assert done.stdout.startswith("fedvote pate-fl on digits:")


def test_line_progress_gives_the_count_and_an_eta():
    import io

    from fedvote.progress import LineProgress

    stream = io.StringIO()
    progress = LineProgress("fedvote run", stream, interval_s=0.0)
    with progress.step("voting on public queries", total=4) as bar:
        for _ in range(4):
            bar.advance()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "fedvote run [0:00] voting on public queries: started (4 parts)"
    assert lines[1] == "fedvote run [0:00] voting on public queries: 1/4, ETA 0:00"
    assert len(lines) == 5 and lines[-1] == "fedvote run [0:00] voting on public queries: done in 0:00"


def test_a_captured_stderr_gets_no_lines():
    import io

    from fedvote.progress import is_file_not_terminal

    assert not is_file_not_terminal(io.StringIO())


def test_summary_header_names_the_target_of_a_domain_shift():
    import dataclasses

    import fedvote
    from fedvote.cli import summary

    result = fedvote.run(agents=3, queries=5, epochs=1, teacher_model="logistic", student_model="logistic",
                         self_training_rounds=0, sigma=5, accountant="exact", noise_seed=1)
    federation = {**result.config["federation"], "dataset": "mnist", "target": "usps"}
    shifted = dataclasses.replace(result, dataset="mnist", config={**result.config, "federation": federation})
    assert summary(shifted).startswith("fedvote pate-fl on mnist → usps: 3 agents, ")
    assert summary(result).startswith("fedvote pate-fl on digits: 3 agents, ")


def test_label_interrupted_after_an_answer_states_the_charge(tmp_path, invoke, monkeypatch):
    import fedvote.labelling.session as label_protocol
    from fedvote.data.datasets import load_digits

    def interrupted(sums):
        raise KeyboardInterrupt

    monkeypatch.setattr(label_protocol, "noisy_argmax", interrupted)
    path = tmp_path / "q.npy"
    np.save(path, load_digits().features[-2:].reshape(2, -1))
    ledger = tmp_path / "l.db"
    code, _, err = invoke(["label", "--agents", "3", "--sigma", "3", "--teacher-model", "logistic", "--epochs", "1",
                           "--queries", path, "--ledger", ledger])
    assert code == 130
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert line.startswith("fedvote: aborted; 1 release(s) were charged") and f"the ledger {ledger}" in line
