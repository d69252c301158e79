"""Benchmark: ``fedvote run`` on a busy host costs at most its fair share (issue 47, item 8).

Times the installed ``fedvote run --noise-seed 0 --json`` (digits, the defaults), each in a
fresh process, alone and then beside ``--burners`` CPU-bound processes (``python -c "while
True: pass"``): the median of ``--repeats`` runs of each, and their ratio. The command line
sets ``OMP_WAIT_POLICY=PASSIVE`` and takes only the idle CPUs (fedvote.models.threads); the
runs here inherit no ``OMP_*`` variable, so that policy is what is measured. Before the
policy, at load 5.5 on 2 cores, this command took 93 s and 21 s against 5.3 s with one
thread. The bar: beside two busy processes on 2 cores, at most 2.5x the time alone. The
accuracy of every run is recorded too: it must not depend on the load. Writes
benchmarks/results/busy_host.json.

Run: ``python benchmarks/bench_busy_host.py`` (``make bench``) on an otherwise quiet machine.
"""

from __future__ import annotations

import argparse
import json
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

BAR_RATIO = 2.5  # beside two CPU-bound processes, at most 2.5x the time alone
BURNER = "while True: pass"
# A moment for the burners to be scheduled before the first loaded run reads the load.
SETTLE_S = 2.0


def _env() -> dict[str, str]:
    """This environment without OpenMP variables: the command line's own policy decides."""
    return {key: value for key, value in os.environ.items() if not key.startswith("OMP_")}


def one_run(argv: list[str]) -> tuple[float, float]:
    """Seconds and student accuracy of one ``fedvote run`` in a fresh process."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=_env())
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr}")
    return seconds, float(json.loads(done.stdout)["accuracy"])


def measure(argv: list[str], repeats: int, case: str, burners: int) -> dict[str, Any]:
    """``repeats`` runs of ``argv``; the case's row (median, fastest, slowest, accuracies)."""
    load_before = os.getloadavg()[0]
    runs = [one_run(argv) for _ in range(repeats)]
    seconds = [s for s, _ in runs]
    return {
        "case": case,
        "burners": burners,
        "median_s": statistics.median(seconds),
        "fastest_s": min(seconds),
        "slowest_s": max(seconds),
        "repeats": repeats,
        "accuracy": sorted({round(a, 4) for _, a in runs}),
        "load_before": load_before,
    }


def bench(repeats: int, burners: int) -> list[dict[str, Any]]:
    argv = [*fedvote_command(), "run", "--noise-seed", "0", "--json"]
    rows = [measure(argv, repeats, "alone", 0)]
    spinning = [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(burners)]
    try:
        time.sleep(SETTLE_S)
        rows.append(measure(argv, repeats, f"beside {burners} CPU-bound processes", burners))
    finally:
        for process in spinning:
            process.kill()
        for process in spinning:
            process.wait()
    rows[1]["ratio"] = rows[1]["median_s"] / rows[0]["median_s"]
    return rows


COLUMNS = [
    {"key": "case", "label": "case"},
    {"key": "median_s", "label": "median s", "format": ".2f"},
    {"key": "fastest_s", "label": "fastest s", "format": ".2f"},
    {"key": "slowest_s", "label": "slowest s", "format": ".2f"},
    {"key": "repeats", "label": "runs"},
    {"key": "ratio", "label": "ratio", "format": ".2f"},
    {"key": "load_before", "label": "load before", "format": ".2f"},
]


def bar_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The ratio against the bar, and whether the accuracy moved with the load."""
    ratio = rows[1]["ratio"]
    verdict = "meets" if ratio <= BAR_RATIO else "MISSES"
    same = rows[0]["accuracy"] == rows[1]["accuracy"]
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [
        f"{rows[1]['case']}: {ratio:.2f}x the time alone on {cpus} CPUs ({verdict} the bar: <= {BAR_RATIO:g}x)",
        f"accuracy alone {rows[0]['accuracy']}, loaded {rows[1]['accuracy']}"
        + (" (the same)" if same else " (DIFFERS: the load changed the result)"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="Runs of each case (default 3).")
    parser.add_argument("--burners", type=int, default=2, help="CPU-bound processes beside (default 2).")
    args = parser.parse_args()
    rows = bench(args.repeats, args.burners)
    print_table(rows, COLUMNS)
    summary = bar_lines(rows)
    print()
    for line in summary:
        print(line)
    out = write_results(
        "busy_host",
        title="A busy host: fedvote run alone and beside CPU-bound processes",
        rows=rows,
        columns=COLUMNS,
        notes=(
            "Wall time of the installed `fedvote run --noise-seed 0 --json` (digits, defaults) in a "
            "fresh process without OMP_* variables, so that the command line's policy applies "
            "(OMP_WAIT_POLICY=PASSIVE; torch threads = the CPUs other processes leave idle, from "
            "/proc/loadavg's runnable tasks). Loaded: beside `python -c 'while True: pass'` "
            "processes started 2 s before. The bar (issue 47): at most 2.5x alone beside two on "
            "2 cores. Before the policy, at load 5.5 on 2 cores, the same command took 93 s and "
            "21 s against 5.3 s with OMP_NUM_THREADS=1."
        ),
        summary=summary,
    )
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
