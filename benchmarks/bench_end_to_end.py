"""End-to-end PATE-FL on the paper's MNIST non-IID setting, phase by phase.

Runs ``fedvote.runner.run`` on the config of the command that issues 17 and 21 time,
``fedvote run --dataset mnist --data-dir DIR --agents 100 --partition classes
--classes-per-agent 6 --epsilon 4.3 --delta 1e-3`` (every other setting its default, built
by :func:`fedvote.runner.build_config` as the command line builds it), or on a config file
(``--config``, e.g. ``experiments/pate_mnist_noniid.json``), and records, for each
phase, its wall time and the process's peak resident memory during it (reset when the phase
starts): building the federation, calibrating σ (accounting), training the teachers, the
noisy votes, training the student (with its self-training rounds), and the evaluation
(test accuracy, teacher accuracies, data-dependent analysis and the final ε).

The host's speed moves run to run (a shared machine: the same code took 163 s and 198 s twenty
minutes apart, its teachers, unchanged, 27 s and 35 s), so a reference workload is timed
just before and just after the run: :func:`benchmarks.common.reference_step_ms`, the student's
training step on fixed random data. Its milliseconds say how fast the machine was while the run was timed.

MNIST comes from $FEDVOTE_DATA or ../shared/datasets; without it the benchmark prints a note
and writes a results file with no rows. ``--teacher-epochs`` / ``--student-epochs`` shorten
the run (the defaults are the experiment's).

Run: ``python benchmarks/bench_end_to_end.py`` (``make bench``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

if __package__ in (None, ""):  # run as a file: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (
    default_data_dir,
    peak_rss_mb,
    print_table,
    reference_step_ms,
    reset_peak,
    write_results,
)
from fedvote.config import load_run_config
from fedvote.models.precision import compute_device
from fedvote.progress import StepBar
from fedvote.runner import build_config, run

# fedvote run's flags in the timed command (issue 17's and 21's Bar), data directory aside.
COMMAND_SETTINGS: dict[str, Any] = {
    "agents": 100, "partition": "classes", "classes_per_agent": 6, "epsilon": 4.3, "delta": 1e-3,
}  # fmt: skip
COMMAND = (
    "fedvote run --dataset mnist --data-dir DIR --agents 100 --partition classes "
    "--classes-per-agent 6 --epsilon 4.3 --delta 1e-3"
)
COLUMNS = [
    {"key": "phase", "label": "phase"},
    {"key": "seconds", "label": "seconds", "format": ".2f"},
    {"key": "share", "label": "share", "format": ".0%"},
    {"key": "peak_mb", "label": "peak MB", "format": ".0f"},
]


class _Silent:
    def advance(self, amount: int = 1) -> None:
        """Ignore progress."""


class PhaseTimer:
    """A fedvote ``Progress`` that times every step and records its peak memory."""

    def __init__(self) -> None:
        self.phases: list[dict[str, Any]] = []

    @contextmanager
    def step(self, description: str, total: int) -> Iterator[StepBar]:
        reset_peak()
        start = time.perf_counter()
        try:
            yield _Silent()
        finally:
            seconds = time.perf_counter() - start
            self.phases.append({"phase": description, "seconds": seconds, "peak_mb": peak_rss_mb()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=None, help=f"a run config file [default: {COMMAND}]")
    parser.add_argument("--teacher-epochs", type=int, default=None, help="override the teachers' epochs")
    parser.add_argument("--student-epochs", type=int, default=None, help="override the student's epochs")
    parser.add_argument(
        "--out", type=Path, default=None,
        help="results file [default: benchmarks/results/end_to_end.json; e.g. end_to_end_gpu.json on a GPU]",
    )  # fmt: skip
    args = parser.parse_args(argv)
    data_dir = default_data_dir()
    source = COMMAND if args.config is None else str(args.config)
    # where fedvote run puts the teachers (LocalTransport's "auto")
    device = compute_device()
    on_gpu = "" if device.type == "cpu" else f", on {torch.cuda.get_device_name(device)}"
    title = f"End-to-end PATE-FL, MNIST non-IID{on_gpu} ({source})"
    if data_dir is None or not (data_dir / "mnist").is_dir():
        note = "skipped: MNIST not found (set FEDVOTE_DATA or put it in ../shared/datasets/mnist)"
        print(note)
        write_results("end_to_end", title=title, rows=[], columns=COLUMNS, notes=note, path=args.out)
        return 0
    if args.config is None:
        config = build_config("pate-fl", dataset="mnist", data_dir=str(data_dir), **COMMAND_SETTINGS)
    else:
        config = load_run_config(args.config)
    federation = dataclasses.replace(config.federation, data_dir=str(data_dir))
    teacher, student = config.teacher, config.student
    if args.teacher_epochs is not None:
        teacher = dataclasses.replace(teacher, epochs=args.teacher_epochs)
    if args.student_epochs is not None:
        student = dataclasses.replace(student, epochs=args.student_epochs)
    config = dataclasses.replace(config, federation=federation, teacher=teacher, student=student)

    timer = PhaseTimer()
    reference_before = reference_step_ms()
    reset_peak()
    load_before = os.getloadavg()
    result = run(config, progress=timer)
    load_after = os.getloadavg()
    reference_after = reference_step_ms()
    total = result.timings["total_s"]
    steps = list(timer.phases)
    rows: list[dict[str, Any]] = [
        {"phase": "federation (load and partition MNIST)", "seconds": result.timings["data_s"], "peak_mb": None},
        {"phase": "accounting: calibrate σ to the target ε", "seconds": result.timings["calibration_s"], "peak_mb": None},
        *steps,
        {"phase": "evaluation: accuracy, teachers, data-dependent ε", "seconds": result.timings["evaluation_s"], "peak_mb": None},
        {"phase": "total", "seconds": total, "peak_mb": peak_rss_mb()},
    ]
    for row in rows:
        row["share"] = row["seconds"] / total if total else None
    print_table(rows, COLUMNS)
    epsilon = result.privacy.agent.epsilon
    summary = [
        f"{result.agents} agents, {result.queries} queries, σ = {result.sigma:.2f}: student test accuracy "
        f"{result.accuracy:.4f}, pseudo-label accuracy {result.label_accuracy or 0:.4f}, teachers "
        f"{result.diagnostics.get('teacher_accuracy', 0):.4f} on average; agent-level ε = {epsilon if epsilon is None else round(epsilon, 3)}",
        f"teacher model {result.details['teacher_model']} ({result.details['teacher_epochs']} epochs, as planned), "
        f"student "
        f"{config.student.model} ({config.student.epochs} epochs, "
        f"{result.details.get('student_precision', 'float32')} arithmetic); total {total:.1f} s",
        "load average (1, 5, 15 min) before: " + ", ".join(f"{v:.2f}" for v in load_before)
        + "; after: " + ", ".join(f"{v:.2f}" for v in load_after),
        f"teachers and votes on {device} (fedvote run's default: CUDA when "
        "PyTorch sees a GPU), the student's consistency training on "
        f"{compute_device('auto', result.details.get('student_precision', 'float32'))}",
        f"host speed: the reference student step (benchmarks/common.py: reference_step_ms) took "
        f"{reference_before:.1f} ms just before the run and {reference_after:.1f} ms just after",
    ]
    for line in summary:
        print(line)
    out = write_results(
        "end_to_end",
        title=title,
        rows=rows,
        columns=COLUMNS,
        notes=(
            "phases as fedvote.runner.run reports them (timings) and as its progress steps mark them; "
            "peak MB: the process's resident set during the phase (reset at its start)"
        ),
        summary=summary,
        path=args.out,
    )
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
