"""Benchmark: what issue 21's ratio bars ask of this machine's arithmetic (its Bars 2 and 3).

Two bars are ratios against a fixed amount of arithmetic: the CNN ensemble batched ≥ 1.5×
faster than the per-agent loop, and DP-FedAvg on MNIST ≥ 20× faster than Flower's simulation
engine. This measures the machine's fp32 matmul rate (a large square product, the best any
training step can hope for; and the product of DP-FedAvg's client step, five stacked
32 × 784 by 784 × 128 products), counts the floating-point operations of one training step of
each model with ``torch.utils.flop_counter.FlopCounterMode`` (forward and backward, the
models fedvote builds), and reads the measured times of ``teachers.json`` and of the DP-FedAvg
peers file (``--peers``: ``peers.json``, which ``make bench`` writes, by default; issue 21's
figures read ``peers_dpfedavg_unset.json``, OpenMP's default wait policy as ``fedvote run`` runs).
Each bar then becomes a rate: the GFLOP/s the training must sustain to meet it, beside the
rates measured here. Writes benchmarks/results/compute_bound.json.

Run: ``python benchmarks/bench_compute_bound.py`` on a quiet machine (``make bench``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

if __package__ in (None, ""):  # run as a file: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import RESULTS_DIR, write_results
from fedvote.models.zoo import build_model

CNN_BAR = 1.5  # issue 21: batched CNN ensemble >= 1.5x the loop
FLOWER_BAR = 20.0  # issue 21: fedvote >= 20x Flower's simulation engine on the DP-FedAvg jobs
PEERS_FILE = (
    "peers_dpfedavg_unset.json"  # the Bar's measurement: OpenMP's default wait policy, as fedvote run runs
)


def step_flops(model_name: str, example_shape: tuple[int, ...], batch: int = 32) -> float:
    """Floating-point operations of one SGD step's forward and backward, per example."""
    model = build_model(model_name, example_shape, 10, generator=torch.Generator().manual_seed(0))
    inputs = torch.randn(batch, *example_shape)  # (B, *shape)
    targets = torch.randint(0, 10, (batch,))  # (B,)
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(inputs), targets).backward()
    return counter.get_total_flops() / batch


def best_seconds(fn: Any, repeats: int) -> float:
    """The fastest of ``repeats`` timed calls (after one warm-up call)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def matmul_rates(repeats: int) -> dict[str, float]:
    """GFLOP/s of a 4096² fp32 product, of DP-FedAvg's client product (5 × 32×784 @ 784×128), of a bf16 4096²."""
    left, right = torch.randn(4096, 4096), torch.randn(4096, 4096)
    square = 2 * 4096**3 / best_seconds(lambda: left @ right, repeats) / 1e9
    batch, weights = torch.randn(5, 32, 784), torch.randn(5, 784, 128)  # five sampled clients' step

    def hundred_steps() -> None:
        for _ in range(100):
            torch.bmm(batch, weights)

    client = 100 * 2 * 5 * 32 * 784 * 128 / best_seconds(hundred_steps, repeats) / 1e9
    left_bf16, right_bf16 = left.bfloat16(), right.bfloat16()  # the one faster arithmetic this CPU offers
    bf16 = 2 * 4096**3 / best_seconds(lambda: left_bf16 @ right_bf16, repeats) / 1e9
    return {"square_gflops": square, "client_gflops": client, "square_bf16_gflops": bf16}


def load_average() -> str:
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per product (default 5)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2: the bars' 2 cores)")
    parser.add_argument(
        "--peers",
        default=PEERS_FILE,
        help=f"DP-FedAvg results in benchmarks/results/ to read (default {PEERS_FILE})",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.threads < 1:
        parser.error("--repeats and --threads must be >= 1")
    torch.set_num_threads(args.threads)
    teachers = json.loads((RESULTS_DIR / "teachers.json").read_text())
    peers_path = RESULTS_DIR / args.peers
    if not peers_path.is_file():
        parser.error(f"--peers: no {peers_path}; run benchmarks/bench_peers.py --jobs dp-fedavg first")
    peers = json.loads(peers_path.read_text())
    cnn = next(r for r in teachers["results"] if r["data"] == "mnist" and r["model"] == "cnn")
    mnist = {r["framework"]: r for r in peers["results"] if r["job"].startswith("dp-fedavg mnist")}
    load_before = load_average()
    rates = matmul_rates(args.repeats)
    load_after = load_average()

    cnn_flops = step_flops("cnn", (1, 28, 28)) * cnn["agents"] * cnn["records"] * cnn["epochs"]
    cnn_needed_s = cnn["loop_s"] / CNN_BAR
    mlp_job = mnist["fedvote"]
    # mean sampled clients x rounds x local steps x batch: the examples DP-FedAvg trains on
    examples = mlp_job["mean_sampled"] * 100 * 20 * 32
    mlp_flops = step_flops("mlp", (1, 28, 28)) * examples
    flower_needed_s = mnist["flower"]["job_s"] / FLOWER_BAR
    rows = [
        {
            "bar": f"CNN ensemble batched >= {CNN_BAR}x the loop (100 x 600 MNIST, 5 epochs)",
            "gflop": cnn_flops / 1e9,
            "measured": f"batched {cnn['batched_s']:.2f} s, loop {cnn['loop_s']:.2f} s",
            "measured_gflops": f"batched {cnn_flops / cnn['batched_s'] / 1e9:.0f}, "
            f"loop {cnn_flops / cnn['loop_s'] / 1e9:.0f}",
            "needed_s": cnn_needed_s,
            "needed_gflops": cnn_flops / cnn_needed_s / 1e9,
            "reference_gflops": rates["square_gflops"],
            "needed_share": cnn_flops / cnn_needed_s / 1e9 / rates["square_gflops"],
        },
        {
            "bar": f"DP-FedAvg MNIST >= {FLOWER_BAR:.0f}x Flower (job, no start-up)",
            "gflop": mlp_flops / 1e9,
            "measured": f"fedvote rounds {mlp_job['rounds_s']:.2f} s of a {mlp_job['job_s']:.2f} s job, "
            f"Flower {mnist['flower']['job_s']:.2f} s",
            "measured_gflops": f"fedvote rounds {mlp_flops / mlp_job['rounds_s'] / 1e9:.0f}",
            "needed_s": flower_needed_s,
            "needed_gflops": mlp_flops / flower_needed_s / 1e9,
            "reference_gflops": rates["client_gflops"],
            "needed_share": mlp_flops / flower_needed_s / 1e9 / rates["client_gflops"],
        },
    ]
    # The job is more than its rounds (loading MNIST, building the federation, ε): at today's cost
    # of that rest, what the bar leaves the rounds.
    rest_s = mlp_job["job_s"] - mlp_job["rounds_s"]
    rounds_budget_s = flower_needed_s - rest_s
    rounds_line = (
        f"DP-FedAvg MNIST: the job's work outside its rounds takes {rest_s:.2f} s today, leaving the rounds "
        + (
            f"{rounds_budget_s:.2f} s: {mlp_flops / rounds_budget_s / 1e9:.0f} GFLOP/s, "
            f"{mlp_flops / rounds_budget_s / 1e9 / rates['client_gflops']:.1f}x the client product's rate"
            if rounds_budget_s > 0
            else "no time at all"
        )
    )
    summary = [
        f"fp32 matmul on {args.threads} threads: 4096² product {rates['square_gflops']:.0f} GFLOP/s; "
        f"DP-FedAvg's client product (5 × 32×784 @ 784×128, forward only) {rates['client_gflops']:.0f} GFLOP/s "
        f"(best of {args.repeats}; load average {load_before} before, {load_after} after); the same square "
        f"product in bfloat16 {rates['square_bf16_gflops']:.0f} GFLOP/s (lower precision: not the bars' job)",
        *(
            f"{row['bar']}: {row['gflop']:.0f} GFLOP of training; meeting it means finishing in "
            f"{row['needed_s']:.2f} s, {row['needed_gflops']:.0f} GFLOP/s sustained = "
            f"{100 * row['needed_share']:.0f}% of the reference product's rate ({row['measured']})"
            for row in rows
        ),
        rounds_line,
    ]
    notes = (
        "GFLOP: torch.utils.flop_counter.FlopCounterMode's count of one SGD step (forward, backward) of "
        "the model fedvote builds, times the examples the job trains on (CNN: agents × records × epochs; "
        "DP-FedAvg: mean sampled clients × 100 rounds × 20 local steps × batch 32); optimizer, clipping, "
        "noise, pooling and data movement are not counted, so the true work is larger. Needed: the "
        "loop's (or Flower's) measured time divided by the bar. Reference: the CNN bar against the "
        "large square product (no training step runs faster than it), the DP-FedAvg bar against the "
        "product of its own client step's shape. Times from teachers.json and "
        f"{args.peers}."
    )
    columns = [
        {"key": "bar", "label": "bar"},
        {"key": "gflop", "label": "GFLOP counted", "format": ".0f"},
        {"key": "measured", "label": "measured"},
        {"key": "measured_gflops", "label": "measured GFLOP/s"},
        {"key": "needed_s", "label": "needed s", "format": ".2f"},
        {"key": "needed_gflops", "label": "needed GFLOP/s", "format": ".0f"},
        {"key": "reference_gflops", "label": "reference product GFLOP/s", "format": ".0f"},
        {"key": "needed_share", "label": "needed / reference", "format": ".2f"},
    ]
    write_results(
        "compute_bound",
        title="What the ratio bars ask of the machine's arithmetic (issue 21, Bars 2 and 3)",
        rows=rows,
        columns=columns,
        notes=notes,
        summary=summary,
    )
    for line in summary:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
