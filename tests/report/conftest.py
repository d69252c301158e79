"""Fixtures for the report tests: two real small runs, a sweep file, synthetic arrays."""

import json

import numpy as np
import pytest

from fedvote.cli import main

# The small run of tests/cli/test_run_command.py: 10 agents on digits, logistic models.
SMALL = ["--agents", "10", "--queries", "40", "--epochs", "5", "--teacher-model", "logistic",
         "--student-model", "logistic", "--noise-seed", "1"]


def run_cli(args):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
        raise SystemExit(0)
    return exit_info.value.code


@pytest.fixture(scope="session")
def voting_run(tmp_path_factory):
    """A PATE-FL run directory (result.json + analysis.npz); σ small enough to show margins."""
    out = tmp_path_factory.mktemp("pate-run")
    assert run_cli(["run", *SMALL, "--sigma", "2", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def gradient_run(tmp_path_factory):
    """A DP-FedAvg run directory: no votes, no teachers."""
    out = tmp_path_factory.mktemp("dpfedavg-run")
    assert run_cli(["run", "--method", "dp-fedavg", "--agents", "10", "--rounds", "4", "--sampling-rate", "0.5",
                    "--noise-seed", "1", "--epsilon", "4", "--out", str(out)]) == 0
    return out


def sweep_payload():
    """sweep.json as `fedvote sweep` writes it (the schema agreed in issue 9), two seeds."""
    rows = []
    accuracy = {"pate-fl": [0.62, 0.74, 0.83, 0.88], "dp-fedavg": [0.31, 0.42, 0.55, 0.61]}
    for method in ("pate-fl", "dp-fedavg"):
        for i, epsilon in enumerate([1.0, 2.0, 4.0, 8.0]):
            for seed in (0, 1):
                row = {
                    "method": method, "point": {"epsilon": epsilon}, "seed": seed,
                    "sigma": 40.0 / epsilon, "queries": 100 if method == "pate-fl" else 0,
                    "accuracy": accuracy[method][i] + 0.01 * seed,
                    "label_accuracy": 0.7 + 0.02 * i if method == "pate-fl" else None,
                    "epsilon_agent": epsilon * 0.9995, "epsilon_instance": epsilon * 1.6 if method == "pate-fl" else epsilon * 20,
                    "delta": 0.001, "accountant": "pld", "calibrated_level": "agent", "time_s": 1.5 + seed,
                }
                rows.append(row)
    return {
        "sweep": {"methods": ["pate-fl", "dp-fedavg"], "grid": {"epsilon": [1, 2, 4, 8]},
                  "command": "fedvote sweep --method pate-fl,dp-fedavg --grid epsilon=1,2,4,8",
                  "machine": {"python": "3.11.7", "cpu_count": 2}},
        "base_config": {"method": "pate-fl", "federation": {"dataset": "digits", "agents": 50}, "seed": 0},
        "rows": rows,
    }


@pytest.fixture()
def sweep_dir(tmp_path):
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps(sweep_payload(), indent=2))
    return out


@pytest.fixture(scope="session")
def synthetic():
    """Small arrays for the plots alone: 20 agents, 5 classes, 60 queries."""
    rng = np.random.default_rng(0)
    agents, classes, queries = 20, 5, 60
    truth = rng.integers(0, classes, size=queries)
    histograms = np.zeros((queries, classes))
    for q in range(queries):
        right = rng.integers(4, agents + 1)
        histograms[q, truth[q]] = right
        histograms[q] += np.bincount(rng.integers(0, classes, size=agents - right), minlength=classes)
    pseudo = np.where(rng.random(queries) < 0.85, np.argmax(histograms, axis=1), rng.integers(0, classes, queries))
    return {
        "agents": agents, "classes": classes, "histograms": histograms, "truth": truth, "pseudo": pseudo,
        "teacher_accuracies": rng.uniform(0.5, 0.95, size=agents),
        "class_counts": rng.integers(0, 40, size=(agents, classes)),
    }
