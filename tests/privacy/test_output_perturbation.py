"""Output perturbation for FedAUXfdp: sensitivity of regularised logistic regression and
single-release Gaussian calibration."""

import math

import numpy as np
import pytest
from dp_accounting import dp_event, pld
from sklearn.linear_model import LogisticRegression

from fedvote.errors import ConfigError
from fedvote.privacy.calibrate import (
    analytic_gaussian_sigma,
    binary_logistic_sensitivity,
    classic_gaussian_sigma,
    multinomial_logistic_sensitivity,
)


def test_sensitivity_formulas_of_theorem_1():
    assert multinomial_logistic_sensitivity(10, 0.01, 500) == pytest.approx(2 * math.sqrt(10) / (0.01 * 500))
    assert binary_logistic_sensitivity(0.01, 500) == pytest.approx(2 / 5)


def fit_paper_objective(x, y, lam):
    """sklearn with C = 1/(λ·n): the optimum of mean cross-entropy + λ/2·‖β‖² (no intercept)."""
    model = LogisticRegression(C=1.0 / (lam * x.shape[0]), fit_intercept=False, tol=1e-12, max_iter=10_000)
    return model.fit(x, y).coef_  # (C, d)


def test_solver_lambda_mapping_satisfies_the_papers_stationarity_condition():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 5))
    x /= np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))  # ‖h(x)‖ ≤ 1
    y = rng.integers(0, 3, 200)
    lam = 0.05
    beta = fit_paper_objective(x, y, lam)
    logits = x @ beta.T
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    onehot = np.eye(3)[y]
    # ∇J = (1/n) Σ (p − y) xᵀ + λβ = 0 at the optimum of the paper's objective (2)
    gradient = (probs - onehot).T @ x / x.shape[0] + lam * beta
    assert np.abs(gradient).max() < 1e-6


def test_empirical_replace_one_distance_stays_below_the_bound():
    rng = np.random.default_rng(1)
    n, lam, classes = 60, 0.1, 3
    x = rng.normal(size=(n, 4))
    x /= np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))
    y = rng.integers(0, classes, n)
    y[:classes] = np.arange(classes)
    base = fit_paper_objective(x, y, lam)
    bound = multinomial_logistic_sensitivity(classes, lam, n)
    worst = 0.0
    for trial in range(20):
        x2, y2 = x.copy(), y.copy()
        i = classes + trial  # keep every class present
        direction = rng.normal(size=4)
        x2[i] = direction / np.linalg.norm(direction)
        y2[i] = (y[i] + 1) % classes
        worst = max(worst, float(np.linalg.norm(fit_paper_objective(x2, y2, lam) - base)))
    assert 0 < worst <= bound


def test_classic_gaussian_refuses_epsilon_of_one_or_more():
    assert classic_gaussian_sigma(0.5, 1e-5, 2.0) == pytest.approx(math.sqrt(2 * math.log(1.25e5)) * 2.0 / 0.5)
    with pytest.raises(ConfigError) as error:
        classic_gaussian_sigma(1.0, 1e-5, 1.0)
    assert error.value.argument == "epsilon"


@pytest.mark.parametrize(("epsilon", "delta"), [(0.1, 1e-5), (0.5, 1e-5), (2.0, 1e-6), (8.0, 1e-3)])
def test_analytic_gaussian_is_tight_and_never_looser_than_classic(epsilon, delta):
    sigma = analytic_gaussian_sigma(epsilon, delta, 3.0)
    accountant = pld.PLDAccountant()
    accountant.compose(dp_event.GaussianDpEvent(sigma / 3.0))
    assert accountant.get_epsilon(delta) == pytest.approx(epsilon, rel=1e-3)
    if epsilon < 1:
        assert sigma <= classic_gaussian_sigma(epsilon, delta, 3.0)


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: multinomial_logistic_sensitivity(0, 0.1, 10), "num_classes"),
        (lambda: multinomial_logistic_sensitivity(3, 0.0, 10), "regularization"),
        (lambda: binary_logistic_sensitivity(0.1, 0), "num_records"),
        (lambda: analytic_gaussian_sigma(0.0, 1e-5, 1.0), "epsilon"),
        (lambda: analytic_gaussian_sigma(1.0, 1.0, 1.0), "delta"),
        (lambda: analytic_gaussian_sigma(1.0, 1e-5, -1.0), "sensitivity"),
    ],
)
def test_bad_arguments_name_the_argument(call, argument):
    with pytest.raises(ConfigError) as error:
        call()
    assert error.value.argument == argument
