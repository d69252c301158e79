"""Theorem 1 of fedaux-fdp.txt by brute force: the regularised optima of replace-one neighbours.

For small random datasets with ‖x‖ ≤ 1, every neighbour obtained by replacing one record
with a candidate record (each of a set of unit-norm points, with every label) is solved to
high precision; the distance between the optima never exceeds 2√C/(λ·n) (multinomial) or
2/(λ·n) (one binary head). The solver is also checked against the paper's stationarity
condition and against scikit-learn with C = 1/(λ·n).
"""

import math

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from fedvote.models.logistic_heads import (
    binary_objective,
    fit_binary_head,
    fit_multinomial_head,
    head_norm_bound,
    multinomial_objective,
)
from fedvote.privacy.calibrate import binary_logistic_sensitivity, multinomial_logistic_sensitivity


def ball_points(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.normal(size=(n, d))
    return x / np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))  # ‖x‖ ≤ 1


def sphere_points(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.normal(size=(n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)  # ‖x‖ = 1, the worst case of the proof


@pytest.mark.parametrize(("seed", "n", "classes", "lam"), [(0, 6, 3, 0.1), (1, 8, 2, 0.05), (2, 5, 4, 0.5)])
def test_multinomial_replace_one_distance_never_exceeds_theorem_1(seed, n, classes, lam):
    rng = np.random.default_rng(seed)
    d = 3
    x = ball_points(rng, n, d)
    y = rng.integers(0, classes, n)
    base = fit_multinomial_head(x, y, num_classes=classes, regularization=lam)
    bound = multinomial_logistic_sensitivity(classes, lam, n)
    candidates = sphere_points(rng, 4, d)
    worst = 0.0
    for i in range(n):  # every record replaced ...
        for candidate in candidates:  # ... by every candidate point ...
            for label in range(classes):  # ... with every label
                x2, y2 = x.copy(), y.copy()
                x2[i], y2[i] = candidate, label
                other = fit_multinomial_head(x2, y2, num_classes=classes, regularization=lam)
                worst = max(worst, float(np.linalg.norm(other - base)))
    assert 0 < worst <= bound


@pytest.mark.parametrize(("seed", "n", "lam"), [(3, 6, 0.1), (4, 10, 0.02)])
def test_binary_replace_one_distance_never_exceeds_2_over_lambda_n(seed, n, lam):
    rng = np.random.default_rng(seed)
    d = 3
    x = ball_points(rng, n, d)
    y = rng.integers(0, 2, n)
    base = fit_binary_head(x, y, regularization=lam)
    bound = binary_logistic_sensitivity(lam, n)
    worst = 0.0
    for i in range(n):
        for candidate in sphere_points(rng, 4, d):
            for label in (0, 1):
                x2, y2 = x.copy(), y.copy()
                x2[i], y2[i] = candidate, label
                worst = max(worst, float(np.linalg.norm(fit_binary_head(x2, y2, regularization=lam) - base)))
    assert 0 < worst <= bound


def test_the_optimum_satisfies_the_papers_stationarity_condition():
    rng = np.random.default_rng(5)
    x = ball_points(rng, 300, 6)
    y = rng.integers(0, 4, 300)
    y[y == 3] = 2  # class 3 absent: its row must still be the optimum's
    lam = 0.01
    beta = fit_multinomial_head(x, y, num_classes=4, regularization=lam)
    _, gradient = multinomial_objective(beta, x, y, lam)  # (1/n) (P − Y)ᵀ X + λβ
    assert np.abs(gradient).max() < 1e-8
    labels = rng.integers(0, 2, 300)
    head = fit_binary_head(x, labels, regularization=lam)
    _, gradient = binary_objective(head, x, labels, lam)
    assert np.abs(gradient).max() < 1e-8


def test_lambda_reaches_the_solver_as_scikit_learns_c_equals_one_over_lambda_n():
    rng = np.random.default_rng(6)
    n, lam = 400, 0.03
    x = ball_points(rng, n, 5)
    y = rng.integers(0, 3, n)
    ours = fit_multinomial_head(x, y, num_classes=3, regularization=lam)
    sklearn = LogisticRegression(C=1.0 / (lam * n), fit_intercept=False, tol=1e-12, max_iter=10_000).fit(x, y)
    np.testing.assert_allclose(ours, sklearn.coef_, atol=1e-5)
    # C = 1/λ instead solves the objective with λ/n: not a stationary point of the paper's J
    wrong = LogisticRegression(C=1.0 / lam, fit_intercept=False, tol=1e-12, max_iter=10_000).fit(x, y)
    _, gradient = multinomial_objective(wrong.coef_, x, y, lam)
    assert np.linalg.norm(gradient) > 1e-3


def test_the_optimum_lies_in_the_data_free_norm_ball():
    rng = np.random.default_rng(7)
    for lam in (0.01, 0.1, 1.0):
        x = sphere_points(rng, 50, 4)
        y = rng.integers(0, 5, 50)
        beta = fit_multinomial_head(x, y, num_classes=5, regularization=lam)
        assert np.linalg.norm(beta) <= head_norm_bound(5, lam)
        assert head_norm_bound(5, lam) == pytest.approx(math.sqrt(2 * math.log(5) / lam))
