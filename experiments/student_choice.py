"""Which semi-supervised student is the default: VAT, FixMatch or self-training, measured.

PATE-FL on its defaults with each ``--semi-supervised`` choice: on digits (8×8 images,
seeds 0–2) and on the voting paper's MNIST non-IID federation typed with the defaults
(``--dataset mnist --agents 100 --partition classes --classes-per-agent 6 --epsilon 4.3
--delta 1e-3``, seed 0: one MNIST run per student takes minutes on 2 cores). The same
seed and noise seed give every student the same teachers and the same released labels,
so the rows differ only in the student. Writes ``experiments/results/student_choice.json``
and the section ``student_choice.section.md`` that ``experiments/run.py`` places in
docs/results.md; docs/defaults.md quotes it.

Usage (repository root): ``FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/student_choice.py [digits|mnist ...]``
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import fedvote

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import machine, save_results  # noqa: E402  (experiments/run.py)

STUDENTS = ("self-training", "fixmatch", "vat")
SETTINGS: dict[str, dict[str, Any]] = {
    "digits": {"dataset": "digits", "seeds": (0, 1, 2)},
    "mnist": {
        "dataset": "mnist",
        "agents": 100,
        "partition": "classes",
        "classes_per_agent": 6,
        "epsilon": 4.3,
        "delta": 1e-3,
        "seeds": (0,),
    },
}


def measure(data: str) -> list[dict[str, Any]]:
    """Every student on ``data``: accuracy and pseudo-label accuracy per seed, seconds."""
    settings = dict(SETTINGS[data])
    seeds = settings.pop("seeds")
    rows = []
    for student in STUDENTS:
        runs = []
        for seed in seeds:
            started = time.perf_counter()
            result = fedvote.run("pate-fl", semi_supervised=student, seed=seed, noise_seed=seed, **settings)
            runs.append({
                "seed": seed,
                "accuracy": result.accuracy,
                "pseudo_label_accuracy": result.label_accuracy,
                "epsilon_agent": result.privacy.agent.epsilon,
                "seconds": time.perf_counter() - started,
            })
            print(f"[student] {data} {student} seed {seed}: {result.accuracy:.3f}", file=sys.stderr, flush=True)
        rows.append({"data": data, "student": student, "runs": runs})
    return rows


def section(record: dict[str, Any]) -> str:
    """The markdown section for docs/results.md."""
    lines = [
        "## The student's use of the unlabelled pool (`--semi-supervised`)",
        "",
        f"Ran {record['date']} on {record['machine']}.",
        "",
        "Command: `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/student_choice.py`. "
        "PATE-FL on its defaults (digits: `fedvote run --semi-supervised S --seed s --noise-seed s`; "
        "MNIST: the voting paper's non-IID federation, `--dataset mnist --agents 100 --partition classes "
        "--classes-per-agent 6 --epsilon 4.3 --delta 1e-3`). Under one seed every student gets the same "
        "released labels; the rows differ only in the student. `auto` (the default) is FixMatch for "
        "images of at least 16×16 and VAT otherwise.",
        "",
        "| data | student | test accuracy per seed | mean | pseudo-label accuracy | ε agent | seconds per run |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in record["rows"]:
        runs = row["runs"]
        accuracies = [r["accuracy"] for r in runs]
        labels = [r["pseudo_label_accuracy"] for r in runs if r["pseudo_label_accuracy"] is not None]
        label_text = f"{statistics.mean(labels):.3f}" if labels else "—"
        lines.append(
            f"| {row['data']} | {row['student']} | {', '.join(f'{a:.3f}' for a in accuracies)} | "
            f"{statistics.mean(accuracies):.3f} | {label_text} | {runs[0]['epsilon_agent']:.3f} | "
            f"{statistics.mean(r['seconds'] for r in runs):.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    """Measure the data sets named (default: digits and MNIST) and write the section."""
    datas = argv or list(SETTINGS)
    unknown = [d for d in datas if d not in SETTINGS]
    if unknown:
        sys.exit(f"experiments/student_choice.py: unknown data {', '.join(unknown)}; choose from digits, mnist")
    record = {
        "name": "student_choice",
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "rows": [row for data in datas for row in measure(data)],
    }
    save_results("student_choice", record, section(record))


if __name__ == "__main__":
    main(sys.argv[1:])
