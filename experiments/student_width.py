"""How wide the self-training round's student is: the default measured on MNIST's released labels.

FixMatch's student runs one round of self-training (``fedvote.models.student``): the pool
points the first student is sure of become labels and a fresh student trains again. Noisy
Student (Xie et al. 2020) makes that student equal to or larger than its teacher. This
compares the round's CNN at the first student's widths (16, 32 channels: the former default)
with wider ones, on the voting paper's MNIST non-IID federation typed with the defaults
(``--dataset mnist --agents 100 --partition classes --classes-per-agent 6 --epsilon 4.3
--delta 1e-3``, seed 0).

Every variant must see the same labels, and one release gives one draw of them; so one
run (seed 0, noise seed 0) provides the teachers' clean vote histograms on the queries (a
simulation diagnostic, never released) and σ, and each of ``--draws`` label sets is drawn
from them exactly as the mechanism draws a release: argmax of the histogram plus
N(0, σ²) per class, the student keeping the queries whose noisy top-two gap is at least a
margin (PATE-FL's rule: 0.5σ; one row tries 1.5σ, which leaves more of the queries the
teachers split on unlabelled). This is an offline study of the student, not a release. Accuracy is on the 7,000 test images. Writes
``experiments/results/student_width.json`` and its docs/results.md section
(``experiments/run.py`` places it); docs/defaults.md quotes it.

Usage (repository root)::

    FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/student_width.py [--draws 3]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import fedvote
from fedvote.models.semi_supervised import ConsistencySettings
from fedvote.models.student import train_student
from fedvote.models.training import predict_labels
from fedvote.runner import build_config, make_federation

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import machine, run_draws_experiment  # noqa: E402  (experiments/run.py)

NAME = "student_width"
SETTINGS: dict[str, Any] = {
    "agents": 100, "partition": "classes", "classes_per_agent": 6, "epsilon": 4.3, "delta": 1e-3,
}  # fmt: skip
# (the self-training round's CNN widths, the student's margin rule in σ): the former default,
# the wider round, and the wider round keeping only queries whose noisy top-two gap is 1.5σ.
VARIANTS: tuple[tuple[tuple[int, int], float], ...] = (((16, 32), 0.5), ((24, 48), 0.5), ((24, 48), 1.5))


def release_labels(
    histograms: np.ndarray, noise: np.ndarray, sigma: float, min_margin: float
) -> tuple[np.ndarray, np.ndarray]:
    """One release's labels of the queries (R,) and which the student keeps (R,) bool.

    ``histograms`` (R, C) are the clean vote sums and ``noise`` (R, C) the release's N(0, σ²)
    draws; a query is kept when its noisy top-two gap is at least ``min_margin``·σ.
    """
    noisy = histograms + noise  # (R, C)
    top_two = np.sort(noisy, axis=1)[:, -2:]  # (R, 2)
    return noisy.argmax(axis=1), (top_two[:, 1] - top_two[:, 0]) >= min_margin * sigma


def vote_source(data_dir: str) -> tuple[Any, float, Any, Any]:
    """The run (seed 0, noise seed 0) whose clean votes the draws come from: its result, wall
    seconds, config and server data (public pool, test set)."""
    started = time.perf_counter()
    result = fedvote.run("pate-fl", dataset="mnist", data_dir=data_dir, seed=0, noise_seed=0, **SETTINGS)
    run_seconds = time.perf_counter() - started
    config = build_config("pate-fl", dataset="mnist", data_dir=data_dir, seed=0, **SETTINGS)
    return result, run_seconds, config, make_federation(config).server_data()


def measure(draws: int, data_dir: str) -> dict[str, Any]:
    """The run that provides the votes, then every width on each drawn label set."""
    result, run_seconds, config, server = vote_source(data_dir)
    analysis = result.analysis
    queries = analysis.query_indices
    rows = []
    for draw in range(draws):
        noise = np.random.default_rng([draw, 0x57]).normal(0.0, result.sigma, analysis.vote_histograms.shape)
        for widths, min_margin in VARIANTS:
            labels, kept = release_labels(analysis.vote_histograms, noise, result.sigma, min_margin)
            unlabeled = np.setdiff1d(np.arange(server.public_features.shape[0]), queries[kept])
            started = time.perf_counter()
            student = train_student(
                server.public_features[queries[kept]], labels[kept], num_classes=server.num_classes,
                config=config.student, seed=0, unlabeled=server.public_features[unlabeled],
                consistency=ConsistencySettings(relabel_cnn_widths=widths),
            )  # fmt: skip
            seconds = time.perf_counter() - started
            accuracy = float((predict_labels(student, server.test.features) == server.test.labels).mean())
            rows.append({
                "draw": draw,
                "widths": list(widths),
                "min_margin": min_margin,
                "accuracy": accuracy,
                "labels_used": int(kept.sum()),
                "labels_wrong": int((labels[kept] != analysis.true_labels[kept]).sum()),
                "seconds": seconds,
            })
            print(f"[{NAME}] draw {draw} widths {widths} margin {min_margin}σ: {accuracy:.4f} ({seconds:.0f} s)",
                  file=sys.stderr, flush=True)  # fmt: skip
    return {
        "name": NAME,
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "sigma": result.sigma,
        "epsilon_agent": result.privacy.agent.epsilon,
        "run_accuracy": result.accuracy,
        "run_seconds": run_seconds,
        "rows": rows,
    }


def section(record: dict[str, Any]) -> str:
    """The markdown section for docs/results.md."""
    lines = [
        "## The self-training round's student width (FixMatch's second round)",
        "",
        f"Ran {record['date']} on {record['machine']}.",
        "",
        f"Command: `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/{NAME}.py`. The voting "
        "paper's MNIST non-IID federation typed with the defaults (`--dataset mnist --agents 100 --partition "
        "classes --classes-per-agent 6 --epsilon 4.3 --delta 1e-3`, seed 0; agent ε "
        f"{record['epsilon_agent']:.4f}, σ = {record['sigma']:.3f}). Each draw is one label set drawn from the "
        "teachers' clean vote histograms as the mechanism draws a release (argmax of the counts plus "
        "N(0, σ²) per class; the queries whose noisy top-two gap is under the row's margin are left "
        "unlabelled: 0.5σ is PATE-FL's rule); every row trains on the same draws. First student: the default CNN (16, 32 channels); the row's widths are "
        "the self-training round's fresh student. Test accuracy on the 7,000 test images.",
        "",
        "| round's CNN widths | queries kept from a noisy gap of | accuracy per draw | mean | lowest | "
        "labels used (wrong) per draw | seconds per student |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for widths, min_margin in {(tuple(r["widths"]), r["min_margin"]): None for r in record["rows"]}:
        rows = [r for r in record["rows"] if (tuple(r["widths"]), r["min_margin"]) == (widths, min_margin)]
        lines.append(f"| {widths[0]}, {widths[1]} | {min_margin:g}σ | {draw_cells(rows)} |")
    lines += vote_source_footer(record)
    return "\n".join(lines)


def draw_cells(rows: list[dict[str, Any]]) -> str:
    """One setting's cells over its draws: accuracy per draw | mean | lowest | labels used (wrong) | seconds."""
    accuracies = [r["accuracy"] for r in rows]
    used = ", ".join(f"{r['labels_used']} ({r['labels_wrong']})" for r in rows)
    return (
        f"{', '.join(f'{a:.4f}' for a in accuracies)} | {statistics.mean(accuracies):.4f} | "
        f"{min(accuracies):.4f} | {used} | {statistics.mean(r['seconds'] for r in rows):.0f}"
    )


def vote_source_footer(record: dict[str, Any]) -> list[str]:
    """The section's closing lines: what the run that provided the votes scored itself."""
    return [
        "",
        f"The run that provided the votes (its own release and the default student): "
        f"{record['run_accuracy']:.4f} in {record['run_seconds']:.0f} s.",
    ]


def main(argv: list[str]) -> None:
    """Measure and write the results and the section."""
    run_draws_experiment(argv, NAME, __doc__.splitlines()[0], measure, section, 3, "label sets drawn from the clean votes")


if __name__ == "__main__":
    main(sys.argv[1:])
