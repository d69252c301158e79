"""The MNIST command's student in float32 and in bfloat16 products, on the same released labels.

``fedvote run --dataset mnist ... --epsilon 4.3 --delta 1e-3 --noise-seed s --student-precision P``
for P in float32 and bfloat16, each a fresh process, interleaved per noise seed: under one
noise seed both runs release the same labels (the teachers train in float32 either way), so
the pair differs only in the arithmetic of the student's training steps. Records the test
accuracy, the wall time and the load average of each run. Writes
``experiments/results/student_precision.json`` and its docs/results.md section.

Usage (repository root)::

    FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/student_precision.py [--seeds 11 12 13]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from mnist_command import COMMAND, one_run  # noqa: E402  (experiments/mnist_command.py)
from run import machine, refuse, require_data_dir, save_results  # noqa: E402  (experiments/run.py)

NAME = "student_precision"
PRECISIONS = ("float32", "bfloat16")


def section(record: dict[str, Any]) -> str:
    """The markdown section for docs/results.md."""
    pairs = record["pairs"]
    lines = [
        "## The student's arithmetic: float32 vs bfloat16 products on the MNIST command",
        "",
        f"Ran {record['date']} on {record['machine']}.",
        "",
        f"Command: `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/{NAME}.py`, which runs "
        f"`{COMMAND} --noise-seed s --student-precision P` for P = float32 and bfloat16, each a fresh "
        "process, the two interleaved per seed. One noise seed releases the same labels to both students "
        "(the teachers train in float32 either way); the pair differs only in the student's arithmetic "
        "(`fedvote.models.precision`: bfloat16 products, float32 weights, optimiser and losses). Wall "
        "time includes the process's start-up; load average (1 minute) before → after.",
        "",
        "| noise seed | pseudo-label accuracy | float32 accuracy | bfloat16 accuracy | float32 wall s | "
        "bfloat16 wall s | wall float32/bfloat16 | load before → after (float32; bfloat16) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for pair in pairs:
        full, mixed = pair["float32"], pair["bfloat16"]
        lines.append(
            f"| {pair['noise_seed']} | {full['label_accuracy']:.3f} | {full['accuracy']:.4f} | "
            f"{mixed['accuracy']:.4f} | {full['wall_seconds']:.0f} | {mixed['wall_seconds']:.0f} | "
            f"{full['wall_seconds'] / mixed['wall_seconds']:.2f} | "
            f"{full['load_before']:.2f} → {full['load_after']:.2f}; {mixed['load_before']:.2f} → "
            f"{mixed['load_after']:.2f} |"
        )
    differences = [p["bfloat16"]["accuracy"] - p["float32"]["accuracy"] for p in pairs]
    walls = {name: [p[name]["wall_seconds"] for p in pairs] for name in PRECISIONS}
    lines += [
        "",
        f"Mean accuracy float32 {statistics.mean(p['float32']['accuracy'] for p in pairs):.4f}, bfloat16 "
        f"{statistics.mean(p['bfloat16']['accuracy'] for p in pairs):.4f} (bfloat16 − float32 per seed: "
        + ", ".join(f"{d:+.4f}" for d in differences)
        + f"); median wall {statistics.median(walls['float32']):.0f} s against "
        f"{statistics.median(walls['bfloat16']):.0f} s.",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    """Run the pairs and write the results and the section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[11, 12, 13],
                        help="noise seeds, one pair of runs each (default 11 12 13)")  # fmt: skip
    args = parser.parse_args(argv)
    data_dir = require_data_dir(f"experiments/{NAME}.py")
    if len(set(args.seeds)) != len(args.seeds):
        refuse(f"experiments/{NAME}.py", f"--seeds must be distinct, got {args.seeds}")
    pairs = []
    for seed in args.seeds:
        pair: dict[str, Any] = {"noise_seed": seed}
        for precision in PRECISIONS:
            pair[precision] = one_run(data_dir, ("--noise-seed", str(seed), "--student-precision", precision))
            print(f"[{NAME}] seed {seed} {precision}: {pair[precision]['accuracy']:.4f} in "
                  f"{pair[precision]['wall_seconds']:.0f} s", file=sys.stderr, flush=True)  # fmt: skip
        pairs.append(pair)
    record = {"name": NAME, "machine": machine(), "date": time.strftime("%Y-%m-%d"), "pairs": pairs}
    save_results(NAME, record, section(record))


if __name__ == "__main__":
    main(sys.argv[1:])
