"""Individual budgets and subsampled voting on digits (issue 45), measured.

PATE-FL on the digits defaults with 50 agents, seeds 0–2 (``seed`` and ``noise_seed``):

* **Individualized PATE's setting** (Boenisch et al., PETS 2023: 34 % / 43 % / 23 % of the
  data holders at ε = 1 / 2 / 3): ``--agent-budgets 1:0.34,2:0.43,3:0.23`` against uniform
  budgets at the smallest (ε = 1, what every agent can be promised without individual
  budgets) and at the mean budget (ε = 1.89, a reference that breaks the ε = 1 agents'
  budget) — at equal Q, and then the number of queries the individual budgets answer at the
  label quality uniform ε = 1 reaches with Q₀ (the Q at which the weighted votes' total
  signal-to-noise Σᵢ wᵢ/σ over √Q equals uniform's: Gaussian σ_b grows as √Q).
* **Subsampled voting** ``--vote-sampling q`` at equal agent ε against full participation.

Writes ``experiments/results/individual_budgets.json`` and its docs/results.md section
(between its markers; ``experiments/run.py --render`` places the same text).

Usage (repository root): ``.venv/bin/python experiments/individual_budgets.py [--render]``
"""

from __future__ import annotations

import datetime
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import fedvote
from fedvote.methods.options.voting import PateFLOptions
from fedvote.methods.pate_fl import PateFL
from fedvote.privacy.budget_spec import assign_budgets, parse_budget_spec

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import DOC, machine, save_results  # noqa: E402  (experiments/run.py)

NAME = "individual_budgets"
SPEC = "1:0.34,2:0.43,3:0.23"
AGENTS = 50
SEEDS = (0, 1, 2)
QUERIES = 100  # the digits default at these budgets (σ above half the vote mass)
BASE_QUERIES = QUERIES  # Q₀ of uniform ε = 1 for the answered-queries comparison
POOL = 270
RATES = (1.0, 0.5)
SAMPLED_EPSILONS = (4.0,)  # (a shared 2-core machine: each run takes minutes under others' load)


# What the issue asks that this script does not run (said in the section, not hidden).
NOT_RUN = (
    "Not run here: the issue's MNIST version of both tables (Individualized PATE's own dataset) and "
    "subsampled voting on MNIST — each MNIST run of the voting paper's federation takes minutes on "
    "this shared 2-core machine (docs/results.md, \"Which pool points are queried\": 151 s idle), and "
    "these digits runs already took about 3 minutes each under a load average of 8-12 from other "
    "jobs; a lower q (0.2) and a smaller ε (1) for subsampled voting were dropped for the same reason."
)


def mean_budget() -> float:
    budgets = assign_budgets(parse_budget_spec(SPEC), AGENTS, 0)
    return round(float(budgets.mean()), 2)


def one(**settings: Any) -> dict[str, Any]:
    """One run per seed of ``settings``: accuracies, ε and the groups, seconds."""
    runs = []
    for seed in SEEDS:
        started = time.perf_counter()
        result = fedvote.run(agents=AGENTS, seed=seed, noise_seed=seed, **settings)
        runs.append(
            {
                "seed": seed,
                "accuracy": result.accuracy,
                "label_accuracy": result.label_accuracy,
                "queries": result.queries,
                "student_queries": result.details["student_queries"],
                "sigma": result.sigma,
                "agent_epsilon": result.privacy.agent.epsilon,
                "instance_epsilon": result.privacy.instance.epsilon,
                "groups": [
                    {"budget": g.budget, "agents": g.agents, "epsilon": g.epsilon, "weight": g.weight}
                    for g in result.privacy.agent_groups
                ],
                "seconds": time.perf_counter() - started,
            }
        )
        print(f"{settings} seed {seed}: {result.accuracy:.3f}", file=sys.stderr)
    return {"settings": settings, "runs": runs}


def equal_signal_queries(base: int) -> tuple[int, int]:
    """Q at which the budget-weighted votes' total signal-to-noise equals uniform ε = 1's at ``base``.

    With σ_b(Q) the calibrated σ of budget b at Q (weight 1), agent i's vote carries
    1/σ_{b_i}; uniform ε = 1 carries N/σ₁. Gaussian compositions: σ_b(Q) = σ_b(Q₀)·√(Q/Q₀).
    """
    method = PateFL(sigma=1.0, queries=base, min_responders=AGENTS, release_options=PateFLOptions())
    budgets = assign_budgets(parse_budget_spec(SPEC), AGENTS, 0)
    sigma = {b: method.unit_sigma(b) for b in sorted(set(budgets.tolist()))}
    individual = sum(1.0 / sigma[b] for b in budgets.tolist())
    uniform = AGENTS / sigma[1.0]
    wanted = int(base * (individual / uniform) ** 2)
    return wanted, min(POOL, wanted)


def summarise(entry: dict[str, Any]) -> dict[str, Any]:
    runs = entry["runs"]
    accuracies = [r["accuracy"] for r in runs]
    return {
        "accuracy": statistics.mean(accuracies),
        "accuracy_std": statistics.stdev(accuracies),
        "accuracies": accuracies,
        "label_accuracy": statistics.mean(r["label_accuracy"] for r in runs),
        "student_queries": statistics.mean(r["student_queries"] for r in runs),
        "queries": runs[0]["queries"],
        "sigma": runs[0]["sigma"],
        "agent_epsilon": max(r["agent_epsilon"] for r in runs),
        "instance_epsilon": max(r["instance_epsilon"] for r in runs),
        "groups": runs[0]["groups"],
        "seconds": statistics.mean(r["seconds"] for r in runs),
    }


def section(record: dict[str, Any]) -> str:
    """The docs/results.md section."""
    mean = record["mean_budget"]
    lines = [
        "## Individual budgets and subsampled voting (issue 45)",
        "",
        f"Ran {record['date']} on {record['machine']}; load average before: {record['uptime']}.",
        "",
        "Command: `.venv/bin/python experiments/individual_budgets.py`. PATE-FL, digits defaults, "
        f"{AGENTS} agents, seeds {', '.join(map(str, SEEDS))} (`--seed s --noise-seed s`), δ = 10⁻³. "
        "Individualized PATE's setting (Boenisch et al., PETS 2023, MNIST: 34 % / 43 % / 23 % of the "
        "data holders at ε = 1 / 2 / 3), here as agents: `--agent-budgets 1:0.34,2:0.43,3:0.23` "
        "(weights from the budgets, σ calibrated to the largest; docs/privacy.md, \"Individual budgets "
        "and subsampled voting\") against every agent at the smallest budget (`--epsilon 1`: what all "
        f"can be promised without individual budgets) and at the mean budget (`--epsilon {mean}`, a "
        "reference that breaks the ε = 1 agents' budget). Accuracy: the student on the 540 test "
        "digits, mean ± std over seeds; labels: pseudo-label accuracy (mean); answered: queries "
        "released, and in brackets those confident enough for the student (mean).",
        "",
        "| run | queries answered (student) | test accuracy | per seed | pseudo-labels | σ | ε agent (max over agents) | each group's ε |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key, label in record["labels"].items():
        row = record["summary"][key]
        groups = ", ".join(f"{g['budget']:g}: {g['epsilon']:.3f}" for g in row["groups"]) or "—"
        lines.append(
            f"| {label} | {row['queries']} ({row['student_queries']:.0f}) | {row['accuracy']:.3f} ± "
            f"{row['accuracy_std']:.3f} | {', '.join(f'{a:.3f}' for a in row['accuracies'])} | "
            f"{row['label_accuracy']:.3f} | {row['sigma']:.3f} | {row['agent_epsilon']:.3f} | {groups} |"
        )
    base, wide, wanted = record["base_queries"], record["equal_signal_queries"], record["equal_signal_wanted"]
    lines += [
        "",
        f"Answered queries at equal label quality: uniform ε = 1 answers Q₀ = {base}; the individual "
        f"budgets reach the same total signal-to-noise of the weighted votes (Σᵢ 1/σ_(bᵢ) against N/σ₁) "
        f"at Q = {wanted} ({wanted / base:.2f}×), capped by the pool at Q = {wide} (the \"equal signal\" row, "
        "which is then slightly better off than uniform). Individualized PATE reports 3.6× "
        "(13128 vs 3652 queries, weighting, MNIST).",
        "",
        "Subsampled voting (`--vote-sampling q`, each agent's own coin per query, every noise share "
        "sent; Poisson-subsampled Gaussian accounting) at equal agent ε, Q = 100:",
        "",
        "| ε agent target | q | test accuracy | per seed | pseudo-labels | σ | ε agent | ε instance |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in record["sampled"]:
        s = row["summary"]
        lines.append(
            f"| {row['epsilon']:g} | {row['rate']:g} | {s['accuracy']:.3f} ± {s['accuracy_std']:.3f} | "
            f"{', '.join(f'{a:.3f}' for a in s['accuracies'])} | {s['label_accuracy']:.3f} | "
            f"{s['sigma']:.3f} | {s['agent_epsilon']:.3f} | {s['instance_epsilon']:.3f} |"
        )
    lines += ["", record["reading"], "", NOT_RUN]
    return "\n".join(lines)


def reading(record: dict[str, Any]) -> str:
    """What the numbers say, in words derived from them."""
    s = record["summary"]
    uniform, individual, mean = s["uniform_min"], s["individual"], s["uniform_mean"]
    wide, base = s["individual_equal_signal"], s["uniform_min"]
    better = individual["accuracy"] - uniform["accuracy"]
    parts = [
        f"At equal Q the individual budgets score {individual['accuracy']:.3f} against "
        f"{uniform['accuracy']:.3f} for uniform ε = 1 ({better:+.3f}) and {mean['accuracy']:.3f} for "
        f"uniform ε = {record['mean_budget']} (pseudo-labels {individual['label_accuracy']:.3f}, "
        f"{uniform['label_accuracy']:.3f}, {mean['label_accuracy']:.3f}), every group within its budget.",
        f"Answering {wide['queries']} queries instead of {base['queries']}, the individual budgets score "
        f"{wide['accuracy']:.3f} against uniform ε = 1's {base['accuracy']:.3f} "
        f"(pseudo-labels {wide['label_accuracy']:.3f} vs {base['label_accuracy']:.3f}).",
    ]
    for epsilon in SAMPLED_EPSILONS:
        rows = {r["rate"]: r["summary"] for r in record["sampled"] if r["epsilon"] == epsilon}
        full = rows[1.0]
        others = ", ".join(
            f"q = {q:g}: {rows[q]['accuracy']:.3f} (σ {rows[q]['sigma']:.2f}, signal q/σ = {q / rows[q]['sigma']:.3f})"
            for q in RATES if q != 1.0
        )
        parts.append(
            f"At agent ε = {epsilon:g}, full participation scores {full['accuracy']:.3f} (σ {full['sigma']:.2f}, "
            f"signal 1/σ = {1 / full['sigma']:.3f}); {others}."
        )
    return " ".join(parts)


def place_section(text: str) -> None:
    """Put ``text`` between this experiment's markers in docs/results.md (the rest untouched).

    Where the markers are absent, before the first later-sorted experiment's begin marker
    (the order ``experiments/run.py --render`` uses), else at the end.
    """
    doc = DOC.read_text()
    begin, end = f"<!-- {NAME}: begin -->", f"<!-- {NAME}: end -->"
    block = f"{begin}\n{text.rstrip()}\n{end}\n"
    if begin in doc and end in doc:
        head, rest = doc.split(begin, 1)
        tail = rest.split(end, 1)[1].lstrip("\n")
        DOC.write_text(head + block + ("\n" + tail if tail else ""))
        return
    markers = sorted(
        (line[5:].split(":")[0], line) for line in doc.splitlines() if line.startswith("<!-- ") and ": begin -->" in line
    )
    later = next((line for name, line in markers if name > NAME), None)
    if later is None:
        DOC.write_text(doc.rstrip("\n") + "\n\n" + block)
    else:
        DOC.write_text(doc.replace(later, block + "\n" + later, 1))


def main() -> None:
    uptime = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    mean = mean_budget()
    wanted, wide = equal_signal_queries(BASE_QUERIES)
    labels = {
        "uniform_min": "uniform ε = 1 (smallest budget)",
        "uniform_mean": f"uniform ε = {mean} (mean budget; breaks the ε = 1 agents' budget)",
        "individual": "individual budgets 1 / 2 / 3",
        "individual_equal_signal": f"individual budgets, equal signal, Q = {wide}",
    }
    settings = {
        "uniform_min": {"epsilon": 1.0, "queries": QUERIES},
        "uniform_mean": {"epsilon": mean, "queries": QUERIES},
        "individual": {"agent_budgets": SPEC, "queries": QUERIES},
        "individual_equal_signal": {"agent_budgets": SPEC, "queries": wide},
    }
    raw = {key: one(**value) for key, value in settings.items()}
    sampled = []
    for epsilon in SAMPLED_EPSILONS:
        for rate in RATES:
            extra = {} if rate == 1.0 else {"vote_sampling": rate}
            entry = one(epsilon=epsilon, queries=QUERIES, **extra)
            sampled.append({"epsilon": epsilon, "rate": rate, "raw": entry, "summary": summarise(entry)})
    record: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "uptime": uptime,
        "mean_budget": mean,
        "base_queries": BASE_QUERIES,
        "equal_signal_queries": wide,
        "equal_signal_wanted": wanted,
        "labels": labels,
        "raw": raw,
        "summary": {key: summarise(value) for key, value in raw.items()},
        "sampled": sampled,
    }
    assert all(
        g["epsilon"] <= g["budget"] for key in ("individual", "individual_equal_signal")
        for run in raw[key]["runs"] for g in run["groups"]
    ), "a group exceeded its budget"
    assert not math.isnan(record["summary"]["individual"]["accuracy"])
    record["reading"] = reading(record)
    text = section(record)
    save_results(NAME, record, text)
    place_section(text)
    print(text)


def render() -> None:
    """Rewrite the section from the saved results (``--render``), nothing run."""
    record = json.loads((HERE / "results" / f"{NAME}.json").read_text())
    text = section(record)
    save_results(NAME, record, text)
    place_section(text)


if __name__ == "__main__":
    render() if sys.argv[1:] == ["--render"] else main()
