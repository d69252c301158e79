"""The class head's tight sensitivity 2√2/(λ·n), by brute force on the code's own solver and features.

``docs/privacy.md`` (FedAUXfdp) proves that the C-class head's optimum moves by at most
2√2/(λ·n) when one record is replaced: the per-record gradient (p − e_y)·h̃ᵀ has norm
≤ √2·‖h̃‖ ≤ √2 and J is λ-strongly convex (Chaudhuri et al. 2011's argument). The paper's
Theorem 1 gives 2√C/(λ·n), √(C/2)× larger. Here: the gradient bound itself, every
replace-one neighbour of small random datasets solved with :func:`fit_multinomial_head`,
a neighbour pair that moves *beyond* 2/(λ·n) (so the √2 cannot be dropped), and the
scoring head's 2/(λ·(n + |D⁻|)) on the scoring head's own construction.

Solver tolerance. L-BFGS-B stops when the largest gradient component is ≤ gtol or when J
stops decreasing in float64, so the returned β̂ is certified a posteriori: J is λ-strongly
convex with ∇J(β*) = 0, hence ‖β̂ − β*‖ ≤ ‖∇J(β̂)‖₂/λ. Each comparison allows that
slack for both solves (and checks it is negligible).
"""

import math

import numpy as np
import pytest

from fedvote.models.features import fit_feature_extractor
from fedvote.models.logistic_heads import (
    HeadFeatures,
    binary_objective,
    class_head_sensitivity,
    fit_binary_head,
    fit_multinomial_head,
    multinomial_objective,
    score_head_sensitivity,
)

ROOT2 = math.sqrt(2.0)


def head_features(dim: int) -> HeadFeatures:
    """The code's h̃ = [0.5, r·clip₁(v)] on raw d-vectors (identity h₀, centre 0, scale 1)."""
    extractor = fit_feature_extractor("identity", np.zeros((2, dim), dtype=np.float32))
    return HeadFeatures(extractor=extractor, center=np.zeros(dim), scale=1.0)


def random_records(rng: np.random.Generator, features: HeadFeatures, n: int) -> np.ndarray:
    """h̃ of n random embeddings, some inside the unit ball and some clipped onto it, (n, d + 1)."""
    return features.from_embedding(rng.normal(scale=0.8, size=(n, features.extractor.dim)))


def certified_slack(beta: np.ndarray, x: np.ndarray, y: np.ndarray, lam: float) -> float:
    """‖β̂ − β*‖ ≤ ‖∇J(β̂)‖₂/λ (λ-strong convexity): how far the solver may be from the optimum."""
    _, gradient = multinomial_objective(beta, x, y, lam)
    return float(np.linalg.norm(gradient)) / lam


def test_per_record_gradient_has_norm_at_most_root2_and_comes_close():
    rng = np.random.default_rng(0)
    features = head_features(4)
    worst = 0.0
    for _ in range(300):
        classes = int(rng.integers(2, 11))
        beta = rng.normal(scale=10.0, size=(classes, 5))  # confident, often wrong, predictions
        x = random_records(rng, features, 1)
        assert np.linalg.norm(x) <= 1.0 + 1e-12  # the bias coordinate is inside the unit norm
        for label in range(classes):
            _, gradient = multinomial_objective(beta, x, np.array([label]), 0.0)  # ∇ℓ = (p − e_y)·h̃ᵀ
            worst = max(worst, float(np.linalg.norm(gradient)))
    assert worst <= ROOT2 * (1 + 1e-12)
    assert worst > 0.99 * ROOT2  # √2, not √C: confident wrong predictions reach it


@pytest.mark.parametrize(
    ("seed", "n", "classes", "lam"),
    [(0, 5, 3, 0.1), (1, 3, 10, 1.0)],
)
def test_class_head_moves_at_most_2_root2_over_lambda_n_under_replace_one(seed, n, classes, lam):
    rng = np.random.default_rng(seed)
    features = head_features(3)
    x = random_records(rng, features, n)
    y = rng.integers(0, classes, n)
    base = fit_multinomial_head(x, y, num_classes=classes, regularization=lam)
    base_slack = certified_slack(base, x, y, lam)
    bound = class_head_sensitivity(classes, lam, n, "tight")
    assert bound == pytest.approx(2 * ROOT2 / (lam * n))
    unit = rng.normal(size=(2, 3))
    candidates = features.from_embedding(np.vstack([unit / np.linalg.norm(unit, axis=1, keepdims=True), -x[:, 1:]]))
    worst = 0.0
    for i in range(n):  # every record replaced ...
        for candidate in candidates:  # ... by every candidate point (unit sphere, mirrored records) ...
            for label in range(classes):  # ... with every label
                x2, y2 = x.copy(), y.copy()
                x2[i], y2[i] = candidate, label
                other = fit_multinomial_head(x2, y2, num_classes=classes, regularization=lam)
                slack = base_slack + certified_slack(other, x2, y2, lam)
                assert slack < 1e-6 * bound  # the solver is close enough for the check to mean something
                distance = float(np.linalg.norm(other - base))
                assert distance <= bound + slack
                worst = max(worst, distance)
    assert worst > 0.05 * bound  # neighbours do move: the check is not vacuous


@pytest.mark.parametrize("classes", [2, 10])
def test_the_root2_is_needed_a_neighbour_pair_moves_beyond_2_over_lambda_n(classes):
    # n − 1 records at h̃ = (0.5, 0), all class 0: the bias weight alone predicts class 0
    # confidently everywhere. The replaced record (class 1, predicted wrongly) sits at
    # (0.5, +r·e₁) or (0.5, −r·e₁): p − e_y ≈ e₀ − e₁ (norm √2) at both, and only the
    # record itself curves J along e₁, so β moves by ≈ r·2√2/(λ·n), r = √0.75 ≈ 0.87.
    n, lam = 2000, 1e-3
    features = head_features(2)
    embedded = np.zeros((n, 2))
    embedded[-1, 0] = 1.0
    x = features.from_embedding(embedded)
    x_mirror = features.from_embedding(-embedded)
    y = np.zeros(n, dtype=np.int64)
    y[-1] = 1
    beta = fit_multinomial_head(x, y, num_classes=classes, regularization=lam)
    mirror = fit_multinomial_head(x_mirror, y, num_classes=classes, regularization=lam)
    slack = certified_slack(beta, x, y, lam) + certified_slack(mirror, x_mirror, y, lam)
    distance = float(np.linalg.norm(beta - mirror))
    tight = class_head_sensitivity(classes, lam, n, "tight")
    assert distance <= tight + slack
    assert distance - slack > 1.15 * 2 / (lam * n)  # a bound of 2/(λ·n) would be broken
    assert distance > 0.8 * tight  # within 1.25× of the tight bound; the paper's is √(C/2)× larger


@pytest.mark.parametrize(("seed", "n", "negatives", "lam"), [(5, 5, 6, 0.1), (6, 4, 3, 0.02)])
def test_score_head_moves_at_most_2_over_lambda_times_n_plus_negatives(seed, n, negatives, lam):
    # the scoring head's construction: own records (label 1) against public negatives (label 0);
    # only an own record is replaced. Per-record gradient (σ(βᵀh̃) − y)·h̃, norm ≤ 1.
    rng = np.random.default_rng(seed)
    features = head_features(3)
    x = np.vstack([random_records(rng, features, n), random_records(rng, features, negatives)])
    y = np.concatenate([np.ones(n), np.zeros(negatives)])
    base = fit_binary_head(x, y, regularization=lam)
    bound = score_head_sensitivity(lam, n + negatives)
    assert bound == pytest.approx(2 / (lam * (n + negatives)))
    unit = rng.normal(size=(4, 3))
    candidates = features.from_embedding(np.vstack([unit / np.linalg.norm(unit, axis=1, keepdims=True), -x[:, 1:]]))
    worst = 0.0
    for i in range(n):
        for candidate in candidates:
            x2 = x.copy()
            x2[i] = candidate
            other = fit_binary_head(x2, y, regularization=lam)
            slack = sum(
                float(np.linalg.norm(binary_objective(b, xs, y, lam)[1])) / lam
                for b, xs in ((base, x), (other, x2))
            )
            distance = float(np.linalg.norm(other - base))
            assert distance <= bound + slack
            worst = max(worst, distance)
    assert worst > 0.05 * bound


def test_tight_and_paper_bounds_agree_at_two_classes_and_differ_by_root_c_over_2():
    assert class_head_sensitivity(2, 0.01, 100, "tight") == pytest.approx(class_head_sensitivity(2, 0.01, 100, "paper"))
    ratio = class_head_sensitivity(10, 0.01, 100, "paper") / class_head_sensitivity(10, 0.01, 100, "tight")
    assert ratio == pytest.approx(math.sqrt(5))  # 2.24× less noise at C = 10
