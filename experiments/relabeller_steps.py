"""How long the first FixMatch student trains: it only picks the pool points the self-training round labels.

FixMatch's student runs one round of self-training (``fedvote.models.student``): the pool
points the first student predicts with softmax ≥ 0.99 become labels and a fresh, wider
student trains again. The first student is never the result, so it need not train as long
as the round's: ``ConsistencySettings.relabeller_step_fraction`` sets its share of the
round's steps. This compares fractions on the voting paper's MNIST non-IID federation typed
with the defaults (``--dataset mnist --agents 100 --partition classes --classes-per-agent 6
--epsilon 4.3 --delta 1e-3``, seed 0), with the student training in bfloat16 where the CPU
has it (the default's ``auto``).

Every fraction must see the same labels: one run (seed 0, noise seed 0) provides the
teachers' clean vote histograms on the queries (a simulation diagnostic, never released)
and σ, and each of ``--draws`` label sets is drawn from them exactly as the mechanism draws
a release (``experiments/student_width.py``'s ``release_labels``: argmax of the histogram
plus N(0, σ²) per class, the student keeping the queries whose noisy top-two gap is at least
0.5σ). An offline study of the student, not a release. Accuracy is on the 7,000 test
images. Writes ``experiments/results/relabeller_steps.json`` and its docs/results.md
section (``experiments/run.py`` places it); docs/defaults.md quotes it.

Usage (repository root)::

    FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/relabeller_steps.py [--draws 3]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedvote.models.semi_supervised import ConsistencySettings
from fedvote.models.student import train_student
from fedvote.models.training import predict_labels

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import machine, run_draws_experiment  # noqa: E402  (experiments/run.py)
from student_width import draw_cells, release_labels, vote_source, vote_source_footer  # noqa: E402  (the same federation and draws)

NAME = "relabeller_steps"
# The first student's share of the round's steps: all of them (the former default), half.
FRACTIONS: tuple[float, ...] = (1.0, 0.5)


def measure(draws: int, data_dir: str) -> dict[str, Any]:
    """The run that provides the votes, then every fraction on each drawn label set."""
    result, run_seconds, config, server = vote_source(data_dir)
    analysis = result.analysis
    queries = analysis.query_indices
    rows = []
    for draw in range(draws):
        noise = np.random.default_rng([draw, 0x57]).normal(0.0, result.sigma, analysis.vote_histograms.shape)
        labels, kept = release_labels(analysis.vote_histograms, noise, result.sigma, 0.5)
        unlabeled = np.setdiff1d(np.arange(server.public_features.shape[0]), queries[kept])
        for fraction in FRACTIONS:
            started = time.perf_counter()
            student = train_student(
                server.public_features[queries[kept]], labels[kept], num_classes=server.num_classes,
                config=config.student, seed=0, unlabeled=server.public_features[unlabeled],
                consistency=ConsistencySettings(relabeller_step_fraction=fraction),
            )  # fmt: skip
            seconds = time.perf_counter() - started
            accuracy = float((predict_labels(student, server.test.features) == server.test.labels).mean())
            rows.append({
                "draw": draw,
                "fraction": fraction,
                "accuracy": accuracy,
                "labels_used": int(kept.sum()),
                "labels_wrong": int((labels[kept] != analysis.true_labels[kept]).sum()),
                "seconds": seconds,
            })
            print(f"[{NAME}] draw {draw} fraction {fraction:g}: {accuracy:.4f} ({seconds:.0f} s)",
                  file=sys.stderr, flush=True)  # fmt: skip
    return {
        "name": NAME,
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "sigma": result.sigma,
        "epsilon_agent": result.privacy.agent.epsilon,
        "student_precision": result.details.get("student_precision"),
        "run_accuracy": result.accuracy,
        "run_seconds": run_seconds,
        "rows": rows,
    }


def section(record: dict[str, Any]) -> str:
    """The markdown section for docs/results.md."""
    lines = [
        "## How long the first FixMatch student trains (it only picks the self-training round's labels)",
        "",
        f"Ran {record['date']} on {record['machine']}.",
        "",
        f"Command: `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/{NAME}.py`. The voting "
        "paper's MNIST non-IID federation typed with the defaults (`--dataset mnist --agents 100 --partition "
        "classes --classes-per-agent 6 --epsilon 4.3 --delta 1e-3`, seed 0; agent ε "
        f"{record['epsilon_agent']:.4f}, σ = {record['sigma']:.3f}; student arithmetic "
        f"{record['student_precision']}). Each draw is one label set drawn from the teachers' clean vote "
        "histograms as the mechanism draws a release (argmax of the counts plus N(0, σ²) per class; "
        "queries whose noisy top-two gap is under 0.5σ left unlabelled); every row trains on the same "
        "draws. The fraction is the first student's share of the self-training round's steps (3,760 on "
        "this pool). Test accuracy of the final student on the 7,000 test images; seconds: the whole "
        "student (both rounds).",
        "",
        "| first student's share of the steps | accuracy per draw | mean | lowest | labels used (wrong) per draw "
        "| seconds per student |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for fraction in dict.fromkeys(r["fraction"] for r in record["rows"]):
        rows = [r for r in record["rows"] if r["fraction"] == fraction]
        lines.append(f"| {fraction:g} | {draw_cells(rows)} |")
    lines += vote_source_footer(record)
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    """Measure and write the results and the section."""
    run_draws_experiment(argv, NAME, __doc__.splitlines()[0], measure, section, 3, "label sets drawn from the clean votes")


if __name__ == "__main__":
    main(sys.argv[1:])
