"""Benchmark: DP-FedAvg's round at N = 100, 1,000 and 10,000 agents on MNIST (issue 46, item 4).

Each N runs in a fresh process: ``fedvote run --method dp-fedavg --dataset mnist --data-dir DIR
--agents N --sigma 1 --rounds R --noise-seed 0 --json`` (σ given, so nothing is calibrated; the
default distributed noise: every agent draws its d = 101,770 share each round). Records the
method's seconds per round, the total wall time and the process's peak resident memory
(``/usr/bin/time -v``), and ``uptime``'s load before and after. Not a test.

Run (repository root, no ``nice``): ``python benchmarks/bench_gradient_scale.py --data-dir ../shared/datasets``
Writes benchmarks/results/gradient_scale.json.
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
RESULT = HERE / "results" / "gradient_scale.json"


def load() -> str:
    """``uptime``'s load averages."""
    return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()


def one(agents: int, rounds: int, data_dir: str) -> dict[str, object]:
    """One run at N = ``agents``: seconds per round, total seconds, peak RSS in MB, accuracy."""
    command = [
        "/usr/bin/time", "-v", str(Path(sys.executable).parent / "fedvote"), "run", "--method", "dp-fedavg",
        "--dataset", "mnist", "--data-dir", data_dir, "--agents", str(agents), "--sigma", "1",
        "--rounds", str(rounds), "--noise-seed", "0", "--json",
    ]
    before = load()
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    result = json.loads(done.stdout)
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))  # type: ignore[union-attr]
    return {
        "agents": agents,
        "rounds": rounds,
        "method_seconds_per_round": result["timings"]["method_s"] / rounds,
        "total_seconds": wall,
        "peak_rss_mb": peak_kb / 1024,
        "accuracy": result["accuracy"],
        "model_floats": result["model_floats"],
        "load_before": before,
        "load_after": load(),
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--agents", default="100,1000,10000")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    rows = [one(int(n), args.rounds, args.data_dir) for n in args.agents.split(",")]
    for row in rows:
        print(json.dumps(row), file=sys.stderr)
    RESULT.parent.mkdir(exist_ok=True)
    RESULT.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
