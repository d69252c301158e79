"""Every method on its own defaults, as a new user meets it: ``fedvote run --method M`` on digits.

For each registered method and each of three seeds (``--seed s --noise-seed s``, s = 0, 1,
2; nothing else given), the student's (or global model's) test accuracy and the ε each
level reports. Writes ``experiments/results/defaults_digits.json`` and the section
``defaults_digits.section.md`` that ``experiments/run.py`` places in docs/results.md.
Needs no data files (digits ships with scikit-learn); about ten minutes on 2 cores.

Usage (repository root): ``.venv/bin/python experiments/defaults_digits.py [METHOD ...]``
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import fedvote
from fedvote.errors import ConfigError
from fedvote.methods import METHODS

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import RESULTS, machine, save_results  # noqa: E402  (experiments/run.py)

SEEDS = (0, 1, 2)
TARGET = 0.75  # the accuracy issue's bar for a method on its defaults


def measure(method: str) -> dict:
    """Three default runs of ``method``: accuracy, ε per level, seconds."""
    runs = []
    for seed in SEEDS:
        started = time.perf_counter()
        try:
            result = fedvote.run(method, seed=seed, noise_seed=seed).to_dict()
        except ConfigError as error:  # refused before training: the same for every seed
            print(f"[defaults] {method}: refused: {error}", file=sys.stderr, flush=True)
            reason = str(error).removeprefix(f"{error.argument}: ")
            return {"method": method, "refused": f"--{error.argument.replace('_', '-')}: {reason}"}
        privacy = result["privacy"]
        runs.append({
            "seed": seed,
            "accuracy": result["accuracy"],
            "epsilon_agent": privacy["agent"]["epsilon"],
            "epsilon_instance": privacy["instance"]["epsilon"],
            "seconds": time.perf_counter() - started,
        })
        print(f"[defaults] {method} seed {seed}: {result['accuracy']:.3f}", file=sys.stderr, flush=True)
    return {"method": method, "runs": runs, "ran": f"{time.strftime('%Y-%m-%d')} on {machine()}"}


def section(record: dict) -> str:
    """The markdown section for docs/results.md."""
    lines = [
        "## Every method on its defaults, digits (`fedvote run --method M`)",
        "",
        f"Ran {record['date']} on {record['machine']}.",
        "",
        "Command: `.venv/bin/python experiments/defaults_digits.py` (runs `fedvote run --method M "
        "--seed s --noise-seed s` for s = 0, 1, 2; nothing else given: 50 agents, iid, ε = 4 at the "
        "method's own level, δ = 1e-3). Accuracy is the released model's on the test set, mean ± "
        f"std over the seeds; ε is the same for every seed. The accuracy issue asks ≥ {TARGET}.",
        "",
        "| method | test accuracy | ε agent | ε instance | seconds per run | ≥ 0.75 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]

    def eps(value: float | None) -> str:
        return "∞ (not private)" if value is None else f"{value:.3f}"

    for row in record["methods"]:
        if "refused" in row:
            lines.append(f"| {row['method']} | refused before training | — | — | — | **no** (refused) |")
            continue
        accuracies = [r["accuracy"] for r in row["runs"]]
        mean, spread = statistics.mean(accuracies), statistics.stdev(accuracies)
        first = row["runs"][0]
        seconds = statistics.mean(r["seconds"] for r in row["runs"])
        lines.append(
            f"| {row['method']} | {mean:.3f} ± {spread:.3f} | {eps(first['epsilon_agent'])} | "
            f"{eps(first['epsilon_instance'])} | {seconds:.1f} | {'yes' if mean >= TARGET else '**no**'} |"
        )
    refusals = [row for row in record["methods"] if "refused" in row]
    first = f"{record['date']} on {record['machine']}"
    later: dict[str, list[str]] = {}
    for row in record["methods"]:
        if row.get("ran", first) != first:
            later.setdefault(row["ran"], []).append(row["method"])
    lines += [f"\nRerun since (the other rows from the run above): {', '.join(names)}, {ran}."
              for ran, names in later.items()]
    lines += ["", "How the defaults are chosen (public quantities only) is in docs/defaults.md."]
    if refusals:
        lines += ["", "The refusals, as printed (one line each, before anything is trained):", ""]
        lines += [f"- `{row['method']}`: {row['refused']}" for row in refusals]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    """Run the methods named (default: every registered one) and write the section."""
    methods = argv or sorted(METHODS)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        sys.exit(f"experiments/defaults_digits.py: unknown method(s) {', '.join(unknown)}")
    measured = [measure(method) for method in methods]
    saved = RESULTS / "defaults_digits.json"
    kept = []  # methods not asked again keep their saved rows (each row names its run)
    if argv and saved.exists():
        kept = [row for row in json.loads(saved.read_text())["methods"] if row["method"] not in methods]
    first = json.loads(saved.read_text()) if kept else {"machine": machine(), "date": time.strftime("%Y-%m-%d")}
    record = {
        "name": "defaults_digits",
        "machine": first["machine"],  # the run the kept rows come from
        "date": first["date"],
        "methods": sorted(kept + measured, key=lambda row: row["method"]),
    }
    save_results("defaults_digits", record, section(record))


if __name__ == "__main__":
    main(sys.argv[1:])
