"""The voting paper's multi-label table (CelebA, Table 1) on the MNIST digit grids: FedAvg, DP-FedAvg, PATE-FL.

fedvote has no CelebA; the stand-in is ``multidigit-mnist`` (:mod:`fedvote.data.multidigit`:
2x2 grids of MNIST digits 0-4, 28x28, ten attributes ``has_d`` / ``top_d``). As in the
paper: 300 agents (iid), a public pool from the test side (1,200 grids; the other 2,800
are the test set), τ = 4, δ = 1e-3, DP-FedAvg with S = 0.08 and q = 0.04, every private
method calibrated to agent-level ε = 4. Metric: mean attribute accuracy (the paper's).

* **FedAvg** (non-private reference): ``dp-fedavg-multilabel --sigma 0 --noise server
  --clip-norm 100`` — DP-FedAvg's loop on the attributes (BCE) with no noise and a clip no
  update reaches, so the server adds the sampled updates over the public q·N (not the
  data-size-weighted mean of plain ``fedavg``, which is single-label).
* **DP-FedAvg**: ``dp-fedavg-multilabel --epsilon 4 --noise server``. The server placement
  releases exactly the distribution of the default distributed noise (the sum carries
  N(0, σ²S²) either way, the same events and ε) at a fraction of the simulation's cost (no
  300 per-agent noise vectors a round); the ε holds against observers of the model.
* **PATE-FL**: ``pate-fl-multilabel --epsilon 4 --queries 500 --tau 4``.

Teachers, students and the DP-FedAvg model are the MLP (``--teacher-model mlp
--student-model mlp --gradient-model mlp``), so the rows differ in the mechanism only.
Seeds 0-2 (``--seed s --noise-seed s``). Writes ``experiments/results/multilabel.json`` and
the section that ``experiments/run.py`` places in docs/results.md.

Usage (repository root): ``FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/multilabel.py``
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import fedvote

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import machine, save_results  # noqa: E402  (experiments/run.py)

SEEDS = (0, 1, 2)
EPSILON = 4.0
DELTA = 1e-3
COMMON: dict[str, Any] = {
    "dataset": "multidigit-mnist",
    "agents": 300,
    "delta": DELTA,
    "teacher_model": "mlp",
    "student_model": "mlp",
}
GRADIENT: dict[str, Any] = {"gradient_model": "mlp", "sampling_rate": 0.04, "rounds": 100, "noise": "server"}
# (row name, method, its settings, the command line it stands for)
ROWS: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    (
        "FedAvg (non-private)",
        "dp-fedavg-multilabel",
        {**GRADIENT, "sigma": 0.0, "clip_norm": 100.0},
        "--method dp-fedavg-multilabel --sigma 0 --noise server --clip-norm 100",
    ),
    (
        "DP-FedAvg",
        "dp-fedavg-multilabel",
        {**GRADIENT, "epsilon": EPSILON},
        f"--method dp-fedavg-multilabel --epsilon {EPSILON:g} --noise server",
    ),
    (
        "PATE-FL",
        "pate-fl-multilabel",
        {"epsilon": EPSILON, "queries": 500, "tau": 4},
        f"--method pate-fl-multilabel --epsilon {EPSILON:g} --queries 500 --tau 4",
    ),
)


def measure() -> list[dict[str, Any]]:
    """Every row on seeds 0-2: mean attribute accuracy, per attribute, ε at both levels, seconds."""
    rows = []
    for label, method, settings, command in ROWS:
        runs = []
        for seed in SEEDS:
            started = time.perf_counter()
            result = fedvote.run(method, seed=seed, noise_seed=seed, **COMMON, **settings)
            runs.append({
                "seed": seed,
                "accuracy": result.accuracy,
                "attribute_accuracy": result.details["attribute_accuracy"],
                "exact_match_accuracy": result.details["exact_match_accuracy"],
                "pseudo_label_accuracy": result.label_accuracy,
                "sigma": result.sigma,
                "epsilon_agent": result.privacy.agent.epsilon,
                "epsilon_instance": result.privacy.instance.epsilon,
                "sensitivity_agent": result.privacy.agent.sensitivity,
                "sensitivity_instance": result.privacy.instance.sensitivity,
                "seconds": time.perf_counter() - started,
            })
            print(f"[multilabel] {label} seed {seed}: {result.accuracy:.4f}", file=sys.stderr, flush=True)
        rows.append({"row": label, "method": method, "command": command, "settings": settings, "runs": runs})
    return rows


def _epsilon(value: float | None) -> str:
    return "∞ (not private)" if value is None else f"{value:.2f}"


def section(record: dict[str, Any]) -> str:
    """The markdown section for docs/results.md."""
    lines = [
        "## Multi-label voting: the CelebA table on MNIST digit grids",
        "",
        f"Ran {record['date']} on {record['machine']}; load average before: {record['load_before']}.",
        "",
        "Command: `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/multilabel.py` "
        "(8 minutes here at load average 7). The voting paper's CelebA setting (Table 1: 300 agents, "
        "τ = 4, δ = 1e-3, DP-FedAvg S = 0.08, q = 0.04) on `--dataset multidigit-mnist` "
        "(2x2 grids of MNIST digits 0-4, 28x28; ten attributes has_d / top_d; "
        "`fedvote.data.multidigit`): 30,000 train grids split iid among the 300 agents, 1,200 public "
        "and 2,800 test grids from the MNIST test side. Every run `--agents 300 --delta 1e-3 "
        "--teacher-model mlp --student-model mlp` (DP-FedAvg rows `--gradient-model mlp "
        "--sampling-rate 0.04 --rounds 100`), seeds 0-2 (`--seed s --noise-seed s`). Metric: mean "
        "attribute accuracy on the test grids; always answering each attribute's majority value scores "
        f"{record['majority_baseline']:.3f}. FedAvg is `dp-fedavg-multilabel` without noise and with a "
        "clip no update reaches; DP-FedAvg uses `--noise server`, whose released model has the "
        "distribution of the default distributed noise (same events, same ε).",
        "",
        "| method | command | mean attribute accuracy per seed | mean ± std | exact match | σ | ε agent | ε instance | seconds per run |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in record["rows"]:
        runs = row["runs"]
        accuracies = [r["accuracy"] for r in runs]
        exact = statistics.mean(r["exact_match_accuracy"] for r in runs)
        lines.append(
            f"| {row['row']} | `{row['command']}` | {', '.join(f'{a:.3f}' for a in accuracies)} | "
            f"{statistics.mean(accuracies):.3f} ± {statistics.stdev(accuracies):.3f} | {exact:.3f} | "
            f"{runs[0]['sigma']:.3g} | {_epsilon(runs[0]['epsilon_agent'])} | "
            f"{_epsilon(runs[0]['epsilon_instance'])} | {statistics.mean(r['seconds'] for r in runs):.0f} |"
        )
    means = {row["row"]: statistics.mean(r["accuracy"] for r in row["runs"]) for row in record["rows"]}
    labels = [r["pseudo_label_accuracy"] for row in record["rows"] for r in row["runs"] if r["pseudo_label_accuracy"]]
    gap = 100 * (means["PATE-FL"] - means["DP-FedAvg"])
    lines += [
        "",
        f"At the same agent-level ε, PATE-FL is {gap:+.1f} points against DP-FedAvg (the paper: +1.8 on "
        f"CelebA) and {100 * (means['PATE-FL'] - means['FedAvg (non-private)']):+.1f} against non-private "
        f"FedAvg; its pseudo-labels are {statistics.mean(labels):.3f} right (mean attribute accuracy on the "
        f"500 queries). Load average after: {record['load_after']}.",
        "",
        "ε columns: PATE-FL's sensitivities are √τ = 2 (agent) and √8 (instance), "
        "`fedvote.privacy.events.multilabel_events` (docs/privacy.md, \"Multi-label votes\"); "
        "DP-FedAvg's are its own (docs/privacy.md, \"Gradient-based baselines\").",
    ]
    return "\n".join(lines)


def majority_baseline() -> float:
    """Mean attribute accuracy of answering each attribute's more common value on the test grids."""
    from fedvote.data.attributes import AttributeTask
    from fedvote.runner import build_config, make_federation

    federation = make_federation(build_config("pate-fl-multilabel", **COMMON))
    task = AttributeTask.of(federation.attribute_names, federation.num_classes)
    rates = task.targets(federation.test.labels).mean(axis=0)
    return float(np.maximum(rates, 1.0 - rates).mean())


def main(argv: list[str]) -> None:
    """Measure every row and write the result and its section (``--section``: from the saved result)."""
    if argv == ["--section"]:
        saved = json.loads((HERE / "results" / "multilabel.json").read_text())
        save_results("multilabel", saved, section(saved))
        return
    load_before = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    record = {
        "name": "multilabel",
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "load_before": load_before,
        "majority_baseline": majority_baseline(),
        "rows": measure(),
        "load_after": ", ".join(f"{v:.2f}" for v in os.getloadavg()),
    }
    save_results("multilabel", record, section(record))


if __name__ == "__main__":
    main(sys.argv[1:])
