import json
import subprocess
import sys

import pytest

from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import pate_fl_events

REQUIRED_KEYS = {
    "method", "dataset", "agents", "seed", "accuracy", "label_accuracy",
    "queries", "sigma", "privacy", "communication", "timings", "config", "private",
}
SMALL = ["--agents", "10", "--queries", "40", "--epochs", "5", "--teacher-model", "logistic",
         "--student-model", "logistic", "--noise-seed", "1"]


def test_run_json_has_the_documented_schema(tmp_path, invoke):
    code, out, _ = invoke(["run", *SMALL, "--epsilon", "4", "--delta", "1e-3", "--json", "--out", str(tmp_path)])
    assert code == 0
    result = json.loads(out)
    assert REQUIRED_KEYS <= set(result)
    assert result["private"] is True
    privacy = result["privacy"]
    assert set(privacy) >= {"delta", "accountant", "agent", "instance"}
    assert privacy["agent"]["epsilon"] <= 4.0
    assert privacy["agent"]["sensitivity"] == 1.0
    assert set(result["communication"]) == {"upload_floats", "download_floats", "rounds"}
    assert "total_s" in result["timings"]
    # the reported ε is what dp-accounting's PLD gives for the reported σ, Q, sensitivity
    event = pate_fl_events(result["sigma"] / privacy["agent"]["sensitivity"], result["queries"]).agent
    assert privacy["agent"]["epsilon"] == pytest.approx(epsilon_for(event, privacy["delta"], "pld"), rel=1e-6)
    on_disk = json.loads((tmp_path / "result.json").read_text())
    assert on_disk == result
    assert on_disk["config"]["federation"]["agents"] == 10


def test_sigma_zero_is_a_labelled_non_private_reference(invoke):
    code, out, _ = invoke(["run", *SMALL, "--sigma", "0", "--json"])
    assert code == 0
    result = json.loads(out)
    assert result["private"] is False
    assert result["privacy"]["agent"]["epsilon"] is None
    assert result["privacy"]["instance"]["epsilon"] is None
    code, out, _ = invoke(["run", *SMALL, "--sigma", "0"])
    assert "NOT PRIVATE" in out


def test_summary_is_readable(invoke):
    code, out, _ = invoke(["run", *SMALL, "--sigma", "5"])
    assert code == 0
    assert "student accuracy" in out and "agent-level" in out and "instance-level" in out
    assert "communication" in out


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--agents", "0"], "--agents"),
        (["--agents", "5000"], "--agents"),
        (["--sigma", "1", "--epsilon", "1"], "--sigma"),
        (["--epsilon", "-1"], "--epsilon"),
        (["--delta", "1.5"], "--delta"),
        (["--queries", "100000"], "--queries"),
        (["--dirichlet-alpha", "0", "--partition", "dirichlet"], "--dirichlet-alpha"),
        (["--classes-per-agent", "11", "--partition", "classes"], "--classes-per-agent"),
        (["--min-responders", "11"], "--min-responders"),
        (["--public-fraction", "0.7", "--test-fraction", "0.4"], "--agent-fraction"),
        (["--partition", "bogus"], "--partition"),
        (["--agents", "many"], "--agents"),
        (["--nonsense"], "--nonsense"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag_and_writes_nothing(tmp_path, invoke, args, flag):
    out_dir = tmp_path / "out"
    code, out, err = invoke(["run", *SMALL, *args, "--out", str(out_dir)])
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("fedvote: error:")
    assert flag in err
    assert "Traceback" not in err
    assert not out_dir.exists()


def test_console_script_runs_as_a_process(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "fedvote.cli", "run", *SMALL, "--sigma", "3", "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["sigma"] == 3.0


def test_config_recorded_in_result_json_reruns_identically(tmp_path, invoke):
    code, first, _ = invoke(["run", *SMALL, "--sigma", "3", "--json", "--out", str(tmp_path)])
    assert code == 0
    code, second, _ = invoke(["run", "--config", str(tmp_path / "result.json"), "--json"])
    assert code == 0
    first, second = json.loads(first), json.loads(second)
    assert second["config"] == first["config"]
    assert second["accuracy"] == first["accuracy"]  # same seed and noise seed


def test_config_refuses_other_run_flags_and_bad_files(tmp_path, invoke):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    for args in (["--config", str(bad)], ["--config", str(tmp_path / "missing.json")],
                 ["--config", str(bad), "--agents", "3"]):
        code, out, err = invoke(["run", *args])
        assert code == 2 and out == "" and err.count("\n") == 1
        assert "--config" in err


def test_budget_in_a_ledger_is_enforced_across_runs_before_release(tmp_path, invoke):
    import sqlite3

    ledger = tmp_path / "ledger.db"
    args = ["run", *SMALL, "--sigma", "8", "--ledger", str(ledger), "--budget-epsilon", "4", "--json"]
    spent = []
    for _ in range(2):
        code, out, _ = invoke(args)
        assert code == 0
        spent.append(json.loads(out)["ledger"]["spent_agent_epsilon"])
    assert spent[0] < spent[1] <= 4.0
    rows_before = sqlite3.connect(ledger).execute("SELECT COUNT(*) FROM records").fetchone()[0]
    code, out, err = invoke([*args, "--out", str(tmp_path / "third")])
    assert code == 2 and out == ""
    assert err.startswith("fedvote: error: --budget-epsilon: privacy budget exceeded")
    assert err.count("\n") == 1
    assert sqlite3.connect(ledger).execute("SELECT COUNT(*) FROM records").fetchone()[0] == rows_before
    assert not (tmp_path / "third").exists()


def test_every_command_group_is_reachable_from_the_fedvote_entry_point(invoke):
    code, out, _ = invoke(["--help"])
    assert code == 0
    for command in ("run", "account", "data", "compare"):
        assert f"  {command} " in out
    code, out, _ = invoke(["account", "pate-fl", "--sigma", "25", "--queries", "500", "--delta", "1e-3", "--json"])
    assert code == 0 and json.loads(out)["epsilon"] == pytest.approx(2.7354, abs=5e-4)
    code, out, _ = invoke(["data", "list", "--data-dir", "tests/data/samples", "--json"])
    assert code == 0 and "mnist" in out
    code, _, err = invoke(["compare", "--methods", "nope"])
    assert code == 2 and "--methods" in err


def test_compare_takes_the_same_federation_flags_as_run(invoke):
    code, out, _ = invoke(["compare", "--methods", "fedavg", "--agents", "5", "--partition", "dirichlet",
                           "--dirichlet-alpha", "5", "--rounds", "3", "--json"])
    assert code == 0
    assert json.loads(out)[0]["method"] == "fedavg"


def test_run_flags_are_unique_and_include_every_method_option() -> None:
    from fedvote.cli import run
    from fedvote.methods import METHODS
    from fedvote.methods.options import option_specs

    flags = [flag for param in run.params for flag in param.opts]
    assert len(flags) == len(set(flags)), "two run options share a flag"
    for method in METHODS.values():
        if method.options_type is not None:
            for spec in option_specs(method.options_type):
                assert spec.flag in flags


def test_run_report_writes_the_html_page(tmp_path):
    from fedvote.cli import main

    main(["run", "--agents", "10", "--teacher-model", "logistic", "--student-model", "logistic", "--epochs", "3",
          "--self-training-rounds", "0", "--queries", "30", "--noise-seed", "0", "--out", str(tmp_path), "--report"])
    page = (tmp_path / "report.html").read_text()
    assert "<html" in page.lower() and (tmp_path / "result.json").exists()


def test_run_report_needs_out(capsys):
    from fedvote.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--report"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "fedvote: error: --report: needs --out DIR, where result.json and report.html are written"
    )


# Noiseless functions of private data a simulation computes; they must never sit beside the
# DP result as if they were released (trust issue, defect 8).
PRIVATE_DIAGNOSTICS = ("teacher_accuracy", "teacher_accuracies", "class_counts", "vote_histograms",
                       "client_accuracy", "accuracy_history")


def _keys(value, prefix=""):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield f"{prefix}{key}"
            yield from _keys(inner, f"{prefix}{key}.")
    elif isinstance(value, list):
        for inner in value:
            yield from _keys(inner, prefix)


def test_noiseless_functions_of_private_data_live_only_under_diagnostics(tmp_path, invoke):
    code, out, _ = invoke(["run", *SMALL, "--sigma", "5", "--json", "--out", str(tmp_path)])
    assert code == 0
    result = json.loads(out)
    diagnostics = result["diagnostics"]
    assert diagnostics["note"] == "simulation diagnostic — not private; a deployment never releases it"
    assert 0.0 <= diagnostics["teacher_accuracy"] <= 1.0
    outside = [key for key in _keys({k: v for k, v in result.items() if k != "diagnostics"})
               if key.rsplit(".", 1)[-1] in PRIVATE_DIAGNOSTICS]
    assert outside == []
    code, out, _ = invoke(["run", *SMALL, "--sigma", "5"])
    summary = out[out.index("simulation diagnostic"):]
    assert "teacher accuracy" in summary  # shown only below the diagnostic heading
    assert "teacher accuracy" not in out[: out.index("simulation diagnostic")]


def _foreign_flags() -> list[tuple[str, list[str], str]]:
    """(method, flag and a value, the flag's name) for every method option a method does not take."""
    from fedvote.methods import METHODS, option_names
    from fedvote.methods.options import option_specs

    specs = {spec.name: spec for m in METHODS.values() if m.options_type for spec in option_specs(m.options_type)}
    cases = []
    for method in sorted(METHODS):
        for name, spec in sorted(specs.items()):
            if name in option_names(method):
                continue
            if spec.value_type is bool:
                args = [spec.flag]
            elif spec.choices:
                args = [spec.flag, spec.choices[0]]
            else:
                args = [spec.flag, {int: "5", float: "0.5", str: "x"}[spec.value_type]]
            cases.append((method, args, spec.flag))
    return cases


@pytest.mark.parametrize(("method", "args", "flag"), _foreign_flags(), ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_every_method_refuses_a_flag_it_does_not_take_by_name(method, args, flag, invoke):
    """One options seam: kNN and gradient settings are method options like the newer methods'; a
    flag given to a method that does not take it is refused in one line naming it, before
    anything is loaded (no more `--method pate-fl --k 5 --rounds 7` silently recorded)."""
    code, out, err = invoke(["run", "--method", method, *args])
    assert code == 2 and out == ""
    assert err.strip() == f"fedvote: error: {flag}: is not an option of method {method!r}"


@pytest.mark.parametrize("args", [["--k", "5"], ["--rounds", "7"], ["--k", "5", "--rounds", "7"]])
def test_pate_fl_refuses_knn_and_gradient_flags(args, invoke):
    code, _, err = invoke(["run", "--method", "pate-fl", *args])
    assert code == 2
    assert err.strip() in {f"fedvote: error: {flag}: is not an option of method 'pate-fl'" for flag in args[::2]}


def test_knn_and_gradient_flags_keep_their_names_and_come_from_the_methods_options():
    """The flags README and docs use are generated from the methods' options dataclasses."""
    from fedvote.cli import run
    from fedvote.methods.dp_fedavg import DpFedAvgOptions
    from fedvote.methods.dp_fedsgd import DpFedSgdOptions
    from fedvote.methods.options import option_specs
    from fedvote.methods.private_knn_fl import KnnOptions

    knn = {spec.flag for spec in option_specs(KnnOptions)}
    assert knn == {"--k", "--k-fraction", "--features", "--feature-dim", "--feature-module",
                   "--normalize-features", "--knn-bound", "--agent-budgets", "--vote-sampling",
                   "--student-targets"}
    gradient = {spec.flag for spec in option_specs(DpFedAvgOptions) + option_specs(DpFedSgdOptions)}
    assert gradient == {"--rounds", "--sampling-rate", "--local-steps", "--clip-norm", "--per-sample-clip",
                        "--learning-rate", "--lr-decay", "--batch-size", "--batch-sampling-rate", "--noise",
                        "--gradient-model", "--center-inputs", "--local-da", "--clipping", "--clip-quantile",
                        "--clip-learning-rate", "--clip-count-stddev"}
    flags = {flag for param in run.params for flag in param.opts + param.secondary_opts}
    assert knn | gradient | {"--no-normalize-features", "--no-center-inputs"} <= flags


def test_a_bad_knn_or_gradient_value_is_refused_by_its_flag(invoke):
    code, _, err = invoke(["run", "--method", "private-knn-fl", "--k", "0"])
    assert code == 2 and err.strip() == "fedvote: error: --k: must be an integer in [1, 2147483647], got 0"
    code, _, err = invoke(["run", "--method", "dp-fedavg", "--sampling-rate", "2"])
    assert code == 2 and err.strip() == "fedvote: error: --sampling-rate: must be in (0, 1], got 2.0"


def test_a_gradient_run_records_its_settings_as_options(tmp_path, invoke):
    code, _, _ = invoke(["run", "--method", "dp-fedavg", "--agents", "5", "--rounds", "2", "--sampling-rate", "1",
                         "--local-steps", "1", "--noise", "server", "--gradient-model", "logistic", "--noise-seed", "0",
                         "--out", str(tmp_path)])
    assert code == 0
    config = json.loads((tmp_path / "result.json").read_text())["config"]
    assert "gradient" not in config and "knn" not in config
    assert config["options"] == {"rounds": 2, "sampling_rate": 1.0, "local_steps": 1, "noise": "server",
                                 "gradient_model": "logistic"}
