"""Issue 43: does a lower-sensitivity release of the same votes beat the dense one at the same agent ε?

PATE-FL's student is a ridge regression of the noisy vote sums on the public features φ
(:mod:`fedvote.models.vote_regression`), so it reads the release only through the span of φ's
principal directions on the pool. This script measures a release that sends only that part:
each agent sends its row-centred votes V_i − 1/C (Q, C) projected on U = [1/√Q, u_1 … u_k], the
constant and the pool's top k principal directions of φ (public: fitted on the pool), as the
(k + 1, C) coefficients Uᵀ(V_i − 1/C), scaled down to L2 norm c if longer. One agent then moves
the sum by at most c, so σ_c = σ·c/√Q keeps the dense release's Gaussian mechanism
(μ = √Q/σ, fedvote's dense accounting of sensitivity 1 a query) and so its agent-level ε. c is a
fixed share of the centred votes' largest norm √(Q(1 − 1/C)) (public); the projection loses
nothing the student uses once k covers φ's directions, and the clip pays off when the teachers'
votes spread over many directions (CIFAR-10) rather than few (Fashion-MNIST). The student of
each projected release is ridge regression in the principal coordinates with λ by Mallows' C_p
(σ_c is public; leave-one-out does not apply to noise that lives in the same k directions as
the fit); the dense release is read by the defaults' student and by the same C_p ridge.

Normalised rows scale every agent's coefficients to norm c exactly (c below every agent's norm:
all clipped); the student's read is then the same for every c (signal and σ_c scale together).
Every row is read twice: as fitted, and with its class shares on the pool matched to the
documented uniform prior (the defaults' student since e5c727f; post-processing). The last
column is each release's **instance-level** ε: one record may change its agent's votes
anywhere, so the dense release moves by at most √(2Q) (fedvote's dense instance accounting) and a
clipped one by at most min(2c, √(2Q)) (clipping is a projection on a ball: 1-Lipschitz), at σ_c.

Run on the two Bars' federations at seed 0 (CIFAR-10: 100 agents, Dirichlet α = 0.5, agent ε 4;
Fashion-MNIST: 100 agents, 6 classes each, agent ε 4.3), the defaults' φ and logistic teachers;
each noisy figure is the mean over ``DRAWS`` noise draws. Writes
``experiments/results/projected_votes.json`` and its section. A measurement, not fedvote's
release.

Usage (repository root)::

    FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/projected_votes.py  # every table
    FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/projected_votes.py --part pool  # larger pools only
    FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/projected_votes.py --part perfect  # perfect teachers
    .venv/bin/python experiments/projected_votes.py --render   # the section from the saved record
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bar_federations import (  # noqa: E402
    BAR_ACCURACY,
    FEDERATIONS,
    SEED,
    fit_teachers,
    main_over_federations,
    measure_part_into_saved,
    noisy_reads,
    part_ran,
    prepared,
)

from fedvote.models.vote_regression import fit_vote_regression, prior_matched_offsets  # noqa: E402
from fedvote.privacy.accountant import gaussian_epsilon  # noqa: E402

NAME = "projected_votes"
DIRECTIONS = (100, 200, 400)  # k
CLIP_SHARES = (0.5, 0.8)  # c² as a share of the centred votes' largest squared norm Q(1 − 1/C)
NORMALISED_SHARE = 0.05  # c² of the normalised rows (any c under every agent's norm reads the same)
DELTA = 1e-3  # the Bars' δ
MORE_SEEDS = (
    1,
    2,
)  # federations, teachers and noise draws at these seeds too: the defaults and one normalised k
SEEDS_DIRECTIONS = 200
# Larger public pools on CIFAR-10 (seed 0): the share of the test split that is the pool (the
# defaults: 0.3, the voting paper's MNIST split; 0.7 its split for Office-Caltech and DomainNet).
POOL_FRACTIONS = (0.5, 0.7)
DEFAULT_POOL_FRACTION = 0.3  # fedvote's public_fraction of the test split (runner.make_federation)
TEST_SPLIT = 10_000  # CIFAR-10's test split, which the pool and the test set share
RIDGE_EXPONENTS = np.arange(-4.0, 3.01, 0.25)  # λ = mean squared singular value × 10^e


def centred_votes(votes: np.ndarray, classes: int) -> np.ndarray:
    """Each agent's one-hot votes less the uniform vote: (A, Q) labels → (A, Q, C)."""
    return np.eye(classes)[votes] - 1.0 / classes


def projected_release(
    centred: np.ndarray, basis: np.ndarray, clip: float, *, normalise: bool = False
) -> np.ndarray:
    """Each agent's coefficients basisᵀ·V_i (A, K, C), scaled to L2 norm ``clip`` where longer (every one: ``normalise``)."""
    coefficients = np.einsum("qk,aqc->akc", basis, centred)  # (A, K, C)
    norms = np.maximum(np.sqrt((coefficients**2).sum(axis=(1, 2))), 1e-300)  # (A,)
    scale = clip / norms if normalise else np.minimum(1.0, clip / norms)
    return coefficients * scale[:, None, None]


def instance_epsilon(noise: float, queries: int, clip: float | None) -> float:
    """Instance-level ε at :data:`DELTA` of one release at ``noise``: one record moves it ≤ √(2Q), or ≤ min(2c, √(2Q)) clipped."""
    sensitivity = np.sqrt(2.0 * queries) if clip is None else min(2.0 * clip, np.sqrt(2.0 * queries))
    return gaussian_epsilon(sensitivity / noise, DELTA)


def clipped_sigma(dense_sigma: float, queries: int, clip: float) -> float:
    """σ_c of the projected release at the dense release's μ = √Q/σ (the same agent-level ε)."""
    return dense_sigma * clip / np.sqrt(queries)


def cp_ridge(singular: np.ndarray, coefficients: np.ndarray, noise: float) -> tuple[np.ndarray, float]:
    """Ridge coefficients in principal coordinates for released ``coefficients`` (k, C) of noise std ``noise``.

    The fit s_j²/(s_j² + λ) r_j of each released r_j; λ minimises Mallows' C_p,
    ‖r − fit‖² + 2·noise²·C·Σ_j s_j²/(s_j² + λ), an unbiased estimate of the error against the
    clean coefficients up to a constant. Returns (β (k, C) on the directions, λ).
    """
    squared = singular**2
    best: tuple[float, float] | None = None
    for exponent in RIDGE_EXPONENTS:
        ridge = float(squared.mean()) * 10.0**exponent
        shrink = squared / (squared + ridge)  # (k,)
        risk = float((((1.0 - shrink)[:, None] * coefficients) ** 2).sum())
        risk += 2.0 * noise**2 * coefficients.shape[1] * float(shrink.sum())
        if best is None or risk < best[0]:
            best = (risk, ridge)
    assert best is not None
    ridge = best[1]
    return (singular / (squared + ridge))[:, None] * coefficients, ridge


def measure(label: str, settings: dict[str, Any], data_dir: str) -> dict[str, Any]:
    """Every row for one federation at :data:`SEED`, then the defaults' and the normalised release at :data:`MORE_SEEDS`."""
    started = time.perf_counter()
    rows, sigma, queries = rows_at(label, settings, data_dir, SEED, DIRECTIONS, CLIP_SHARES)
    seeds = {
        seed: rows_at(label, settings, data_dir, seed, (SEEDS_DIRECTIONS,), ())[0] for seed in MORE_SEEDS
    }
    return {"federation": label, "sigma_dense": sigma, "queries": queries, "rows": rows,
            "seeds": {str(seed): seed_rows for seed, seed_rows in seeds.items()},
            "wall_seconds": time.perf_counter() - started}  # fmt: skip


def pool_rows(data_dir: str) -> list[dict[str, Any]]:
    """CIFAR-10's dense and normalised (k = :data:`SEEDS_DIRECTIONS`) rows at seed 0 for each of :data:`POOL_FRACTIONS`.

    Every pool image is a query (Q = the pool), σ planned for that Q; the test set is the rest
    of the test split, so it shrinks as the pool grows.
    """
    label, settings = next((label, s) for label, s in FEDERATIONS.items() if s["dataset"] == "cifar10")
    parts = []
    for fraction in POOL_FRACTIONS:
        pool = round(fraction * TEST_SPLIT)
        started = time.perf_counter()
        grown = {**settings, "public_fraction": fraction, "queries": pool}
        rows, sigma, queries = rows_at(label, grown, data_dir, SEED, (SEEDS_DIRECTIONS,), ())
        parts.append({"public_fraction": fraction, "queries": queries, "sigma_dense": sigma,
                      "test_size": TEST_SPLIT - pool, "rows": rows,
                      "wall_seconds": time.perf_counter() - started})  # fmt: skip
    return parts


def rows_at(
    label: str,
    settings: dict[str, Any],
    data_dir: str,
    seed: int,
    directions: tuple[int, ...],
    clip_shares: tuple[float, ...],
    *,
    perfect: bool = False,
) -> tuple[list[dict[str, Any]], float, int]:
    """The rows of one federation at ``seed``: the dense release, then each k's clipped and normalised ones.

    ``perfect``: every agent votes every pool image's true label instead of its teacher's (a
    reference for what any teachers right on the whole pool could give the release).
    """
    bar = prepared(settings, data_dir, seed)
    federation, sigma, classes = bar.federation, bar.sigma, bar.federation.num_classes
    pool, test, test_labels = bar.pool, bar.test, bar.test_labels
    queries = pool.shape[0]
    if perfect:
        truth = np.asarray(federation.public.labels)
        votes = np.broadcast_to(truth, (federation.num_agents, queries))  # (A, Q)
    else:
        with torch.no_grad():
            votes = fit_teachers(bar).logits(federation.public.features).argmax(-1).cpu().numpy()  # (A, Q)
    centred = centred_votes(votes, classes)  # (A, Q, C)
    mean = pool.mean(axis=0)
    left, singular, right_t = np.linalg.svd(pool - mean, full_matrices=False)  # (Q, r), (r,), (r, d)

    prior = np.full(classes, 1.0 / classes)  # both datasets document equal class counts

    def accuracy(weights: np.ndarray, bias: np.ndarray, matched: bool) -> float:
        if matched:
            bias = bias + prior_matched_offsets(pool @ weights + bias, prior)
        return float(((test @ weights + bias).argmax(axis=1) == test_labels).mean())

    def projected_accuracy(released: np.ndarray, k: int, noise: float, matched: bool) -> float:
        beta, _ = cp_ridge(singular[:k], released[1:], noise)  # (k, C)
        weights = right_t[:k].T @ beta  # (d, C)
        return accuracy(weights, released[0] / np.sqrt(queries) - mean @ weights, matched)

    def row(
        release: str,
        student: str,
        noise: float,
        clip: float | None,
        clipped: float,
        sums: np.ndarray,
        read: Callable[[np.ndarray, bool], float],
    ) -> dict[str, Any]:
        return {"release": release, "student": student, "sigma": noise, "clipped": clipped,
                "clean": read(sums, False), "noisy": noisy_reads(sums, noise, lambda s: read(s, False), seed),
                "matched": noisy_reads(sums, noise, lambda s: read(s, True), seed),
                "instance_epsilon": instance_epsilon(noise, queries, clip)}  # fmt: skip

    rows: list[dict[str, Any]] = []
    dense = centred.sum(axis=0)  # (Q, C)
    full = np.concatenate([np.full((queries, 1), 1.0 / np.sqrt(queries)), left], axis=1)  # (Q, r + 1)

    def loo(sums: np.ndarray, matched: bool) -> float:
        fit = fit_vote_regression(pool, sums)
        return accuracy(fit.weights, fit.bias, matched)

    def dense_cp(sums: np.ndarray, matched: bool) -> float:
        return projected_accuracy(full.T @ sums, len(singular), sigma, matched)

    rows.append(row("dense votes (the defaults')", "ridge, λ by leave-one-out (the defaults')", sigma, None, 0.0,
                    dense, loo))  # fmt: skip
    if clip_shares:  # the full table
        rows.append(row("dense votes (the defaults')", "ridge, λ by C_p", sigma, None, 0.0, dense, dense_cp))
    largest = np.sqrt(queries * (1.0 - 1.0 / classes))
    for k in directions:
        basis = full[:, : k + 1]  # (Q, k + 1)
        norms = np.sqrt((np.einsum("qk,aqc->akc", basis, centred) ** 2).sum(axis=(1, 2)))  # (A,)
        for share, normalise in [(share, False) for share in clip_shares] + [(NORMALISED_SHARE, True)]:
            clip = float(np.sqrt(share) * largest)
            total = projected_release(centred, basis, clip, normalise=normalise).sum(axis=0)  # (k + 1, C)
            noise = clipped_sigma(sigma, queries, clip)

            def read(coefficients: np.ndarray, matched: bool, k: int = k, noise: float = noise) -> float:
                return projected_accuracy(coefficients, k, noise, matched)

            release = (f"projected on k = {k} directions, every agent normalised" if normalise
                       else f"projected on k = {k} directions, c² = {share:g}·Q(1 − 1/C)")  # fmt: skip
            clipped = 1.0 if normalise else float(np.mean(norms > clip))
            rows.append(row(release, "ridge, λ by C_p", noise, clip, clipped, total, read))
            print(f"[{NAME}] {label}, seed {seed}: {release}: {np.round(rows[-1]['noisy'], 4)} "
                  f"{np.round(rows[-1]['matched'], 4)}", file=sys.stderr, flush=True)  # fmt: skip
    return rows, sigma, queries


def section(record: dict[str, Any]) -> str:
    """The markdown section: one table per federation, and what it says."""
    lines = [
        "## Projected votes: the same votes at lower sensitivity (issue 43; measured, not fedvote's release)",
        "",
        f"Ran {record['date']} on {record['machine']}; {record['wall_seconds']:.0f} s wall.",
        "",
        f"Command: `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/{NAME}.py`. Each Bar's "
        "federation at seed 0 (and at seeds 1 and 2 for the seeds table), the defaults' patch features and logistic teachers. Dense: the defaults' "
        "release (every agent's one-hot vote on all Q pool images, σ from fedvote's planner). Projected: each "
        "agent sends its row-centred votes' coefficients on the constant and the pool's top k principal "
        "directions of φ (public), scaled to L2 norm c where longer, with c² a fixed share of the largest "
        "possible Q(1 − 1/C); σ_c = σ·c/√Q keeps the dense release's Gaussian mechanism and agent ε. "
        "Normalised: every agent's coefficients scaled to norm c (then any c reads the same). "
        "Clipped: the share of agents whose coefficients were longer than c. Students are post-processing; "
        "a C_p student picks λ for its release's σ, so its 'clean' figure is the clean sums read with that "
        f"λ (not the best λ for clean sums). 'noisy' is the mean over {record['draws']} noise draws (the "
        "same draws in every row of a table); 'prior-matched' reads the same draws with the student's class "
        "shares on the pool matched to the documented uniform prior, as the defaults' student does since "
        "e5c727f. Instance ε (δ 1e-3): one record may change all its agent's votes, which moves the dense "
        "release by at most √(2Q) and a clipped one by at most min(2c, √(2Q)).",
    ]
    for part in record["parts"]:
        lines += [
            "",
            f"**{part['federation']}** (Q = {part['queries']:,}, dense σ {part['sigma_dense']:.2f}; "
            f"{part['wall_seconds']:.0f} s)",
            "",
            "| release | student | σ | agents clipped | test accuracy, clean | noisy (per draw) | mean "
            "| prior-matched (per draw) | mean | instance ε |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for row in part["rows"]:
            noisy, matched = row["noisy"], row["matched"]
            lines.append(
                f"| {row['release']} | {row['student']} | {row['sigma']:.2f} | {row['clipped']:.2f} | "
                f"{row['clean']:.3f} | {', '.join(f'{a:.3f}' for a in noisy)} | {float(np.mean(noisy)):.3f} | "
                f"{', '.join(f'{a:.3f}' for a in matched)} | {float(np.mean(matched)):.3f} | "
                f"{row['instance_epsilon']:.2f} |"
            )
        means = [float(np.mean(row["matched"])) for row in part["rows"]]
        best = int(np.argmax(means[2:])) + 2
        lines += [
            "",
            f"Best projected release, prior-matched: {means[best]:.3f} ({part['rows'][best]['release']}, "
            f"instance ε {part['rows'][best]['instance_epsilon']:.2f}) against the defaults' {means[0]:.3f} "
            f"(instance ε {part['rows'][0]['instance_epsilon']:.2f}; {100 * (means[best] - means[0]):+.1f} points).",
        ]
        lines += seeds_table(part)
        lines += pool_table(part, record.get("pools", []), part_ran(record, "pool"))
    lines += perfect_table(record.get("perfect", []), part_ran(record, "perfect"))
    lines += [
        "",
        "The clip pays where the teachers' votes spread over many of φ's directions (CIFAR-10: an agent's "
        "coefficients on 200 directions hold about half its votes' squared norm) and buys little where "
        "they sit in few (Fashion-MNIST's six-class agents: every agent is clipped at c² = 0.5, and its "
        "σ saving is spent on the clipped signal). Clipping every agent (normalising) reads as well as "
        "the best partial clip: a clip scales an agent's vote, it does not turn it. The agent-level gain "
        "is paid at the instance level: a normalised contribution can flip to its opposite (2c) where a "
        "dense vote moves by at most √(2Q), so the same σ_c proves a larger instance ε. Not fedvote's "
        "release: adopting it means a new release on every path that sends votes (Flower's SecAgg+ of "
        "real coefficients, the audit, individual budgets, vote sampling), its own tests, and a weaker "
        "instance-level guarantee. On CIFAR-10 it would put voting above DP-FedAvg at equal agent ε on "
        "every seed above (DP-FedAvg's figure is one run at its own noise seed, the voting figures means "
        "over three draws; DP-FedAvg's instance ε is 8.33), and still under the Bar's 0.60.",
    ]
    return "\n".join(lines)


def rows_by_seed(part: dict[str, Any]) -> dict[int, tuple[dict[str, Any], dict[str, Any]]]:
    """A saved part's (dense defaults' row, normalised k = :data:`SEEDS_DIRECTIONS` row) at every seed it ran."""
    normalised = f"projected on k = {SEEDS_DIRECTIONS} directions, every agent normalised"
    by_seed = {SEED: part["rows"], **{int(seed): rows for seed, rows in part.get("seeds", {}).items()}}
    return {seed: (rows[0], next(row for row in rows if row["release"] == normalised))
            for seed, rows in by_seed.items()}  # fmt: skip


def seeds_table(part: dict[str, Any]) -> list[str]:
    """The defaults' and the normalised release, prior-matched, at every seed (and DP-FedAvg's runs on CIFAR-10)."""
    if not part.get("seeds"):
        return []
    by_seed = rows_by_seed(part)
    gradient = dp_fedavg_runs() if part["federation"].startswith("CIFAR-10") else {}
    lines = [
        "",
        f"At seeds {', '.join(map(str, sorted(by_seed)))} (each seed its own federation, teachers and noise "
        "draws; prior-matched means over the draws"
        + ("; DP-FedAvg: `fedvote run --method dp-fedavg` on the same command and seed, docs/results.md 3c"
           if gradient else "") + "):",
        "",
        "| seed | dense votes (the defaults') | normalised on k = "
        f"{SEEDS_DIRECTIONS} directions | difference |" + (" DP-FedAvg |" if gradient else ""),
        "| --- | --- | --- | --- |" + (" --- |" if gradient else ""),
    ]  # fmt: skip
    dense_means, normalised_means = [], []
    for seed, (dense_row, normalised_row) in sorted(by_seed.items()):
        dense, projected = float(np.mean(dense_row["matched"])), float(np.mean(normalised_row["matched"]))
        dense_means.append(dense)
        normalised_means.append(projected)
        extra = f" {gradient[seed]:.3f} |" if seed in gradient else (" — |" if gradient else "")
        lines.append(
            f"| {seed} | {dense:.3f} | {projected:.3f} | {100 * (projected - dense):+.1f} points |{extra}"
        )
    extra = f" {np.mean(list(gradient.values())):.3f} |" if gradient else ""
    lines.append(f"| mean | {np.mean(dense_means):.3f} | {np.mean(normalised_means):.3f} | "
                 f"{100 * (np.mean(normalised_means) - np.mean(dense_means)):+.1f} points |{extra}")  # fmt: skip
    return lines


def pool_table(part: dict[str, Any], pools: list[dict[str, Any]], ran: str = "") -> list[str]:
    """CIFAR-10's defaults and normalised release, prior-matched, as the public pool grows (seed 0)."""
    if not pools or not part["federation"].startswith("CIFAR-10"):
        return []

    def matched(row: dict[str, Any]) -> float:
        return float(np.mean(row["matched"]))

    default = (
        DEFAULT_POOL_FRACTION,
        part["queries"],
        TEST_SPLIT - part["queries"],
        *rows_by_seed(part)[SEED],
    )
    grown = [
        (pool["public_fraction"], pool["queries"], pool["test_size"], *pool["rows"][:2]) for pool in pools
    ]
    lines = [
        "",
        f"Larger public pools (seed 0; {ran or '`--part pool`'}): the pool is a larger share of the test split and "
        "every pool image a query (σ planned for that Q), the test set the rest of the split; the "
        f"defaults take {DEFAULT_POOL_FRACTION:g} (the voting paper's MNIST split), the voting paper takes "
        "0.7 for its natural-image datasets (Office-Caltech, DomainNet):",
        "",
        f"| pool share | Q | test images | dense σ | dense votes (the defaults' release) | normalised on "
        f"k = {SEEDS_DIRECTIONS} directions | instance ε, dense / normalised |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for fraction, queries, test, dense, normalised in [default, *grown]:
        lines.append(
            f"| {fraction:g}{' (the defaults)' if fraction == DEFAULT_POOL_FRACTION else ''} | {queries:,} "
            f"| {test:,} | {dense['sigma']:.2f} | {matched(dense):.3f} | {matched(normalised):.3f} "
            f"| {dense['instance_epsilon']:.2f} / {normalised['instance_epsilon']:.2f} |"
        )
    best = max([default, *grown], key=lambda row: matched(row[4]))
    largest = grown[-1]
    lines += [
        "",
        f"The best: {matched(best[4]):.3f} (normalised, pool share {best[0]:g}), "
        f"{'at or above' if matched(best[4]) >= 0.60 else 'still under'} the Bar's 0.60. From the defaults' "
        f"pool to the largest, the dense release moves {100 * (matched(largest[3]) - matched(default[3])):+.1f} "
        "points (its σ grows as √Q, and its read of more images gains no more than that costs), the "
        f"normalised one {100 * (matched(largest[4]) - matched(default[4])):+.1f}.",
    ]
    return lines


def dp_fedavg_runs() -> dict[int, float]:
    """DP-FedAvg's test accuracy by seed on CIFAR-10's Bar command, from ``cifar10_voting``'s record (if saved)."""
    path = HERE / "results" / "cifar10_voting.json"
    if not path.exists():
        return {}
    runs = json.loads(path.read_text())["runs"]
    return {int(run["seed"]): float(run["accuracy"]) for run in runs if run["method"] == "dp-fedavg"}


def perfect_rows(data_dir: str) -> list[dict[str, Any]]:
    """Each Bar's dense and normalised (k = :data:`SEEDS_DIRECTIONS`) rows at seed 0 with perfect teachers."""
    return [{"federation": label,
             "rows": rows_at(label, settings, data_dir, SEED, (SEEDS_DIRECTIONS,), (), perfect=True)[0]}
            for label, settings in FEDERATIONS.items()]  # fmt: skip


def perfect_table(perfects: list[dict[str, Any]], ran: str = "") -> list[str]:
    """What teachers right on every pool image would give the dense and the normalised release, against each Bar."""
    if not perfects:
        return []
    lines = [
        "",
        f"**Perfect teachers** (seed 0; {ran or '`--part perfect`'}): every agent votes every pool image's true label "
        "(read for this reference only), the same releases, σ and students, prior-matched means over the draws:",
        "",
        f"| federation | dense votes (the defaults' release) | normalised on k = {SEEDS_DIRECTIONS} directions "
        "| the Bar |",
        "| --- | --- | --- | --- |",
    ]
    reached: dict[str, list[str]] = {"dense": [], "normalised": []}
    for perfect in perfects:
        dense, normalised = (float(np.mean(row["matched"])) for row in perfect["rows"][:2])
        bar = BAR_ACCURACY[FEDERATIONS[perfect["federation"]]["dataset"]]
        lines.append(f"| {perfect['federation']} | {dense:.3f} | {normalised:.3f} | {bar:.2f} |")
        name = perfect["federation"].split(" (")[0].split(",")[0]
        reached["dense"] += [name] if dense >= bar else []
        reached["normalised"] += [name] if normalised >= bar else []
    lines += [
        "",
        "Teachers right on every pool image reach the Bar through the defaults' release on "
        f"{' and '.join(reached['dense']) or 'neither command'}, through the normalised one on "
        f"{' and '.join(reached['normalised']) or 'neither command'}. Where even they fall short, what holds "
        "the student is what the pool's images teach a linear read of φ, not how often the teachers are right.",
    ]
    return lines


def measure_pools_into(data_dir: str, record: dict[str, Any]) -> None:
    """``--part pool``: the larger pools' rows."""
    record["pools"] = pool_rows(data_dir)


def measure_perfect_into(data_dir: str, record: dict[str, Any]) -> None:
    """``--part perfect``: the perfect teachers' rows."""
    record["perfect"] = perfect_rows(data_dir)


PARTS = {"pool": measure_pools_into, "perfect": measure_perfect_into}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--part"] and len(sys.argv) == 3 and sys.argv[2] in PARTS:
        measure_part_into_saved(NAME, sys.argv[2], PARTS[sys.argv[2]], section)
    else:
        main_over_federations(NAME, measure, section)
        if (
            "--render" not in sys.argv[1:]
        ):  # a full run measures the larger pools and the perfect teachers too
            for part, measure_into in PARTS.items():
                measure_part_into_saved(NAME, part, measure_into, section)
