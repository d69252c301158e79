"""Issue 43: do better-behaved teachers lift PATE-FL's vote-sum student at the same agent ε?

The two Bars' federations (CIFAR-10: 100 agents, Dirichlet α = 0.5, agent ε 4; Fashion-MNIST:
100 agents, 6 classes each, agent ε 4.3) at seed 0 through the defaults' patch features, read by
the defaults' student (ridge on the noisy vote sums, its class shares matched to the documented
uniform prior). Each row changes only what each agent's teacher votes; the release (one vote of
L2 norm ≤ 1 a query, σ from fedvote's planner) and so the agent ε stay the defaults':

* the teachers' L2 weight decay and epochs (the defaults: 1e-4, 40);
* **balanced** teachers: each agent's logits less log of its own class shares (Laplace-smoothed),
  the logit adjustment of Menon et al. (ICLR 2021) for a non-IID agent voting on a balanced pool;
* **abstaining** teachers: no vote (a zero row) where the teacher's top probability is below a
  threshold — fewer wrong votes from classes an agent never saw, at the same σ;
* **soft** votes: the teachers' probabilities (norm ≤ 1);
* and, as the limit of teacher accuracy, **perfect** teachers: every agent votes every pool
  image's true label (the pool's labels are read for this reference only). It is not a bound over
  every possible teacher (votes that a linear read of φ fits better than the truth, such as a
  linear model of all the agents' records, could read higher), but no teacher is more often right.

Each agent's changes read only its own records; the student is post-processing. 'noisy' is the
mean over ``DRAWS`` noise draws, the same draws in every row. A measurement, not fedvote's release.

Usage (repository root)::

    FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/teacher_variants.py  # every row
    FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/teacher_variants.py --part perfect  # the bound only
    .venv/bin/python experiments/teacher_variants.py --render   # the section from the saved record
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bar_federations import (  # noqa: E402
    BAR_ACCURACY,
    FEDERATIONS,
    fit_teachers,
    main_over_federations,
    measure_part_into_saved,
    noisy_reads,
    part_ran,
    prepared,
)

from fedvote.models.vote_regression import fit_vote_regression, prior_matched_offsets  # noqa: E402

NAME = "teacher_variants"
TRAINING = ((1e-4, 40), (1e-3, 40), (1e-2, 40), (1e-4, 10))  # (weight decay, epochs); the first: defaults
ABSTAIN_BELOW = (0.7, 0.9)


def balanced_logits(logits: np.ndarray, counts: np.ndarray, smoothing: float = 1.0) -> np.ndarray:
    """Each agent's logits (A, Q, C) less log of its own Laplace-smoothed class shares (A, C)."""
    shares = (counts + smoothing) / (
        counts.sum(axis=1, keepdims=True) + smoothing * counts.shape[1]
    )  # (A, C)
    return logits - np.log(shares)[:, None, :]


def abstaining_votes(logits: np.ndarray, threshold: float) -> np.ndarray:
    """One-hot votes (A, Q, C) of the argmax, zero where the top softmax probability is below ``threshold``."""
    probabilities = softmax(logits)
    votes = np.eye(logits.shape[-1])[logits.argmax(axis=-1)]
    return votes * (probabilities.max(axis=-1) >= threshold)[..., None]


def softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities along the last axis."""
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def measure(label: str, settings: dict[str, Any], data_dir: str) -> dict[str, Any]:
    """Every row for one federation: each teacher variant's clean and noisy student accuracy."""
    started = time.perf_counter()
    bar = prepared(settings, data_dir)
    federation, sigma, classes = bar.federation, bar.sigma, bar.federation.num_classes
    pool, test_labels = bar.pool, bar.test_labels
    counts = np.stack(
        [np.bincount(np.asarray(a.labels), minlength=classes) for a in federation.agents]
    )  # (A, C)

    def student(sums: np.ndarray) -> float:
        return read_sums(bar, sums)

    def row(name: str, votes: np.ndarray, teacher_accuracy: float) -> dict[str, Any]:
        sums = votes.sum(axis=0)  # (Q, C)
        noisy = noisy_reads(sums, sigma, student)
        print(f"[{NAME}] {label}: {name}: {np.round(noisy, 4)}", file=sys.stderr, flush=True)
        return {"teachers": name, "teacher_accuracy": teacher_accuracy, "votes_cast": float(votes.sum() / votes.shape[0]
                / votes.shape[1]), "clean": student(sums), "noisy": noisy}  # fmt: skip

    rows: list[dict[str, Any]] = []
    for weight_decay, epochs in TRAINING:
        ensemble = fit_teachers(
            bar, dataclasses.replace(bar.teacher, weight_decay=weight_decay, epochs=epochs)
        )
        with torch.no_grad():
            logits = ensemble.logits(federation.public.features).double().cpu().numpy()  # (A, Q, C)
            on_test = ensemble.logits(federation.test.features[:1000]).argmax(-1).cpu().numpy()  # (A, 1000)
        accuracy = float((on_test == test_labels[:1000]).mean())
        name = f"logistic, weight decay {weight_decay:g}, {epochs} epochs"
        rows.append(row(name + (" (the defaults')" if (weight_decay, epochs) == TRAINING[0] else ""),
                        np.eye(classes)[logits.argmax(axis=-1)], accuracy))  # fmt: skip
        if (weight_decay, epochs) != TRAINING[0]:
            continue
        rows.append(row("the defaults', balanced by each agent's class shares",
                        np.eye(classes)[balanced_logits(logits, counts).argmax(axis=-1)], accuracy))  # fmt: skip
        for threshold in ABSTAIN_BELOW:
            rows.append(row(f"the defaults', abstaining below top probability {threshold:g}",
                            abstaining_votes(logits, threshold), accuracy))  # fmt: skip
        rows.append(row("the defaults', soft votes (probabilities)", softmax(logits), accuracy))
    return {"federation": label, "sigma": sigma, "queries": int(pool.shape[0]), "rows": rows,
            "perfect": perfect_row(bar, BAR_ACCURACY[settings["dataset"]]), "wall_seconds": time.perf_counter() - started}  # fmt: skip


def read_sums(bar: Any, sums: np.ndarray) -> float:
    """The defaults' student on ``sums`` (Q, C): ridge on the pool, class shares matched to the uniform prior."""
    classes = bar.federation.num_classes
    fit = fit_vote_regression(bar.pool, sums)
    bias = fit.bias + prior_matched_offsets(
        bar.pool @ fit.weights + fit.bias, np.full(classes, 1.0 / classes)
    )
    return float(((bar.test @ fit.weights + bias).argmax(axis=1) == bar.test_labels).mean())


def perfect_row(bar: Any, bar_accuracy: float) -> dict[str, Any]:
    """The bound: every agent votes every pool image's true label, the defaults' σ and student."""
    federation = bar.federation
    sums = (
        federation.num_agents * np.eye(federation.num_classes)[np.asarray(federation.public.labels)]
    )  # (Q, C)
    return {"clean": read_sums(bar, sums), "noisy": noisy_reads(sums, bar.sigma, lambda s: read_sums(bar, s)),
            "bar": bar_accuracy}  # fmt: skip


def section(record: dict[str, Any]) -> str:
    """The markdown section: one table per federation, and what it says."""
    lines = [
        "## Teachers that vote differently, the same release (issue 43; measured, not fedvote's release)",
        "",
        f"Ran {record['date']} on {record['machine']}; {record['wall_seconds']:.0f} s wall.",
        "",
        f"Command: `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/{NAME}.py`. Each Bar's "
        "federation at seed 0, the defaults' patch features; every row keeps the defaults' release (one vote "
        "of norm ≤ 1 a query on all Q pool images, σ from fedvote's planner, the same agent ε) and the "
        "defaults' student (ridge on the noisy sums, class shares matched to the documented uniform prior), "
        "and changes what each agent's teacher votes: its weight decay and epochs; its logits less log of "
        "its own class shares (balanced, Menon et al. 2021); no vote where its top probability is below a "
        "threshold (abstaining); its probabilities (soft). Teacher accuracy: the mean over the teachers on "
        "1,000 test images (a simulation diagnostic). Votes cast: the mean norm-1 mass an agent puts on a "
        f"query. 'noisy' is the mean over {record['draws']} noise draws (the same draws in every row).",
    ]
    for part in record["parts"]:
        lines += [
            "",
            f"**{part['federation']}** (Q = {part['queries']:,}, σ {part['sigma']:.2f}; {part['wall_seconds']:.0f} s)",
            "",
            "| teachers | teacher accuracy | votes cast | test accuracy, clean sums | noisy (per draw) | mean |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for row in part["rows"]:
            lines.append(
                f"| {row['teachers']} | {row['teacher_accuracy']:.3f} | {row['votes_cast']:.3f} | {row['clean']:.3f} "
                f"| {', '.join(f'{a:.3f}' for a in row['noisy'])} | {float(np.mean(row['noisy'])):.3f} |"
            )
        means = [float(np.mean(row["noisy"])) for row in part["rows"]]
        best = int(np.argmax(means))
        lines += [
            "",
            f"Best: {means[best]:.3f} ({part['rows'][best]['teachers']}) against the defaults' {means[0]:.3f} "
            f"({100 * (means[best] - means[0]):+.1f} points).",
        ]
        lines += perfect_lines(part.get("perfect"), part_ran(record, "perfect"))
    moves = [abs(float(np.mean(row["noisy"])) - float(np.mean(part["rows"][0]["noisy"])))
             for part in record["parts"] for row in part["rows"][1:]]  # fmt: skip
    costs = [part["rows"][0]["clean"] - float(np.mean(part["rows"][0]["noisy"])) for part in record["parts"]]
    lines += [
        "",
        f"Largest move of a variant from the defaults: {100 * max(moves):.1f} points; the release's noise costs "
        f"the defaults {', '.join(f'{100 * cost:.1f}' for cost in costs)} points (clean sums against noisy, "
        "per federation above).",
    ]
    return "\n".join(lines)


def perfect_lines(perfect: dict[str, Any] | None, ran: str = "") -> list[str]:
    """The reference's sentence: perfect teachers through the defaults' release and student, against the Bar."""
    if perfect is None:
        return []
    mean = float(np.mean(perfect["noisy"]))
    when = f"; {ran}" if ran else ""
    return [
        "",
        f"Perfect teachers (every agent votes every pool image's true label; a reference{when}): clean "
        f"sums {perfect['clean']:.3f}, noisy {', '.join(f'{a:.3f}' for a in perfect['noisy'])}, mean {mean:.3f} — "
        f"{'at or above' if mean >= perfect['bar'] else 'below'} the Bar's {perfect['bar']:.2f}"
        + (
            ": teachers right on every pool image do not reach it through the defaults' release and student."
            if mean < perfect["bar"]
            else "."
        ),
    ]


def measure_perfect_into(data_dir: str, record: dict[str, Any]) -> None:
    """``--part perfect``: the perfect teachers' row of each federation."""
    for part in record["parts"]:
        settings = FEDERATIONS[part["federation"]]
        part["perfect"] = perfect_row(prepared(settings, data_dir), BAR_ACCURACY[settings["dataset"]])


if __name__ == "__main__":
    if sys.argv[1:] == ["--part", "perfect"]:
        measure_part_into_saved(NAME, "perfect", measure_perfect_into, section)
    else:
        main_over_federations(NAME, measure, section)
