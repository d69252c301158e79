"""Sweep benchmark: a 20-point (σ, Q) grid of PATE-FL against one single run.

A sweep trains the teachers and computes the clean votes once, then per grid point
redraws the noise and trains the student (:mod:`fedvote.sweep`). This measures what
that buys on the voting paper's MNIST non-IID setting (100 agents, 6 classes each, CNN
teachers as in ``experiments/pate_mnist_noniid.json``, an MLP student): the wall time
of one ordinary run at one grid point, and of the whole 20-point sweep (which includes
training the teachers once). With no MNIST on disk it falls back to the bundled digits
set and says so.

Run from the repository root: ``python benchmarks/bench_sweep.py`` (``make bench``).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import default_data_dir, measured, print_table, write_results  # noqa: E402
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig  # noqa: E402
from fedvote.data.partition import PartitionSpec  # noqa: E402
from fedvote.models.training import TrainingConfig  # noqa: E402
from fedvote.runner import make_federation, run  # noqa: E402
from fedvote.sweep import grid_points, point_config, run_sweep  # noqa: E402

GRID = {"sigma": [20.0, 30.0, 40.0, 60.0, 80.0], "queries": [100, 200, 400, 800]}


def paper_setting() -> tuple[str, RunConfig]:
    """The MNIST non-IID setting when MNIST is on disk, else digits."""
    data_dir = default_data_dir()
    student = TrainingConfig(model="mlp", epochs=40)
    if data_dir is not None and (data_dir / "mnist").is_dir():
        config = RunConfig(
            federation=FederationConfig(
                dataset="mnist",
                data_dir=str(data_dir),
                agents=100,
                partition=PartitionSpec(scheme="classes", classes_per_agent=6),
                public_fraction=0.3,
            ),
            privacy=PrivacyConfig(noise_seed=0),
            teacher=TrainingConfig(model="cnn", epochs=20),
            student=student,
        )
        return "mnist non-iid (100 agents, CNN teachers)", config
    config = RunConfig(
        federation=FederationConfig(agents=50),
        privacy=PrivacyConfig(noise_seed=0),
        student=student,
    )
    return "digits (no MNIST found; 50 agents, MLP teachers)", config


def main() -> None:
    setting, config = paper_setting()
    points = grid_points(GRID)
    first = point_config(config, points[0])
    federation = make_federation(first)  # built once for both, outside the timings
    with measured() as single:
        single_result = run(first, federation=federation)
    with measured() as whole:
        swept = run_sweep([dataclasses.replace(config)], GRID)
    ratio = whole.seconds / single.seconds
    row = {
        "setting": setting,
        "points": len(points),
        "single_run_s": round(single.seconds, 2),
        "single_run_accuracy": round(single_result.accuracy, 4),
        "sweep_s": round(whole.seconds, 2),
        "sweep_over_single": round(ratio, 2),
        "per_point_s": round((whole.seconds - single.seconds) / len(points), 2),
        "teacher_trainings": swept.reuse["pate-fl/seed=0"]["teacher_trainings"],
        "clean_votes_computed": swept.reuse["pate-fl/seed=0"]["clean_votes_computed"],
        "peak_rss_mb": round(max(single.peak_mb, whole.peak_mb), 1),
    }
    columns = [
        {"key": "setting", "label": "setting"},
        {"key": "points", "label": "grid points"},
        {"key": "single_run_s", "label": "one run s", "format": ".1f"},
        {"key": "sweep_s", "label": "sweep s", "format": ".1f"},
        {"key": "sweep_over_single", "label": "sweep / run", "format": ".2f"},
        {"key": "teacher_trainings", "label": "teacher trainings"},
        {"key": "clean_votes_computed", "label": "clean votes computed"},
        {"key": "peak_rss_mb", "label": "peak RSS MB", "format": ".0f"},
    ]
    print_table([row], columns)
    accuracy = {f"σ={r.point['sigma']:g}, Q={r.point['queries']}": round(r.accuracy, 3) for r in swept.rows}
    write_results(
        "sweep",
        title="Sweeps reuse teachers and clean votes",
        rows=[row],
        columns=columns,
        notes=(
            f"grid {GRID}; the sweep's time includes training the teachers once; the single run "
            "is one ordinary `fedvote run` at the first grid point on the same federation; "
            f"student accuracy per point: {accuracy}"
        ),
        summary=[
            f"A {len(points)}-point (σ, Q) sweep of PATE-FL on {setting} costs {ratio:.2f}× one run "
            f"({whole.seconds:.1f} s vs {single.seconds:.1f} s); the teachers were trained "
            f"{row['teacher_trainings']} time and each of the {row['clean_votes_computed']} "
            "clean vote sums computed once."
        ],
    )


if __name__ == "__main__":
    main()
