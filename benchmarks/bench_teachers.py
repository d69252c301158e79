"""Teacher training: batched ensemble vs per-agent loop vs one centralised model (the limit).

Runs ``python -m benchmarks.ensemble`` (see there for what each variant is) for every case,
each in a fresh process so that its peak memory is its own: N in {10, 100, 800} agents x 600
records, the digits-sized MLP, the MNIST-sized MLP and the small CNN (the zoo's ``cnn`` on
1x28x28, the teachers of the MNIST PATE-FL experiments), E epochs, batch 32, on synthetic
data and on MNIST where present (N x 600 <= 60000). Prints a table and writes
``benchmarks/results/teachers.json`` with the machine, the command, the 1-minute load
average around each case (the machine may be shared) and the lines of the issues' bars.
``--merge`` keeps the rows of the existing results file that this run does not re-measure.

Run: ``python benchmarks/bench_teachers.py`` (``make bench``); ``--help`` for options, e.g.
``--models cnn --agents 100 --merge`` for the CNN row alone, ``--device cuda`` for the
batched ensemble on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import RESULTS_DIR, ROOT, command_line, print_table, write_results
from benchmarks.ensemble import COLUMNS, MODELS

LOAD_COLUMN = {"key": "load", "label": "load avg"}

NOTES = (
    "loop: fit_classifier per agent on the CPU, extrapolated linearly from loop_agents_timed agents "
    "where loop_extrapolated; limit: one model on the union with batch N x 32 on the CPU; batched: "
    "fit_ensemble on `device`. Each variant is the fastest of `repeats` interleaved runs; load avg: the "
    "machine's 1-minute load average before and after the case (2 cores). Peak MB: the "
    "process's resident set during the batched run (it includes the N agents' data, which the "
    "benchmark holds throughout); +MB: above what the process held just before that variant."
)


def run_case(args: argparse.Namespace, **case: Any) -> dict[str, Any] | None:
    """One case in a fresh ``python -m benchmarks.ensemble`` process; None if skipped."""
    command = [sys.executable, "-m", "benchmarks.ensemble", "--json"]
    for key, value in case.items():
        command += [f"--{key.replace('_', '-')}", str(value)]
    if args.device:
        command += ["--device", args.device]
    if args.threads:
        command += ["--threads", str(args.threads)]
    load_before = os.getloadavg()[0]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "skipped" in result:
        print(f"  skipped: {result['skipped']}")
        return None
    # the machine's 1-minute load average before and after the case (2 cores: above ~0.5, shared)
    result["load"] = f"{load_before:.2f}-{os.getloadavg()[0]:.2f}"
    return dict(result)


def bar_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The lines of issue 7's bar (the synthetic rows) and of issue 21's (the CNN)."""

    def find(model: str, agents: int, data: str = "synthetic") -> dict[str, Any] | None:
        for row in rows:
            if row["data"] == data and row["model"] == model and row["agents"] == agents:
                return row
        return None

    lines = []
    small = find("mlp-small", 100)
    if small and "speedup_vs_loop" in small:
        verdict = "meets" if small["speedup_vs_loop"] >= 20 else "MISSES"
        lines.append(
            f"mlp-small (64 -> 32 -> 10), N = 100 x 600, E = {small['epochs']}, batch 32: batched "
            f"{small['batched_s']:.3f} s, loop {small['loop_s']:.3f} s, limit {small['limit_s']:.3f} s: "
            f"batched is {small['speedup_vs_loop']:.1f}x faster than the loop ({verdict} the bar: >= 20x)"
        )
    mnist = find("mlp-mnist", 100)
    if mnist and "speedup_vs_loop" in mnist and "batched_over_limit" in mnist:
        verdict = "meets" if mnist["speedup_vs_loop"] >= 1.5 and mnist["batched_over_limit"] <= 4 else "MISSES"
        lines.append(
            f"mlp-mnist (784 -> 128 -> 10), N = 100 x 600, E = {mnist['epochs']}, batch 32: batched "
            f"{mnist['batched_s']:.3f} s, loop {mnist['loop_s']:.3f} s, limit {mnist['limit_s']:.3f} s: "
            f"{mnist['speedup_vs_loop']:.2f}x faster than the loop, {mnist['batched_over_limit']:.2f}x the "
            f"limit ({verdict} the bar: >= 1.5x and <= 4x)"
        )
    big = find("mlp-mnist", 800)
    if big and "batched_peak_mb" in big:
        verdict = "meets" if big["batched_peak_mb"] <= 4096 else "MISSES"
        lines.append(
            f"mlp-mnist, N = 800 x 600: batched training peak RSS {big['batched_peak_mb']:.0f} MB for the "
            f"whole process ({big['batched_extra_mb']:.0f} MB above the 800 agents' data already held), "
            f"{big['batched_s']:.1f} s ({verdict} the bar: <= 4096 MB)"
        )
    for data in ("synthetic", "mnist"):
        cnn = find("cnn", 100, data)
        if cnn is None or "speedup_vs_loop" not in cnn:
            continue
        if cnn["threads"] == 2 and cnn["device"] == "cpu":
            verdict = "meets" if cnn["speedup_vs_loop"] >= 1.5 else "MISSES"
        else:
            verdict = f"not the bar's setting ({cnn['threads']} threads on {cnn['device']}), so no verdict on"
        limit = f", limit {cnn['limit_s']:.2f} s" if "limit_s" in cnn else ""
        lines.append(
            f"cnn (conv 16, conv 32, 2x2 pooling, on 1x28x28), {data}, N = 100 x 600, E = {cnn['epochs']}, "
            f"batch {cnn['batch_size']}, {cnn['threads']} threads, {cnn['device']}: batched {cnn['batched_s']:.2f} s, "
            f"loop {cnn['loop_s']:.2f} s{limit}: batched is {cnn['speedup_vs_loop']:.2f}x faster than the loop "
            f"({verdict} the bar of issue 21: >= 1.5x with 2 threads on 2 CPU cores); "
            f"1-minute load average {cnn.get('load', '?')}"
        )
    return lines


def merge_rows(previous: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``previous``'s rows for the cases (data, model, N) not in ``rows``, then ``rows``."""
    measured = {(r["data"], r["model"], r["agents"]) for r in rows}
    kept = [r for r in previous.get("results", []) if (r["data"], r["model"], r["agents"]) not in measured]
    return kept + rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", default="10,100,800", help="comma-separated N values")
    parser.add_argument("--records", type=int, default=600, help="records per agent")
    parser.add_argument("--models", default="mlp-small,mlp-mnist,cnn", help=f"from {', '.join(MODELS)}")
    parser.add_argument("--epochs", type=int, default=5, help="epochs for the MLPs")
    parser.add_argument("--cnn-epochs", type=int, default=5, help="epochs for the CNN (issue 21's bar: 5)")
    parser.add_argument("--cnn-max-agents", type=int, default=100, help="largest N for the CNN (800 CNNs take tens of minutes on 2 CPU cores)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--loop-max-agents", type=int, default=100, help="agents timed in the loop (then extrapolated)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats for N <= 100 (best kept)")
    parser.add_argument("--device", default=None, help="device of the batched ensemble, e.g. cpu or cuda (default: cuda if available)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in every case (default 1: the fastest setting for the loop of tiny models, and the same for all three variants)")
    parser.add_argument("--no-mnist", action="store_true", help="skip MNIST even if present")
    parser.add_argument("--out", type=Path, default=None, help="results file (default benchmarks/results/teachers.json)")
    parser.add_argument("--merge", action="store_true", help="keep the results file's rows for the cases this run does not measure")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    agent_counts = [int(a) for a in args.agents.split(",")]
    model_names = args.models.split(",")
    for name in model_names:
        if name not in MODELS:
            raise SystemExit(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    rows: list[dict[str, Any]] = []
    for model in model_names:
        epochs = args.cnn_epochs if model == "cnn" else args.epochs
        for agents in agent_counts:
            if model == "cnn" and agents > args.cnn_max_agents:
                continue
            datasets = ["synthetic"]
            if not args.no_mnist and MODELS[model].example_shape == (1, 28, 28) and agents * args.records <= 60000:
                datasets.append("mnist")
            for data in datasets:
                print(f"{data} {model} N={agents} ...", flush=True)
                row = run_case(
                    args,
                    model=model,
                    agents=agents,
                    records=args.records,
                    epochs=epochs,
                    batch_size=args.batch_size,
                    data=data,
                    repeats=args.repeats if agents <= 100 else 1,
                    loop_max_agents=args.loop_max_agents,
                )
                if row is None:
                    if data == "mnist":
                        print("  (MNIST rows need $FEDVOTE_DATA or ../shared/datasets/mnist)")
                    continue
                rows.append(row)
    out_path = args.out or RESULTS_DIR / "teachers.json"
    command = None
    if args.merge and out_path.exists():
        previous = json.loads(out_path.read_text())
        rows = merge_rows(previous, rows)
        command = f"{previous.get('command')}; the {args.models} rows re-measured by: {command_line()}"
    print()
    columns = [c for c in [*COLUMNS, LOAD_COLUMN] if any(c["key"] in row for row in rows)]
    print_table(rows, columns)
    summary = bar_lines(rows)
    print()
    for line in summary:
        print(line)
    out = write_results(
        "teachers",
        title="Teacher training: batched ensemble vs per-agent loop vs one centralised model",
        rows=rows,
        columns=columns,
        notes=NOTES,
        summary=summary,
        command=command,
        path=args.out,
    )
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
