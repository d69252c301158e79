"""Benchmark: DP-FedAvg's round at N = 100, 1,000 and 10,000 agents on MNIST (issue 46, item 4).

Each N runs in a fresh process: ``fedvote run --method dp-fedavg --dataset mnist --data-dir DIR
--agents N --sigma 1 --rounds R --noise-seed 0 --json`` (σ given, so nothing is calibrated; the
default distributed noise: every agent draws its d = 101,770 share each round). Records the
method's seconds per round, the total wall time and the process's peak resident memory
(``/usr/bin/time -v``), and ``uptime``'s load before and after. Not a test.

``--full`` instead runs the issue's whole commands at N = 10,000, as typed (with ``--json``):
``fedvote run --method dp-fedavg --dataset mnist --data-dir DIR --agents 10000 --epsilon 4`` and
the same with ``--method pate-fl`` (about 15–30 minutes each on 2 cores).

Run (repository root, no ``nice``): ``python benchmarks/bench_gradient_scale.py --data-dir ../shared/datasets [--full]``
Writes benchmarks/results/gradient_scale.json (``--full``: gradient_scale_full.json), with the
machine and the commit.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from benchmarks.common import fedvote_command, machine  # noqa: E402

RESULT = HERE / "results" / "gradient_scale.json"
FULL_RESULT = HERE / "results" / "gradient_scale_full.json"
FULL_METHODS = ("dp-fedavg", "pate-fl")


def load() -> str:
    """``uptime``'s load averages."""
    return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()


def commit() -> str:
    """The checkout's short commit, ``-dirty`` with uncommitted changes to tracked files."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=HERE,
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return head.stdout.strip() + ("-dirty" if dirty else "") if head.returncode == 0 else "unknown"


def timed(flags: list[str]) -> tuple[dict[str, object], float, float, float, str]:
    """``fedvote run FLAGS --json`` under ``/usr/bin/time -v``: (result, wall s, CPU s, peak RSS MB, load before)."""
    command = ["/usr/bin/time", "-v", *fedvote_command(), "run", *flags, "--json"]
    before = load()
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start

    def field(name: str) -> float:
        return float(re.search(rf"{re.escape(name)}: ([\d.]+)", done.stderr).group(1))  # type: ignore[union-attr]

    cpu = field("User time (seconds)") + field("System time (seconds)")
    return json.loads(done.stdout), wall, cpu, field("Maximum resident set size (kbytes)") / 1024, before


def one(agents: int, rounds: int, data_dir: str) -> dict[str, object]:
    """One run at N = ``agents``: seconds per round, total seconds, peak RSS in MB, accuracy."""
    result, wall, _, peak_mb, before = timed([
        "--method", "dp-fedavg", "--dataset", "mnist", "--data-dir", data_dir, "--agents", str(agents),
        "--sigma", "1", "--rounds", str(rounds), "--noise-seed", "0",
    ])  # fmt: skip
    return {
        "agents": agents,
        "rounds": rounds,
        "method_seconds_per_round": result["timings"]["method_s"] / rounds,  # type: ignore[index]
        "total_seconds": wall,
        "peak_rss_mb": peak_mb,
        "accuracy": result["accuracy"],
        "model_floats": result["model_floats"],
        "load_before": before,
        "load_after": load(),
        "commit": commit(),
    }


def full(method: str, data_dir: str) -> dict[str, object]:
    """The issue's command for ``method`` at N = 10,000, as typed: wall, CPU, peak RSS, accuracy, ε."""
    flags = ["--method", method, "--dataset", "mnist", "--data-dir", data_dir, "--agents", "10000", "--epsilon", "4"]  # fmt: skip
    result, wall, cpu, peak_mb, before = timed(flags)
    privacy = result["privacy"]
    return {
        "command": "fedvote run " + " ".join(flags),
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "peak_rss_mb": peak_mb,
        "accuracy": result["accuracy"],
        "agent_epsilon": privacy["agent"]["epsilon"],  # type: ignore[index]
        "timings": result.get("timings"),  # type: ignore[union-attr]
        "load_before": before,
        "load_after": load(),
        "commit": commit(),
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--agents", default="100,1000,10000")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--full", action="store_true", help="the whole N = 10,000 commands instead")
    parser.add_argument("--methods", default=",".join(FULL_METHODS), help="with --full (default: both)")
    args = parser.parse_args(argv)
    out = FULL_RESULT if args.full else RESULT
    out.parent.mkdir(exist_ok=True)
    if args.full:  # one method a run (each takes minutes): the saved rows of the others are kept
        rows = json.loads(out.read_text())["rows"] if out.exists() else []
        for method in (m for m in args.methods.split(",") if m):
            row = full(method, args.data_dir)
            print(json.dumps(row), file=sys.stderr)
            rows = [r for r in rows if r["command"] != row["command"]] + [row]
            out.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2) + "\n")
        return
    rows = [one(int(n), args.rounds, args.data_dir) for n in args.agents.split(",")]
    for row in rows:
        print(json.dumps(row), file=sys.stderr)
    out.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
