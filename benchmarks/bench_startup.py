"""Benchmark: how fast ``fedvote`` answers ``--help`` and a one-line error (issue 21, item 5).

Times the installed ``fedvote`` command, each in a fresh process, for ``--help`` and two
refusals that need only the flags (``run --agents 0``, ``run --dataset nope``): the median
and the fastest of ``--repeats`` runs, interleaved so that a burst of load hits every case
alike. Also records ``python -X importtime -c "import fedvote.cli"``'s cumulative time of
``fedvote.cli`` (median over the repeats), which load disturbs less than wall time, and
the load average, since the bar is stated for a quiet machine. Writes
benchmarks/results/startup.json.

Run: ``python benchmarks/bench_startup.py`` (``make bench``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import fedvote_command, print_table, write_results

BAR_S = 1.0  # the bar: fedvote --help in under 1 s (median of 5, quiet machine)
CASES = [
    ("--help", ["--help"], 0),
    ("run --agents 0", ["run", "--agents", "0"], 2),
    ("run --dataset nope", ["run", "--dataset", "nope"], 2),
]


def wall_time(argv: list[str], expected_status: int) -> float:
    """Seconds one ``fedvote ARGV`` takes, start to exit, in a fresh process."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    seconds = time.perf_counter() - start
    if done.returncode != expected_status:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}, expected {expected_status}: {done.stderr}")
    return seconds


def import_time_us() -> int:
    """``fedvote.cli``'s cumulative import time in microseconds (``python -X importtime``)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import fedvote.cli"], capture_output=True, text=True, check=True
    )
    for line in done.stderr.splitlines():
        fields = [part.strip() for part in line.removeprefix("import time:").split("|")]
        if len(fields) == 3 and fields[2] == "fedvote.cli":
            return int(fields[1])
    raise SystemExit(f"no fedvote.cli line in -X importtime's output:\n{done.stderr}")


def bench(repeats: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    command = fedvote_command()
    times: dict[str, list[float]] = {name: [] for name, _, _ in CASES}
    imports: list[int] = []
    load_before = os.getloadavg()[0]
    for _ in range(repeats):  # interleaved: one of each per round
        for name, args, status in CASES:
            times[name].append(wall_time([*command, *args], status))
        imports.append(import_time_us())
    load_after = os.getloadavg()[0]
    rows = [
        {
            "command": f"fedvote {name}",
            "median_s": statistics.median(seconds),
            "fastest_s": min(seconds),
            "slowest_s": max(seconds),
            "repeats": len(seconds),
        }
        for name, seconds in times.items()
    ]
    context = {
        "import_us": int(statistics.median(imports)),
        "load_before": load_before,
        "load_after": load_after,
    }
    return rows, context


COLUMNS = [
    {"key": "command", "label": "command"},
    {"key": "median_s", "label": "median s", "format": ".3f"},
    {"key": "fastest_s", "label": "fastest s", "format": ".3f"},
    {"key": "slowest_s", "label": "slowest s", "format": ".3f"},
    {"key": "repeats", "label": "runs"},
]


def bar_lines(rows: list[dict[str, Any]], context: dict[str, Any]) -> list[str]:
    """The bar, for --help and for each one-line error alike: a median under 1 s."""
    load = f"load average {context['load_before']:.2f} before, {context['load_after']:.2f} after"
    lines = []
    for row in rows:
        verdict = "meets" if row["median_s"] < BAR_S else "MISSES"
        lines.append(
            f"{row['command']}: median {row['median_s']:.3f} s of {row['repeats']} "
            f"({verdict} the bar: < {BAR_S:g} s; {load})"
        )
    lines.append(f"import fedvote.cli: {context['import_us'] / 1e6:.3f} s cumulative (python -X importtime, median)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="Runs of each command (default 5).")
    args = parser.parse_args()
    rows, context = bench(args.repeats)
    print_table(rows, COLUMNS)
    summary = bar_lines(rows, context)
    print()
    for line in summary:
        print(line)
    out = write_results(
        "startup",
        title="Start-up: fedvote --help and one-line errors",
        rows=rows,
        columns=COLUMNS,
        notes=(
            "Wall time of the installed fedvote command in a fresh process, start to exit, "
            "interleaved repeats; the bar (issue 21) is stated for a quiet machine, so the load "
            "average is given beside it. import fedvote.cli: the cumulative microseconds "
            "python -X importtime reports, less sensitive to load than wall time. Bytecode: "
            "`make install` caches the compiled modules a run imports (pip runs with --no-compile, "
            "and where PYTHONDONTWRITEBYTECODE is set nothing else would cache them: every "
            "process then compiles what it imports, and --help took 0.33 s instead of 0.12 s)."
        ),
        summary=summary,
    )
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
