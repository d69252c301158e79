"""``fedvote sweep`` finishes for every registered method (issue 16, item 2 and its bar).

One CLI sweep per method in :data:`fedvote.methods.METHODS` (a method registered later is
picked up here with the voting defaults below), two grid points each, the smallest
settings that still run the method end to end. Voting methods share one
:class:`~fedvote.transport.reused_votes.ReusedVotesTransport` across the points (teachers trained once);
every other method gets a fresh in-process transport per point. A non-private method
(FedAvg, majority-vote) is a reference: it runs once, whatever the ε or σ grid.
"""

from __future__ import annotations

import json
import math

import pytest

from fedvote.cli import main
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.methods import METHODS
from fedvote.models.training import TrainingConfig
from fedvote.runner import run
from fedvote.sweep import point_config, reuses_votes, run_sweep, with_run_noise_seed

COMMON = ["--agents", "10", "--noise-seed", "0"]
VOTING = ["--teacher-model", "logistic", "--student-model", "logistic", "--epochs", "2",
          "--self-training-rounds", "0", "--queries", "20"]  # fmt: skip
ROUNDS = ["--rounds", "2", "--sampling-rate", "1", "--local-steps", "2"]
GRADIENT = [*ROUNDS, "--gradient-model", "logistic"]
FEDAUX = ["--extractor", "pca", "--extractor-dim", "8", "--distill-epochs", "2", "--local-epochs", "2"]
SIGMA_GRID = ["--grid", "sigma=16,32"]
DELTA_GRID = ["--grid", "delta=0.001,0.0001"]  # FedAUX takes its budget per head: no σ or ε axis

# Each method's flags and grid; a method not listed runs as a voting method over σ.
FLAGS: dict[str, list[str]] = {
    "pate-fl": [*VOTING, *SIGMA_GRID],
    "weighted-pate": [*VOTING, "--validation-size", "40", *SIGMA_GRID],
    "private-knn-fl": [*VOTING, "--feature-dim", "8", *SIGMA_GRID],
    "fedavg": [*GRADIENT, "--grid", "epsilon=1,2"],  # not private: one reference run, no ε applies
    "dp-fedavg": [*GRADIENT, "--grid", "sigma=1,2"],
    "dp-fedsgd": [*GRADIENT, "--grid", "sigma=1,2"],
    "prifedsync": [*ROUNDS, "--batch-size", "8", "--client-test-size", "20", "--grid", "sigma=1,2"],
    **{name: [*FEDAUX, *DELTA_GRID] for name in ("fedaux-fdp", "fedaux-f", "fedd-p", "fedavg-p")},
}


def sweep_args(method: str) -> list[str]:
    """``fedvote sweep`` flags for ``method`` (without ``--out``)."""
    return ["sweep", "--method", method, *COMMON, *FLAGS.get(method, [*VOTING, *SIGMA_GRID])]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_sweep_finishes_and_writes_sweep_json(method, tmp_path, capsys):
    out = tmp_path / "sweep"
    main([*sweep_args(method), "--out", str(out)])
    saved = json.loads((out / "sweep.json").read_text())
    assert (out / "sweep.csv").exists()
    assert saved["sweep"]["methods"] == [method]
    (axis,) = saved["sweep"]["grid"]
    rows = saved["rows"]
    for row in rows:
        assert 0.0 <= row["accuracy"] <= 1.0
        for level in ("epsilon_agent", "epsilon_instance"):  # a finite ε or null (unbounded)
            assert row[level] is None or math.isfinite(row[level])
    reuse = saved["reuse"][f"{method}/seed=0"]
    if any(row["reference"] for row in rows):  # non-private: once, at no point of the privacy axis
        assert METHODS[method].calibration_level is None
        (row,) = rows
        assert row["method"] == method and row["point"] == {} and row["reference"] is True
        assert row["epsilon_agent"] is None and row["epsilon_instance"] is None
        assert reuse.get("fresh_transports", reuse.get("teacher_trainings")) == 1
        return
    assert [row["method"] for row in rows] == [method, method]
    assert [row["point"][axis] for row in rows] == saved["sweep"]["grid"][axis]
    if reuses_votes(method):
        assert reuse["teacher_trainings"] + reuse["knn_preparations"] == 1  # once for both points
    else:
        assert reuse == {"fresh_transports": 2}
    assert set(saved["total_epsilon"]) == {"agent", "instance"}
    assert "Traceback" not in capsys.readouterr().err


def _config(method: str, options: dict[str, object], noise_seed: int | None = None) -> RunConfig:
    return RunConfig(
        method=method,
        federation=FederationConfig(agents=10),
        privacy=PrivacyConfig(noise_seed=noise_seed),
        teacher=TrainingConfig(model="logistic", epochs=2),
        student=TrainingConfig(model="logistic", epochs=2),
        queries=20,
        self_training_rounds=0,
        options=options,
    )


def test_weighted_pate_point_reuses_teachers_and_equals_the_plain_run():
    """Without noise (σ = 0, the accuracy scheme releases no summary) nothing random is left:
    the sweep's point, on reused teachers and the method's own pool (its validation slice
    taken out), is exactly the plain run."""
    config = _config("weighted-pate", {"scheme": "accuracy", "validation_size": 40})
    result = run_sweep([config], {"sigma": [0.0, 0.0]})
    assert result.reuse["weighted-pate/seed=0"]["teacher_trainings"] == 1
    plain = run(point_config(config, {"sigma": 0.0}))
    for row in result.rows:
        assert row.accuracy == plain.accuracy and row.label_accuracy == plain.label_accuracy


def test_a_fresh_transport_point_is_the_plain_run_under_its_noise_seed():
    """A point run on a fresh transport is the plain run with the point's own noise seed."""
    config = _config(
        "fedaux-fdp", {"extractor": "pca", "extractor_dim": 8, "distill_epochs": 2}, noise_seed=7
    )
    grid = {"delta": [1e-3, 1e-4]}
    result = run_sweep([config], grid)
    for index, row in enumerate(result.rows):
        plain = run(with_run_noise_seed(point_config(config, row.point), index))
        assert row.accuracy == plain.accuracy
        assert row.epsilon_agent == plain.privacy.agent.epsilon


def test_an_axis_a_method_refuses_names_the_grid(tmp_path, capsys):
    out = tmp_path / "sweep"
    with pytest.raises(SystemExit) as exit_info:
        main(
            ["sweep", "--method", "fedaux-fdp", *COMMON, *FEDAUX, "--grid", "epsilon=1,2", "--out", str(out)]
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("fedvote: error: --grid: fedaux-fdp cannot be swept over epsilon") and "\n" not in err
    )
    assert not out.exists()
