"""The voting paper's MNIST non-IID comparison and its privacy–accuracy curve (Figure 2), on the defaults.

Usage (from the repository root):

    FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/voting_mnist_curve.py
    .venv/bin/python experiments/voting_mnist_curve.py --render   # from the saved result
    FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/voting_mnist_curve.py --methods dp-fedavg
        # that method's points again, the others kept from the saved result (each with its run)

Runs one ``fedvote sweep`` (the command below, printed in docs/results.md): 100 agents
× 600 MNIST records, 6 classes each, 30 % of MNIST's test set public, PATE-FL and
DP-FedAvg calibrated to agent-level ε ∈ {1, 2, 4, 8} at δ = 1e-3, FedAvg as the
non-private reference, seeds 0, 1, 2 — every other setting is the default a user gets.
The sweep keeps each finished point in its output directory, so an interrupted run
resumes (``--resume``). Writes ``experiments/results/voting_mnist_curve.json``, the plot
``docs/voting_mnist_curve.png`` and the section of docs/results.md.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import RESULTS, machine, save_results  # noqa: E402

HERE = Path(__file__).resolve().parent
PLOT = HERE.parent / "docs" / "voting_mnist_curve.png"
SWEEP_DIR = RESULTS / "voting_mnist_curve_sweep"
EPSILONS = (1, 2, 4, 8)
SEEDS = (0, 1, 2)
METHODS = ("pate-fl", "dp-fedavg", "fedavg")
SWEEP_ARGS = [
    "sweep", "--method", ",".join(METHODS), "--dataset", "mnist", "--agents", "100",
    "--partition", "classes", "--classes-per-agent", "6", "--delta", "1e-3",
    "--grid", "epsilon=" + ",".join(str(e) for e in EPSILONS),
    "--seeds", ",".join(str(s) for s in SEEDS), "--noise-seed", "0",
]  # fmt: skip
COMMAND = "fedvote " + " ".join(f'"{a}"' if "=" in a else a for a in SWEEP_ARGS) + " --out DIR"


def run_sweep(methods: tuple[str, ...] = METHODS, out: Path = SWEEP_DIR) -> dict:
    """Run (or resume) the sweep of ``methods`` into ``out``; its sweep.json."""
    fedvote = Path(sys.executable).parent / "fedvote"
    args = [str(fedvote), *SWEEP_ARGS, "--out", str(out)]
    args[args.index("--method") + 1] = ",".join(methods)
    if (out / "points").is_dir():
        args.append("--resume")
    subprocess.run(args, check=True)
    return json.loads((out / "sweep.json").read_text())


def summarise(sweep: dict, methods: tuple[str, ...] = METHODS) -> dict:
    """Mean ± std over seeds of accuracy, and the largest ε, per method and ε."""
    cells: dict[str, dict[str, dict]] = {}
    for method in methods:
        rows = [r for r in sweep["rows"] if r["method"] == method]
        keys = ["reference"] if rows and rows[0]["reference"] else [str(e) for e in EPSILONS]
        for key in keys:
            chosen = [r for r in rows if key == "reference" or float(r["point"]["epsilon"]) == float(key)]
            accuracy = [r["accuracy"] for r in chosen]
            agent = [r["epsilon_agent"] for r in chosen]
            cells.setdefault(method, {})[key] = {
                "accuracy": accuracy,
                "mean": statistics.mean(accuracy),
                "std": statistics.stdev(accuracy) if len(accuracy) > 1 else 0.0,
                "epsilon_agent": None if any(a is None for a in agent) else max(agent),
                "seconds": statistics.mean(r["time_s"] for r in chosen),
            }
    return cells


def plot(cells: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(5.5, 3.6))
    for method, marker in (("pate-fl", "o"), ("dp-fedavg", "s")):
        means = [cells[method][str(e)]["mean"] for e in EPSILONS]
        stds = [cells[method][str(e)]["std"] for e in EPSILONS]
        axes.errorbar(EPSILONS, means, yerr=stds, marker=marker, capsize=3, label=method)
    reference = cells["fedavg"]["reference"]["mean"]
    axes.axhline(reference, linestyle="--", color="grey", label="fedavg (not private)")
    axes.set_xscale("log", base=2)
    axes.set_xticks(EPSILONS, [str(e) for e in EPSILONS])
    axes.set_xlabel("agent-level ε (δ = 1e-3)")
    axes.set_ylabel("test accuracy (mean ± std, 3 seeds)")
    axes.set_title("MNIST non-IID, 100 agents, defaults")
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(PLOT, dpi=110)
    plt.close(figure)


def section(record: dict) -> str:
    cells = record["cells"]
    header = (
        "| agent ε | " + " | ".join(METHODS[:2])
        + " | PATE-FL above DP-FedAvg | pate-fl by seed | dp-fedavg by seed |"
    )
    lines = [
        "## The voting paper's MNIST non-IID comparison and its Figure 2, on the defaults",
        "",
        f"Ran {record['date']} on {record['machine']}; {record['seconds'] / 60:.0f} minutes in all.",
        "",
        f"Command: `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/voting_mnist_curve.py`, "
        f"which runs `{COMMAND}`. 100 agents × 600 MNIST records, 6 classes each, 3,000 of MNIST's "
        "test images public and 7,000 for testing; every other setting is `fedvote run`'s default. "
        "Accuracy is the mean ± std over seeds 0, 1, 2 (each deals its own federation); ε is the "
        "largest over the seeds.",
        "",
        header,
        "| --- | --- | --- | --- | --- | --- |",
    ]
    above = True
    for epsilon in EPSILONS:
        pate, dp = cells["pate-fl"][str(epsilon)], cells["dp-fedavg"][str(epsilon)]
        wins = pate["mean"] > dp["mean"]
        above &= wins
        lines.append(
            f"| {epsilon} | {pate['mean']:.3f} ± {pate['std']:.3f} (ε {pate['epsilon_agent']:.2f}) | "
            f"{dp['mean']:.3f} ± {dp['std']:.3f} (ε {dp['epsilon_agent']:.2f}) | {'yes' if wins else '**no**'} | "
            f"{', '.join(f'{a:.3f}' for a in pate['accuracy'])} | {', '.join(f'{a:.3f}' for a in dp['accuracy'])} |"
        )
    fedavg = cells["fedavg"]["reference"]
    lines += [
        "",
        f"FedAvg (not private): {fedavg['mean']:.3f} ± {fedavg['std']:.3f}. The paper (Table 1, last row; "
        "Figure 2): PATE-FL 0.951 at ε 4.3, above DP-FedAvg at every ε; non-private FedAvg 0.978. "
        f"PATE-FL above DP-FedAvg at every ε here: **{'yes' if above else 'no'}**. A seed whose student "
        "falls far below the others (FixMatch amplifying wrong labels at small ε) shows in the by-seed "
        "columns; the mean keeps it.",
        "",
        "![PATE-FL and DP-FedAvg against agent-level ε](voting_mnist_curve.png)",
    ]
    for rerun in record.get("reruns", []):
        lines += [
            "",
            f"Rerun since, {', '.join(rerun['methods'])} alone (`--methods`; the other rows from the run "
            f"above): {rerun['date']} on {rerun['machine']}; {rerun['seconds'] / 60:.0f} minutes.",
        ]
    return "\n".join(lines)


def rerun_methods(methods: tuple[str, ...]) -> None:
    """Sweep ``methods`` again (fresh points) and replace their cells in the saved result."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        sys.exit(f"experiments/voting_mnist_curve.py: --methods: unknown {', '.join(unknown)}; choose from {METHODS}")
    record = json.loads((RESULTS / "voting_mnist_curve.json").read_text())
    out = SWEEP_DIR.with_name(SWEEP_DIR.name + "_rerun")
    shutil.rmtree(out, ignore_errors=True)  # never resume another run's points
    start = time.time()
    sweep = run_sweep(methods, out)
    record["cells"].update(summarise(sweep, methods))
    record.setdefault("reruns", []).append({
        "methods": list(methods), "date": time.strftime("%Y-%m-%d"), "machine": machine(),
        "seconds": sum(r["time_s"] for r in sweep["rows"]) or time.time() - start,
    })  # fmt: skip
    plot(record["cells"])
    save_results("voting_mnist_curve", record, section(record))
    shutil.rmtree(out)


def main() -> None:
    if sys.argv[1:] == ["--render"]:  # the plot and section again from the saved result
        record = json.loads((RESULTS / "voting_mnist_curve.json").read_text())
        plot(record["cells"])
        save_results("voting_mnist_curve", record, section(record))
        return
    if not os.environ.get("FEDVOTE_DATA"):
        sys.exit("experiments/voting_mnist_curve.py: set FEDVOTE_DATA to the directory holding mnist/")
    if sys.argv[1:2] == ["--methods"] and len(sys.argv) == 3:
        rerun_methods(tuple(m.strip() for m in sys.argv[2].split(",")))
        return
    start = time.time()
    sweep = run_sweep()
    record = {
        "name": "voting_mnist_curve",
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "command": COMMAND,
        "seconds": sum(r["time_s"] for r in sweep["rows"]) or time.time() - start,
        "cells": summarise(sweep),
    }
    plot(record["cells"])
    save_results("voting_mnist_curve", record, section(record))
    shutil.rmtree(SWEEP_DIR)  # the rows are kept in the result file; the points were for resuming


if __name__ == "__main__":
    main()
