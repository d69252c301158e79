"""A non-private method in a sweep: run once per seed as a reference row, drawn as a dashed line."""

from __future__ import annotations

import csv
import json

import pytest

from fedvote.cli import main
from fedvote.config import FederationConfig, RunConfig
from fedvote.models.training import TrainingConfig
from fedvote.report.loaders import tradeoff_points
from fedvote.report.plots import tradeoff_figure
from fedvote.sweep import grid_points, reference_points, run_sweep

SMALL = ["--agents", "10", "--noise-seed", "0", "--queries", "40", "--epochs", "5", "--teacher-model", "logistic",
         "--student-model", "logistic", "--self-training-rounds", "0"]  # fmt: skip


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    """``fedvote sweep --method pate-fl,majority-vote --grid epsilon=1,2,4``."""
    out = tmp_path_factory.mktemp("reference-sweep")
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "--method", "pate-fl,majority-vote", *SMALL, "--grid", "epsilon=1,2,4", "--out", str(out)])
        raise SystemExit(0)
    assert exit_info.value.code == 0
    return out


@pytest.mark.slow  # a full sweep: make test-slow (CI); the plot's dashed line is checked in make test
def test_the_non_private_method_runs_once_as_a_reference_row(sweep_dir):
    saved = json.loads((sweep_dir / "sweep.json").read_text())
    assert saved["sweep"]["methods"] == ["pate-fl", "majority-vote"]
    private = [row for row in saved["rows"] if row["method"] == "pate-fl"]
    assert [row["point"] for row in private] == [{"epsilon": 1.0}, {"epsilon": 2.0}, {"epsilon": 4.0}]
    assert not any(row["reference"] for row in private)
    assert all(row["epsilon_agent"] is not None for row in private)
    (reference,) = [row for row in saved["rows"] if row["method"] == "majority-vote"]  # once, not per ε
    assert reference["reference"] is True and reference["point"] == {}  # no ε point applies to it
    assert reference["epsilon_agent"] is None and reference["epsilon_instance"] is None
    assert reference["sigma"] == 0.0 and reference["calibrated_level"] is None
    assert 0.0 <= reference["accuracy"] <= 1.0
    reuse = saved["reuse"]["majority-vote/seed=0"]  # one run: one transport, teachers trained once
    assert reuse.get("fresh_transports", reuse.get("teacher_trainings")) == 1


def test_sweep_csv_leaves_the_axes_of_the_reference_row_empty(sweep_dir):
    with (sweep_dir / "sweep.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    (reference,) = [row for row in rows if row["method"] == "majority-vote"]
    assert reference["epsilon"] == "" and reference["epsilon_agent"] == "" and reference["reference"] == "True"
    assert [row["epsilon"] for row in rows if row["method"] == "pate-fl"] == ["1.0", "2.0", "4.0"]


def test_the_tradeoff_plot_draws_the_reference_as_a_dashed_line(sweep_dir):
    saved = json.loads((sweep_dir / "sweep.json").read_text())
    (reference,) = [row for row in saved["rows"] if row["method"] == "majority-vote"]
    figure = tradeoff_figure(tradeoff_points([sweep_dir]))
    lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
    dashed = lines["majority-vote (not private)"]  # labelled with the method's name
    assert dashed.get_linestyle() == "--"
    assert set(dashed.get_ydata()) == {reference["accuracy"]}  # horizontal, at its accuracy
    assert lines["pate-fl"].get_linestyle() == "-"  # the private method is the solid curve over ε


def test_the_report_page_renders_the_reference_row(sweep_dir):
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(sweep_dir)])
        raise SystemExit(0)
    assert exit_info.value.code == 0
    assert "majority-vote" in (sweep_dir / "report.html").read_text()


def test_reference_points_keep_only_the_axes_that_apply():
    points = grid_points({"epsilon": [1.0, 2.0], "queries": [20, 40], "delta": [1e-3, 1e-4]})
    assert reference_points(points) == [{"queries": 20}, {"queries": 40}]
    assert reference_points(grid_points({"sigma": [1.0, 2.0]})) == [{}]


def test_a_reference_runs_once_per_value_of_an_axis_that_still_changes_it():
    config = RunConfig(
        method="majority-vote",
        federation=FederationConfig(agents=10),
        teacher=TrainingConfig(model="logistic", epochs=2),
        student=TrainingConfig(model="logistic", epochs=2),
        self_training_rounds=0,
    )
    result = run_sweep([config], {"epsilon": [1.0, 2.0, 4.0], "queries": [20, 40]})
    assert [(row.point, row.queries, row.reference) for row in result.rows] == [
        ({"queries": 20}, 20, True),
        ({"queries": 40}, 40, True),
    ]
    assert result.total_epsilon == {"agent": None, "instance": None}  # it released its votes unnoised
