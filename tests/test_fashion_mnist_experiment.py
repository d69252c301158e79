"""experiments/fashion_mnist.py (issue 43, table 3d): its section says whether the bar is met, shows
refusals as rows, and a save keeps the runs another process saved meanwhile."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def experiment(load_experiment):
    return load_experiment("fashion_mnist")


@pytest.fixture
def record_path(experiment, tmp_path, monkeypatch):
    """The script pointed at an empty data directory and results folder: the path its record is saved to."""
    (tmp_path / "data" / "fashion-mnist").mkdir(parents=True)
    monkeypatch.setenv("FEDVOTE_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(experiment, "HERE", tmp_path)
    path = tmp_path / "results" / "fashion_mnist.json"
    path.parent.mkdir()
    monkeypatch.setattr(
        experiment, "save_results", lambda name, record, text: path.write_text(json.dumps(record))
    )
    monkeypatch.setattr(experiment, "section", lambda record: "")
    return path


def _outcome(accuracy, commit="abc1234"):
    """What one_run returns: a run's figures without its part, method and seed."""
    run = _run("b", "unused", None, accuracy, commit=commit)
    return {k: v for k, v in run.items() if k not in ("part", "method", "seed")}


def _run(part, method, seed, accuracy, **extra):
    return {
        "part": part, "method": method, "seed": seed, "accuracy": accuracy, "label_accuracy": 0.8,
        "epsilon_agent": 4.2997, "epsilon_instance": 6.7, "delta": 1e-3, "sigma": 10.99, "queries": 200,
        "student_queries": 180, "wall_seconds": 200.0, "cpu_seconds": 300.0, "load_before": 1.0,
        "load_after": 2.0, "commit": "abc1234", **extra,
    }  # fmt: skip


def test_the_section_says_the_bar_is_not_met_when_one_seed_falls_short(experiment):
    runs = [_run("a", "pate-fl", 0, 0.86), _run("a", "pate-fl", 1, 0.84), _run("b", "fedavg", None, 0.83)]
    text = experiment.section({"date": "2026-11-28", "machine": "here", "methods": ["fedavg"], "runs": runs})
    assert "1 of 2 seeds at 0.85 or above" in text and "**not met on every seed**" in text
    assert "| fedavg | 0.8300, —, — | 0.8300 |" in text


def test_the_section_says_met_only_when_every_seed_reaches_it(experiment):
    runs = [_run("a", "pate-fl", s, 0.86) for s in (0, 1, 2)]
    text = experiment.section({"date": "2026-11-28", "machine": "here", "methods": [], "runs": runs})
    assert "**met on every seed**" in text


def test_a_refusal_is_a_row_and_a_missing_method_is_named(experiment):
    refused = _run("b", "fedd-p", None, None, refused="fedvote: error: --epsilon: cannot learn here")
    text = experiment.section(
        {"date": "2026-11-28", "machine": "here", "methods": ["fedd-p", "pate-fl"], "runs": [refused]}
    )
    assert "| fedd-p | refused: --epsilon: cannot learn here |" in text
    assert "Not run (the experiment was stopped first): pate-fl." in text


def test_a_save_keeps_the_runs_another_process_saved(experiment, tmp_path, monkeypatch):
    saved: dict = {}
    monkeypatch.setattr(experiment, "save_results", lambda name, record, text: saved.update(record=record))
    path = tmp_path / "fashion_mnist.json"
    path.write_text(json.dumps({"runs": [_run("b", "fedavg", None, 0.83)]}))
    record = {"date": "d", "machine": "m", "methods": ["fedavg"], "runs": [_run("a", "pate-fl", 0, 0.8)]}
    experiment.save(path, record)
    assert {experiment.key(r) for r in saved["record"]["runs"]} == {
        ("a", 0, "pate-fl"),
        ("b", 0, "fedavg"),
    }


def test_a_rerun_method_replaces_its_saved_row_and_never_brings_it_back(experiment, record_path, monkeypatch):
    """``--methods dp-fedavg,dp-ftrl`` after a default changed: their new rows only, the others kept."""
    path = record_path
    old = [
        _run("b", "dp-fedavg", None, 0.37),
        _run("b", "dp-ftrl", None, 0.17),
        _run("b", "fedavg", None, 0.83),
    ]
    path.write_text(json.dumps({"runs": old}))
    fresh = iter([0.55, 0.59])

    def one_run(data_dir, flags):  # noqa: ANN001, ANN202
        return _outcome(next(fresh), commit="new")

    monkeypatch.setattr(experiment, "one_run", one_run)
    experiment.main(["--part", "b", "--seeds", "0", "--methods", "dp-fedavg,dp-ftrl"])
    runs = json.loads(path.read_text())["runs"]
    assert sorted((r["method"], r["accuracy"], r["commit"]) for r in runs) == [
        ("dp-fedavg", 0.55, "new"),
        ("dp-ftrl", 0.59, "new"),
        ("fedavg", 0.83, "abc1234"),
    ]


def test_every_method_row_gives_each_seed_then_mean_and_std(experiment):
    """Part (b) over seeds: the accuracies in seed order, their mean ± sample std, the largest ε."""
    runs = [_run("b", "dp-fedavg", None, 0.70), _run("b", "dp-fedavg", 1, 0.72, epsilon_agent=4.5),
            _run("b", "dp-fedavg", 2, 0.74)]  # fmt: skip
    text = experiment.section({"date": "d", "machine": "m", "methods": ["dp-fedavg"], "runs": runs})
    assert "| dp-fedavg | 0.7000, 0.7200, 0.7400 | 0.7200 ± 0.0200 | 0.800 | 4.500 | 6.700 |" in text


def test_every_method_runs_each_seed_and_a_row_saved_without_a_seed_is_seed_0(
    experiment, record_path, monkeypatch
):
    """Seed 0 is the command as typed (a saved row without a seed is it); seeds 1, 2 pass their seeds."""
    path = record_path
    path.write_text(json.dumps({"runs": [_run("b", "fedavg", None, 0.83)]}))
    typed: list[tuple[str, ...]] = []

    def one_run(data_dir, flags):  # noqa: ANN001, ANN202
        typed.append(flags)
        return _outcome(0.8, commit="new")

    monkeypatch.setattr(experiment, "one_run", one_run)
    experiment.main(["--part", "b"])  # no --methods: every method, the saved seed-0 row kept
    fedavg = [flags for flags in typed if flags[:2] == ("--method", "fedavg")]
    assert fedavg == [
        ("--method", "fedavg", *experiment.EVERY_FLAGS, "--seed", "1", "--noise-seed", "1"),
        ("--method", "fedavg", *experiment.EVERY_FLAGS, "--seed", "2", "--noise-seed", "2"),
    ]
    others = [flags for flags in typed if flags[:2] == ("--method", "pate-fl")]
    assert others[0] == ("--method", "pate-fl", *experiment.EVERY_FLAGS)  # seed 0: as typed


@pytest.mark.parametrize(
    ("dp_fedavg", "verdict"),
    [(0.70, "holds"), (0.80, "does not hold"), (0.77, "holds on some seeds only")],
)
def test_the_claim_line_compares_pate_fl_with_dp_fedavg_seed_by_seed(experiment, dp_fedavg, verdict):
    """PATE-FL 0.78 and 0.76 on seeds 0 and 1 against DP-FedAvg's figure on both."""
    runs = [_run("a", "pate-fl", 0, 0.78), _run("a", "pate-fl", 1, 0.76),
            _run("a", "dp-fedavg", 0, dp_fedavg), _run("a", "dp-fedavg", 1, dp_fedavg)]  # fmt: skip
    text = experiment.section({"date": "d", "machine": "m", "methods": [], "runs": runs})
    assert f"on Fashion-MNIST: {verdict}**" in text
    assert f"against DP-FedAvg {dp_fedavg:.4f} (mean over seeds 0, 1)" in text
    assert (
        "1 of 2 seeds at 0.85" not in text and "0 of 2 seeds at 0.85 or above" in text
    )  # the bar reads PATE-FL only


def test_part_a_runs_dp_fedavg_on_the_bar_command(experiment, record_path, monkeypatch):
    typed: list[tuple[str, ...]] = []

    def one_run(data_dir, flags):  # noqa: ANN001, ANN202
        typed.append(flags)
        return _outcome(0.8)

    monkeypatch.setattr(experiment, "one_run", one_run)
    experiment.main(["--part", "a", "--seeds", "2"])
    assert typed == [
        (*experiment.BAR_FLAGS, "--seed", "2", "--noise-seed", "2"),
        (*experiment.BAR_FLAGS, "--method", "dp-fedavg", "--seed", "2", "--noise-seed", "2"),
    ]


def test_every_method_named_again_is_run_again(experiment, record_path, monkeypatch):
    """``--methods`` naming every method (the default's list, typed) still measures them anew."""
    path = record_path
    path.write_text(json.dumps({"runs": [_run("b", "fedavg", None, 0.83)]}))
    monkeypatch.setattr(experiment, "one_run", lambda data_dir, flags: _outcome(0.5, commit="new"))
    experiment.main(["--part", "b", "--seeds", "0", "--methods", ",".join(sorted(experiment.METHODS))])
    runs = json.loads(path.read_text())["runs"]
    assert [(r["accuracy"], r["commit"]) for r in runs if r["method"] == "fedavg"] == [(0.5, "new")]
