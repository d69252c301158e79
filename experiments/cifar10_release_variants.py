"""Issue 43: do other students, or sparser votes, get more out of CIFAR-10's noisy release?

``experiments/cifar10_ceiling.py`` shows the ridge student on every noisy vote sum (the
defaults) at 0.49–0.50 on the Bar's command, against 0.60 for the same student on the clean
sums: at agent ε 4 the noise, not the student's form, costs ten points. This script measures the
two escapes that look open, on that federation (seed 0), at the same agent ε:

1. **other students of the same release** (post-processing: no ε): the ridge regression on
   power-normalised features (each standardised patch feature shifted to its pool minimum, square
   root, standardised again: Perronnin et al.'s signed square root for pooled codes), and kernel
   ridge regression with an RBF kernel (bandwidth from the pool's median squared norm), λ of
   each by exact leave-one-out against the released sums, as fedvote's student;
2. **sparse votes**: each agent votes only on the m pool images its teacher is most confident on.
   An agent's release then has L2 norm √m instead of √Q, so the same agent-level ε (one Gaussian
   mechanism of μ = √m/σ_m, the dense release's μ = √Q/σ_Q) allows σ_m = σ_Q·√(m/Q);
3. **centred and soft votes**: each agent sends e_c − 1/C (its one-hot vote less the uniform one)
   or p − 1/C (its teacher's class probabilities less the uniform), of norm ≤ √(1 − 1/C) a query
   (‖p − 1/C‖² = ‖p‖² − 1/C ≤ 1 − 1/C), so at the agent level (zero-out) the same ε allows
   σ·√(1 − 1/C); the sums differ from the dense ones by a constant per query, which the student's
   bias absorbs. Not fedvote's release (its accounting takes sensitivity 1): a measured option;
4. **mirrored teachers**: each agent's logistic teacher also trained on the left-right mirrors of
   its own images (the standard CIFAR-10 flip; the release and σ unchanged, better votes). Since
   453107d the default φ is mirror-symmetric (φ(mirror x) = φ(x)), so on it this row only repeats
   every record; its figures in docs/results.md are from 41821f9, on the earlier φ.

Teachers: the defaults' logistic teachers trained by fedvote's batched trainer
(:func:`fedvote.models.ensemble.fit_ensemble`, the planner's teacher settings, seeds of this
script), their softmax on the pool giving votes and confidences. σ_Q from fedvote's planner
(Q = 3,000, agent ε 4, δ 1e-3). Each noisy row is the mean over ``DRAWS`` noise draws. Writes
``experiments/results/cifar10_release_variants.json`` and its section.

Usage (repository root)::

    FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/cifar10_release_variants.py
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

from cifar10_ceiling import COMMAND_SETTINGS, EPSILON, SEED  # noqa: E402  (the same federation and ε)
from run import machine, require_data_dir, save_results  # noqa: E402  (experiments/run.py)

from fedvote.data.federation import LabeledData  # noqa: E402
from fedvote.models.ensemble import fit_ensemble  # noqa: E402
from fedvote.models.vote_regression import RIDGE_GRID_EXPONENTS, fit_vote_regression  # noqa: E402
from fedvote.runner import make_federation, plan, prepare_public  # noqa: E402
from fedvote.settings import build_config  # noqa: E402

NAME = "cifar10_release_variants"
DRAWS = 3
SPARSE_VOTES = (300, 1_000)
BAR_ACCURACY = 0.60  # issue 43's bar for the CIFAR-10 command


def sparse_votes(probabilities: np.ndarray, per_agent: int) -> np.ndarray:
    """Vote sums (Q, C) when each agent votes one-hot on its ``per_agent`` most confident queries.

    ``probabilities`` (A, Q, C): every agent's teacher's class probabilities on the Q queries.
    """
    agents, queries, classes = probabilities.shape
    confidence = probabilities.max(axis=2)  # (A, Q)
    chosen = np.argsort(-confidence, axis=1, kind="stable")[:, :per_agent]  # (A, m)
    labels = np.take_along_axis(probabilities.argmax(axis=2), chosen, axis=1)  # (A, m)
    sums = np.zeros((queries, classes))
    np.add.at(sums, (chosen.reshape(-1), labels.reshape(-1)), 1.0)
    return sums


def sparse_sigma(dense_sigma: float, queries: int, per_agent: int) -> float:
    """σ_m with the dense release's μ: √m/σ_m = √Q/σ_Q (the same Gaussian mechanism, so the same ε)."""
    return dense_sigma * float(np.sqrt(per_agent / queries))


def centred_sigma(dense_sigma: float, classes: int) -> float:
    """σ of a centred vote's release with the dense release's μ: its norm a query is √(1 − 1/C), not 1."""
    return dense_sigma * float(np.sqrt(1.0 - 1.0 / classes))


def soft_votes(probabilities: np.ndarray) -> np.ndarray:
    """Sums (Q, C) of every agent's class probabilities: each agent's soft vote, (A, Q, C) summed."""
    return probabilities.sum(axis=0)


def with_mirrors(part: LabeledData) -> LabeledData:
    """``part`` followed by its images mirrored left to right (features (n, C, H, W): width flipped)."""
    images = np.asarray(part.features)
    labels = np.asarray(part.labels)
    return dataclasses.replace(
        part, features=np.concatenate([images, images[..., ::-1]]), labels=np.concatenate([labels, labels])
    )


def first_half(part: LabeledData) -> LabeledData:
    """The records of ``part`` before its mirrors (:func:`with_mirrors`' inverse on the mapped records)."""
    half = len(part) // 2
    return dataclasses.replace(part, features=part.features[:half], labels=np.asarray(part.labels)[:half])


def power_normalise(pool: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """√(x − the pool's minimum), standardised by the pool's mean and deviation: (pool, other) mapped."""
    low = pool.min(axis=0)

    def root(x: np.ndarray) -> np.ndarray:
        return np.sqrt(np.clip(x - low, 0.0, None))

    rooted = root(pool)
    mean, scale = rooted.mean(axis=0), rooted.std(axis=0) + 1e-6
    return (rooted - mean) / scale, (root(other) - mean) / scale


def ridge_accuracy(pool: np.ndarray, sums: np.ndarray, test: np.ndarray, test_labels: np.ndarray) -> float:
    """Test accuracy of fedvote's vote-regression student fitted to ``sums``."""
    fit = fit_vote_regression(pool, sums)
    return float(((test @ fit.weights + fit.bias).argmax(axis=1) == test_labels).mean())


def rbf_ridge_accuracy(pool: np.ndarray, sums: np.ndarray, test: np.ndarray, test_labels: np.ndarray) -> float:
    """Kernel ridge regression of the row-centred sums, RBF kernel, λ by exact leave-one-out."""

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        squared = (a**2).sum(1)[:, None] + (b**2).sum(1)[None, :] - 2.0 * a @ b.T
        return np.exp(-gamma * np.clip(squared, 0.0, None))

    gamma = 0.5 / float(np.median((pool**2).sum(axis=1)))
    targets = sums - sums.mean(axis=1, keepdims=True)
    centred = targets - targets.mean(axis=0)
    eigenvalues, vectors = np.linalg.eigh(kernel(pool, pool))
    eigenvalues = np.clip(eigenvalues, 0.0, None)
    projected = vectors.T @ centred
    best: tuple[float, float] | None = None
    for exponent in RIDGE_GRID_EXPONENTS:
        ridge = float(eigenvalues.mean()) * 10.0**exponent
        shrink = eigenvalues / (eigenvalues + ridge)
        leverage = (vectors**2) @ shrink
        residuals = (centred - vectors @ (shrink[:, None] * projected)) / (1.0 - leverage)[:, None]
        error = float(np.mean(residuals**2))
        if best is None or error < best[0]:
            best = (error, ridge)
    assert best is not None
    weights = vectors @ (projected / (eigenvalues + best[1])[:, None])
    return float(((kernel(test, pool) @ weights).argmax(axis=1) == test_labels).mean())


def main() -> None:
    data_dir = require_data_dir(f"experiments/{NAME}.py", holding="cifar10/")
    started = time.perf_counter()
    config = build_config("pate-fl", data_dir=data_dir, seed=SEED, epsilon=EPSILON, **COMMAND_SETTINGS)
    raw = make_federation(config)
    # φ fitted on the pool alone maps every agent's images and their mirrors in one pass; the
    # federation as the command sees it keeps each agent's first half (its own images).
    mapped = prepare_public(config, dataclasses.replace(raw, agents=tuple(map(with_mirrors, raw.agents))))
    federation = dataclasses.replace(mapped, agents=tuple(map(first_half, mapped.agents)))
    pool, test = federation.public.features, federation.test.features
    test_labels = np.asarray(federation.test.labels)
    planned = plan(config, federation.public_metadata())
    sigma, queries = float(planned.sigma), pool.shape[0]

    def pool_probabilities(agents: tuple[LabeledData, ...]) -> np.ndarray:
        """Every teacher's class probabilities on the pool, (A, Q, C); the planner's teachers."""
        ensemble = fit_ensemble(
            [agent.features for agent in agents],
            [np.asarray(agent.labels) for agent in agents],
            planned.teacher,
            [SEED * 1_000 + i for i in range(len(agents))],
            num_classes=federation.num_classes,
        )
        with torch.no_grad():
            return torch.softmax(ensemble.logits(pool), dim=-1).cpu().numpy()

    probabilities = pool_probabilities(federation.agents)  # (A, Q, C)
    dense = np.eye(federation.num_classes)[probabilities.argmax(axis=2)].sum(axis=0)  # (Q, C)
    power_pool, power_test = power_normalise(pool, test)
    rows: list[dict[str, Any]] = []

    def row(what: str, clean: np.ndarray, noise: float, student: Any, inputs: tuple[np.ndarray, np.ndarray]) -> None:
        clean_accuracy = student(inputs[0], clean, inputs[1], test_labels)
        noisy = [
            student(inputs[0], clean + np.random.default_rng([SEED, 43, draw]).normal(0.0, noise, clean.shape),
                    inputs[1], test_labels)
            for draw in range(DRAWS)
        ]  # fmt: skip
        rows.append({"what": what, "sigma": noise, "clean": clean_accuracy, "noisy": noisy})
        print(f"[{NAME}] {what}: clean {clean_accuracy:.4f}, noisy {np.round(noisy, 4)}", file=sys.stderr, flush=True)

    row("dense votes (the defaults' release), ridge student (the defaults')", dense, sigma, ridge_accuracy,
        (pool, test))  # fmt: skip
    row("dense votes, ridge on power-normalised features", dense, sigma, ridge_accuracy, (power_pool, power_test))
    row("dense votes, RBF kernel ridge", dense, sigma, rbf_ridge_accuracy, (pool, test))
    centred = centred_sigma(sigma, federation.num_classes)
    row("centred one-hot votes (σ·√(1 − 1/C)), ridge student", dense, centred, ridge_accuracy, (pool, test))
    row("soft votes (probabilities), ridge student", soft_votes(probabilities), sigma, ridge_accuracy,
        (pool, test))  # fmt: skip
    row("centred soft votes, ridge on power-normalised features", soft_votes(probabilities), centred,
        ridge_accuracy, (power_pool, power_test))  # fmt: skip
    mirrored = pool_probabilities(mapped.agents).argmax(axis=2)  # (A, Q)
    row("mirrored teachers (each agent's images and their mirrors), dense votes, ridge student",
        np.eye(federation.num_classes)[mirrored].sum(axis=0), sigma, ridge_accuracy, (pool, test))  # fmt: skip
    for per_agent in SPARSE_VOTES:
        row(f"sparse votes: each agent on its {per_agent:,} most confident of the {queries:,}, ridge student",
            sparse_votes(probabilities, per_agent), sparse_sigma(sigma, queries, per_agent), ridge_accuracy,
            (pool, test))  # fmt: skip
    record = {"name": NAME, "machine": machine(), "date": time.strftime("%Y-%m-%d"), "seed": SEED,
              "sigma_dense": sigma, "queries": queries, "draws": DRAWS, "rows": rows,
              "wall_seconds": time.perf_counter() - started}  # fmt: skip
    save_results(NAME, record, section(record))
    print(section(record))


def section(record: dict[str, Any]) -> str:
    """The markdown section: one row per student or release."""
    lines = [
        "## CIFAR-10 (JPEG copy): other students and sparser votes at agent ε 4 (issue 43's 0.60 bar)",
        "",
        f"Ran {record['date']} on {record['machine']}; {record['wall_seconds']:.0f} s wall.",
        "",
        f"Command: `FEDVOTE_DATA=../shared/datasets .venv/bin/python experiments/{NAME}.py`. The Bar's "
        "federation (100 agents, Dirichlet α = 0.5, seed 0) through the defaults' patch features; the "
        "defaults' logistic teachers (fedvote's batched trainer, this script's seeds). Dense: every "
        f"agent votes on all Q = {record['queries']:,} pool images, σ {record['sigma_dense']:.2f} from "
        "fedvote's planner (agent ε 4, δ 1e-3). Sparse: each agent votes only on its m most confident "
        "images, its release of L2 norm √m, so σ_m = σ·√(m/Q) gives the same Gaussian mechanism "
        "(μ = √Q/σ) and the same agent ε. Centred: each agent sends its vote less the uniform vote, "
        "of norm ≤ √(1 − 1/C) a query, so σ·√(1 − 1/C) gives the same agent ε (zero-out; not "
        "fedvote's accounting, which takes 1). Soft: the teachers' probabilities instead of one-hot "
        "votes (norm ≤ 1, the same σ). Mirrored: each agent's teacher also trained on the left-right "
        "mirrors of its own images (the release and σ unchanged). The students are post-processing (no ε); λ by exact "
        f"leave-one-out against the released sums. 'noisy' is the mean over {record['draws']} noise draws.",
        "",
        "| release and student | σ | test accuracy, clean sums | test accuracy, noisy (per draw) | mean |",
        "| --- | --- | --- | --- | --- |",
    ]
    for entry in record["rows"]:
        noisy = entry["noisy"]
        lines.append(
            f"| {entry['what']} | {entry['sigma']:.2f} | {entry['clean']:.3f} | "
            f"{', '.join(f'{a:.3f}' for a in noisy)} | {float(np.mean(noisy)):.3f} |"
        )
    means = {entry["what"]: float(np.mean(entry["noisy"])) for entry in record["rows"]}
    baseline_name, baseline = next(iter(means.items()))
    others = {what: mean for what, mean in means.items() if what != baseline_name}
    best_name, best = max(others.items(), key=lambda item: item[1])
    reaching = [what for what, mean in means.items() if mean >= BAR_ACCURACY]
    lines += [
        "",
        f"The defaults' release and student: {baseline:.3f}. The best other: {best:.3f} ({best_name}), "
        f"{100 * (best - baseline):+.1f} points. "
        + (f"Reaching {BAR_ACCURACY:.2f}: {', '.join(reaching)}." if reaching else
           f"None reaches {BAR_ACCURACY:.2f}: what the release carries at agent ε 4 is spent, whatever reads it; "
           "the bar needs better teachers or better public features."),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
