"""Which teachers ``--teacher-model auto`` trains: MLP against CNN teachers on MNIST and on digits.

The planner (``fedvote.models.config.teacher_training``) picks CNN teachers for images of
at least 16x16 when every agent holds at least 320 records, else MLP teachers. This measures
what that rule rests on:

* MNIST, the voting paper's non-IID federation typed with the defaults (``--agents 100
  --partition classes --classes-per-agent 6 --epsilon 4.3 --delta 1e-3``, seed 0, the default Q):
  per teacher setting, the teachers' mean accuracy on the diagnostic test sample, how many
  of the Q queries their clean vote plurality gets wrong, and how many labels a release
  gets wrong among the queries the student keeps (noisy top-two gap ≥ 0.5σ), averaged
  over ``--draws`` label sets drawn from the clean histograms exactly as the mechanism
  draws one (argmax of the counts plus N(0, σ²) per class). Clean histograms and true
  labels are simulation diagnostics: this is an offline study of the rule, not a release.
  The student is a one-epoch supervised one (its accuracy is not the point here);
  ``experiments/mnist_command.py`` measures the default student on the command as typed.
* digits, the default command (``fedvote run``, seed 0): the default student's test
  accuracy with MLP and with CNN teachers.

Writes ``experiments/results/teacher_choice.json`` and its docs/results.md section
(``experiments/run.py`` places it); docs/defaults.md quotes it.

Usage (repository root)::

    FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/teacher_choice.py [--draws 2000]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import fedvote

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import machine, run_draws_experiment  # noqa: E402  (experiments/run.py)
from student_width import release_labels  # noqa: E402  (one release's labels, as the mechanism draws them)

NAME = "teacher_choice"
MNIST: dict[str, Any] = {
    "dataset": "mnist", "agents": 100, "partition": "classes", "classes_per_agent": 6, "epsilon": 4.3,
    "delta": 1e-3, "seed": 0, "noise_seed": 0,
}  # fmt: skip
# A one-epoch supervised student: the labels are what is measured.
CHEAP_STUDENT: dict[str, Any] = {"semi_supervised": "supervised", "student_epochs": 1}
# (teacher model, epochs; None: the planner's): the former default, the planner's choice
# (on MNIST a CNN for ceil(3000 / 584) = 6 epochs), a longer CNN.
MNIST_TEACHERS: tuple[tuple[str, int | None], ...] = (("mlp", 40), ("auto", None), ("cnn", 10))
DIGITS_TEACHERS: tuple[tuple[str, int | None], ...] = (("mlp", 40), ("cnn", 5), ("cnn", 10))
MIN_MARGIN = 0.5  # the student keeps queries whose noisy top-two gap is at least 0.5σ (PATE-FL's rule)


def label_errors(histograms: np.ndarray, truth: np.ndarray, sigma: float, draws: int) -> tuple[float, float]:
    """Mean over ``draws`` releases of (labels wrong among the kept queries, queries kept).

    ``histograms`` (R, C) are the clean vote sums, ``truth`` (R,) the queries' labels.
    """
    rng = np.random.default_rng([0x7EAC, draws])
    wrong, kept_count = [], []
    for _ in range(draws):
        labels, kept = release_labels(histograms, rng.normal(0.0, sigma, histograms.shape), sigma, MIN_MARGIN)
        wrong.append(int((labels[kept] != truth[kept]).sum()))
        kept_count.append(int(kept.sum()))
    return float(np.mean(wrong)), float(np.mean(kept_count))


def measure(draws: int, data_dir: str) -> dict[str, Any]:
    """Every MNIST teacher setting's labels, then the digits command with each teacher setting."""
    mnist_rows = []
    for model, epochs in MNIST_TEACHERS:
        started = time.perf_counter()
        result = fedvote.run(
            "pate-fl", data_dir=data_dir, teacher_model=model, epochs=epochs, **CHEAP_STUDENT, **MNIST
        )
        seconds = time.perf_counter() - started
        analysis = result.analysis
        histograms, truth = analysis.vote_histograms, analysis.true_labels
        wrong, kept = label_errors(histograms, truth, result.sigma, draws)
        mnist_rows.append({
            "teacher_model": result.details["teacher_model"],
            "teacher_epochs": result.details["teacher_epochs"],
            "planned": epochs is None,
            "teacher_accuracy": float(np.mean(analysis.teacher_accuracies)),
            "teacher_accuracy_test_points": int(analysis.teacher_accuracy_test_points),
            "queries": int(truth.shape[0]),
            "plurality_wrong": int((histograms.argmax(axis=1) != truth).sum()),
            "release_wrong_mean": wrong,
            "release_kept_mean": kept,
            "sigma": result.sigma,
            "epsilon_agent": result.privacy.agent.epsilon,
            "method_seconds": result.timings["method_s"],
            "run_seconds": seconds,
        })  # fmt: skip
        print(f"[{NAME}] mnist {model} x{epochs or 'planned'}: {wrong:.2f} wrong of {kept:.1f} kept ({seconds:.0f} s)",
              file=sys.stderr, flush=True)  # fmt: skip
    digits_rows = []
    for model, epochs in DIGITS_TEACHERS:
        started = time.perf_counter()
        result = fedvote.run("pate-fl", teacher_model=model, epochs=epochs, student_epochs=40, seed=0, noise_seed=0)
        digits_rows.append({
            "teacher_model": model,
            "teacher_epochs": epochs,
            "accuracy": result.accuracy,
            "label_accuracy": result.label_accuracy,
            "smallest_agent_records": int(min(result.details["agent_records"])),
            "epsilon_agent": result.privacy.agent.epsilon,
            "run_seconds": time.perf_counter() - started,
        })  # fmt: skip
        print(f"[{NAME}] digits {model} x{epochs}: {result.accuracy:.4f}", file=sys.stderr, flush=True)
    return {
        "name": NAME,
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "draws": draws,
        "mnist": mnist_rows,
        "digits": digits_rows,
    }


def section(record: dict[str, Any]) -> str:
    """The markdown section for docs/results.md."""
    first = record["mnist"][0]
    lines = [
        "## Which teachers `--teacher-model auto` trains (MLP or CNN)",
        "",
        f"Ran {record['date']} on {record['machine']}.",
        "",
        f"Command: `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/{NAME}.py`. MNIST: the "
        "voting paper's non-IID federation typed with the defaults (`--dataset mnist --agents 100 --partition "
        "classes --classes-per-agent 6 --epsilon 4.3 --delta 1e-3`, seed 0, noise seed 0; "
        f"Q = {first['queries']}, σ = {first['sigma']:.3f}, agent ε {first['epsilon_agent']:.4f}), each "
        "row one run with a one-epoch supervised student (the labels are measured, not the student). "
        f"Teacher accuracy: mean over the 100 teachers on {first['teacher_accuracy_test_points']} test "
        "points (an agent knows 6 of the 10 classes, so 0.6 is the most a teacher can score). Release: "
        f"mean over {record['draws']} label sets drawn from the run's clean vote histograms as the "
        "mechanism draws one (argmax of the counts plus N(0, σ²) per class), counting the queries the "
        "student keeps (noisy top-two gap ≥ 0.5σ) and the wrong labels among them — a simulation "
        "diagnostic, not a release. Seconds: the run's method phase (teachers, votes, the one-epoch "
        "student).",
        "",
        "| teachers | teacher accuracy | clean plurality wrong (of Q) | release: labels kept | release: kept "
        "labels wrong | method s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in record["mnist"]:
        lines.append(
            f"| {row['teacher_model']}, {row['teacher_epochs']} epochs{' (planned)' if row.get('planned') else ''} | "
            f"{row['teacher_accuracy']:.3f} | "
            f"{row['plurality_wrong']} | {row['release_kept_mean']:.1f} | {row['release_wrong_mean']:.2f} | "
            f"{row['method_seconds']:.1f} |"
        )
    smallest = record["digits"][0]["smallest_agent_records"]
    lines += [
        "",
        f"Digits (8×8; the default federation, its smallest agent holding {smallest} records): the default command "
        "(`fedvote run`, seed 0, noise seed 0, the default student) with each teacher setting.",
        "",
        "| teachers | test accuracy | pseudo-label accuracy | agent ε |",
        "| --- | --- | --- | --- |",
    ]
    for row in record["digits"]:
        lines.append(
            f"| {row['teacher_model']}, {row['teacher_epochs']} epochs | {row['accuracy']:.4f} | "
            f"{row['label_accuracy']:.3f} | {row['epsilon_agent']:.4f} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    """Measure and write the results and the section."""
    run_draws_experiment(argv, NAME, __doc__.splitlines()[0], measure, section, 2000, "label sets drawn per MNIST row")


if __name__ == "__main__":
    main(sys.argv[1:])
