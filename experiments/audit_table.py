"""Audit every method that claims an ε, at each level it protects, and write the table in docs/privacy.md.

Usage (from the repository root; about a quarter of an hour on 2 shared cores):

    .venv/bin/python experiments/audit_table.py            # run every row, save, render
    .venv/bin/python experiments/audit_table.py --render   # rewrite the section from the saved rows

Each row is one ``fedvote audit`` (its command is in the table) on digits with the method's
defaults, σ calibrated to --epsilon 4 (δ = 1e-3) as ``fedvote run`` would. Results go to
``experiments/results/audit.json``; the section between the audit-table markers of
docs/privacy.md is rebuilt from it. A lower bound above its claimed ε is a privacy bug: the
script then writes nothing to the docs, names the rows, and exits 1.
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path

from fedvote.audit import audit_config
from fedvote.methods.registry import METHOD_NAMES
from fedvote.progress import NO_PROGRESS
from fedvote.runner import build_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import machine  # noqa: E402  (the experiments' shared machine line)

HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "audit.json"
DOC = HERE.parent / "docs" / "privacy.md"
START, END = "<!-- audit-table:start -->", "<!-- audit-table:end -->"

NOISE_SEED = 1
MULTI_TRIALS = 20_000  # releases on each neighbour
ONE_RUN_CANARIES = 200  # one run: 2·m·δ = 0.4 at δ = 1e-3 (Steinke et al.'s δ term grows with m)

# (method, level, trials): every method of `fedvote run --help` with a finite ε at that level.
ROWS: tuple[tuple[str, str, int], ...] = (
    ("pate-fl", "agent", MULTI_TRIALS),
    ("pate-fl", "instance", MULTI_TRIALS),
    ("private-knn-fl", "agent", MULTI_TRIALS),
    ("private-knn-fl", "instance", MULTI_TRIALS),
    ("weighted-pate", "agent", MULTI_TRIALS),
    ("weighted-pate", "instance", MULTI_TRIALS),
    ("fedaux-fdp", "agent", MULTI_TRIALS),
    ("fedaux-fdp", "instance", MULTI_TRIALS),
    ("fedd-p", "agent", MULTI_TRIALS),
    ("fedd-p", "instance", MULTI_TRIALS),
    ("fedavg-p", "agent", MULTI_TRIALS),
    ("fedavg-p", "instance", MULTI_TRIALS),
    ("dp-fedavg", "agent", ONE_RUN_CANARIES),
    ("dp-fedavg", "instance", ONE_RUN_CANARIES),
    ("dp-fedsgd", "instance", ONE_RUN_CANARIES),
    ("prifedsync", "instance", ONE_RUN_CANARIES),
)

# Methods of `fedvote run --help` that claim no finite ε at any level: nothing to audit.
NOT_PRIVATE = {
    "fedavg": "not private (no noise)",
    "majority-vote": "not private (noiseless votes)",
    "fedaux-f": "not private (FedAUX+F's SGD heads carry no noise: ε = ∞)",
}
# The FedAUX family takes its budget per head (--epsilon-scores/--epsilon-classes; their
# defaults: ε 4 in all); every other method is calibrated to --epsilon 4.
PER_HEAD_BUDGET = frozenset({"fedaux-fdp", "fedd-p", "fedavg-p"})

# Levels a private method does not protect (ε = ∞ by its accounting).
UNPROTECTED = {
    "dp-fedsgd": "agent",
    "prifedsync": "agent",
}


def settings(method: str) -> dict[str, object]:
    """The run settings of ``method``'s row: --epsilon 4 unless it budgets per head."""
    return (
        {"noise_seed": NOISE_SEED}
        if method in PER_HEAD_BUDGET
        else {"epsilon": 4.0, "noise_seed": NOISE_SEED}
    )


def command(method: str, level: str, trials: int) -> str:
    """The command line that reproduces one row."""
    budget = "" if method in PER_HEAD_BUDGET else " --epsilon 4"
    return f"fedvote audit --method {method} --level {level} --trials {trials}{budget} --noise-seed {NOISE_SEED} --json"


def run_rows() -> dict:
    """Every row's audit, as a JSON-ready record."""
    covered = {method for method, _, _ in ROWS} | set(NOT_PRIVATE)
    missing = set(METHOD_NAMES) - covered
    if missing:
        raise SystemExit(f"audit_table: methods with no row and no reason: {', '.join(sorted(missing))}")
    rows = []
    started = time.perf_counter()
    for method, level, trials in ROWS:
        config = build_config(method=method, **settings(method))
        result = audit_config(config, level, trials, progress=NO_PROGRESS)
        row = {**result.to_dict(), "command": command(method, level, trials)}
        rows.append(row)
        print(
            f"{method:>15} {level:>8}: claimed {result.claimed_epsilon:8.3f}  lower bound "
            f"{result.epsilon_lower_bound:6.3f}  ({result.seconds:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    return {
        "machine": machine(),
        "date": datetime.date.today().isoformat(),
        "total_seconds": time.perf_counter() - started,
        "rows": rows,
    }


def section(record: dict) -> str:
    """The markdown table and its notes."""
    lines = [
        START,
        f"Made by `experiments/audit_table.py` ({record['date']}, {record['total_seconds'] / 60:.1f} min on "
        f"{record['machine']}); digits, each method's defaults, σ calibrated to ε 4 at the method's own "
        "level as `fedvote run` does (the FedAUX family: its default per-head budgets), δ = 1e-3, 95 % "
        "confidence.",
        "",
        "| method | level | claimed ε | lower bound | mode | trials | canary | test | command |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in record["rows"]:
        mode = "one run" if row["mode"] == "one-run" else "multi-trial"
        unit = "canaries" if row["mode"] == "one-run" else "per neighbour"
        test = (
            "per-canary subsampled-Gaussian LR, Steinke et al. Thm 5.2"
            if row["mode"] == "one-run"
            else (f"LR projection, threshold from 30 %, CP on 70 % ({row['details']['direction']})")
        )
        lines.append(
            f"| {row['method']} | {row['level']} | {row['claimed_epsilon']:.3f} | "
            f"{row['epsilon_lower_bound']:.3f} | {mode} | {row['trials']:,} {unit} | {row['canary']} | "
            f"{test} | `{row['command']}` |"
        )
    lines.append("")
    lines.append(
        "Not audited: "
        + "; ".join(f"{name}: {why}" for name, why in NOT_PRIVATE.items())
        + "; "
        + "; ".join(
            f"{name} at the {level} level (ε = ∞ by its accounting)" for name, level in UNPROTECTED.items()
        )
        + "."
    )
    lines.append(END)
    return "\n".join(lines)


def render(record: dict) -> None:
    """Replace the section between the markers of docs/privacy.md (refuses to publish a violation)."""
    violations = [row for row in record["rows"] if row["epsilon_lower_bound"] > row["claimed_epsilon"]]
    if violations:
        for row in violations:
            print(
                f"audit_table: PRIVACY BUG {row['method']} {row['level']}: lower bound "
                f"{row['epsilon_lower_bound']:.3f} > claimed {row['claimed_epsilon']:.3f}",
                file=sys.stderr,
            )
        raise SystemExit(1)
    text = DOC.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"audit_table: {DOC} has no {START} ... {END} markers")
    before, rest = text.split(START, 1)
    after = rest.split(END, 1)[1]
    DOC.write_text(before + section(record) + after)


def main(argv: list[str]) -> None:
    if "--render" in argv:
        record = json.loads(RESULT.read_text())
    else:
        record = run_rows()
        RESULT.parent.mkdir(exist_ok=True)
        RESULT.write_text(json.dumps(record, indent=2) + "\n")
    render(record)


if __name__ == "__main__":
    main(sys.argv[1:])
