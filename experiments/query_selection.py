"""Which public-pool points to query: random (the paper's) or typical (TypiClust), measured.

PATE-FL on its defaults with each ``--query-selection``: on digits and on the voting
paper's non-IID federation of MNIST and of Fashion-MNIST typed with the defaults (``--dataset
mnist --agents 100 --partition classes --classes-per-agent 6 --epsilon 4.3 --delta 1e-3``;
the same with ``--dataset fashion-mnist``, issue 43's command), seeds 0–2. The
same seed and noise seed give both rules the same teachers and the same noise stream, so
the rows differ only in which points are asked. The choice reads only the public pool, so
both rows carry the same ε. Writes ``experiments/results/query_selection.json`` and the
section that ``experiments/run.py`` places in docs/results.md; docs/defaults.md quotes it.

Usage (repository root): ``FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/query_selection.py
[digits|mnist|fashion-mnist ...]``; naming some data sets keeps the saved rows of the others.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import fedvote

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import machine, save_results  # noqa: E402  (experiments/run.py)

SELECTIONS = ("random", "typical")
SEEDS = (0, 1, 2)
SETTINGS: dict[str, dict[str, Any]] = {
    "digits": {"dataset": "digits"},
    "mnist": {
        "dataset": "mnist",
        "agents": 100,
        "partition": "classes",
        "classes_per_agent": 6,
        "epsilon": 4.3,
        "delta": 1e-3,
    },
}
SETTINGS["fashion-mnist"] = {**SETTINGS["mnist"], "dataset": "fashion-mnist"}
SAVED = HERE / "results" / "query_selection.json"


def measure(data: str) -> list[dict[str, Any]]:
    """Both rules on ``data``: accuracy, pseudo-label accuracy and ε per seed, seconds."""
    rows = []
    for selection in SELECTIONS:
        runs = []
        for seed in SEEDS:
            started = time.perf_counter()
            result = fedvote.run(
                "pate-fl", query_selection=selection, seed=seed, noise_seed=seed, **SETTINGS[data]
            )
            runs.append({
                "seed": seed,
                "accuracy": result.accuracy,
                "pseudo_label_accuracy": result.label_accuracy,
                "epsilon_agent": result.privacy.agent.epsilon,
                "seconds": time.perf_counter() - started,
            })
            print(f"[queries] {data} {selection} seed {seed}: {result.accuracy:.3f} "
                  f"(labels {result.label_accuracy:.3f})", file=sys.stderr, flush=True)
        rows.append({"data": data, "selection": selection, "runs": runs, "date": time.strftime("%Y-%m-%d"),
                     "machine": machine()})  # fmt: skip
    return rows


def section(record: dict[str, Any]) -> str:
    """The markdown section for docs/results.md."""
    lines = [
        "## Which pool points are queried (`--query-selection`)",
        "",
        f"Last run {record['date']} on {record['machine']}; each data set's run is named under the table.",
        "",
        "Command: `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/query_selection.py`. "
        "PATE-FL on its defaults (digits: `fedvote run --query-selection S --seed s --noise-seed s`; "
        "MNIST: the voting paper's non-IID federation, `--dataset mnist --agents 100 --partition classes "
        "--classes-per-agent 6 --epsilon 4.3 --delta 1e-3`; Fashion-MNIST: the same with `--dataset "
        "fashion-mnist`, issue 43's command), seeds 0–2. Under one seed both rules get the "
        "same teachers and noise stream; the choice reads only the public pool, so ε is the same. "
        "`typical` is TypiClust's most typical point of each of Q k-means clusters of the pool "
        "(`fedvote.data.query_selection`); `auto`, the default, picks it from 10 pool points per query up: "
        "typical on MNIST and Fashion-MNIST (3,000 points), random on digits (270 points).",
        "",
        "| data | queries | test accuracy per seed | mean ± std | pseudo-label accuracy | ε agent | seconds per run |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in record["rows"]:
        runs = row["runs"]
        accuracies = [r["accuracy"] for r in runs]
        labels = [r["pseudo_label_accuracy"] for r in runs if r["pseudo_label_accuracy"] is not None]
        label_text = f"{statistics.mean(labels):.3f}" if labels else "—"
        lines.append(
            f"| {row['data']} | {row['selection']} | {', '.join(f'{a:.3f}' for a in accuracies)} | "
            f"{statistics.mean(accuracies):.3f} ± {statistics.stdev(accuracies):.3f} | {label_text} | "
            f"{runs[0]['epsilon_agent']:.3f} | {statistics.mean(r['seconds'] for r in runs):.0f} |"
        )
    ran = {(row["data"], row["date"], row["machine"]) for row in record["rows"] if "machine" in row}
    lines += [""] + [f"{data}: ran {date} on {where}." for data, date, where in sorted(ran)]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    """Measure the data sets named (default: digits and MNIST) and write the section."""
    datas = argv or list(SETTINGS)
    unknown = [d for d in datas if d not in SETTINGS]
    if unknown:
        sys.exit(f"experiments/query_selection.py: unknown data {', '.join(unknown)}; choose from {', '.join(SETTINGS)}")
    kept: list[dict[str, Any]] = []
    if argv and SAVED.exists():  # the other data sets' rows, each with the run it came from
        saved = json.loads(SAVED.read_text())
        kept = [{"date": saved["date"], "machine": saved["machine"], **row} for row in saved["rows"]
                if row["data"] not in datas]  # fmt: skip
    record = {
        "name": "query_selection",
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "rows": kept + [row for data in datas for row in measure(data)],
    }
    save_results("query_selection", record, section(record))


if __name__ == "__main__":
    main(sys.argv[1:])
