"""The vote-regression student: ridge on the released sums, λ by exact leave-one-out."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedvote.models.vote_regression import fit_vote_regression, prior_matched_offsets, vote_regression_student


def _problem(rows: int = 40, dim: int = 6, classes: int = 3, noise: float = 2.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(rows, dim))
    weights = rng.normal(size=(dim, classes))
    sums = features @ weights + 5.0 + rng.normal(scale=noise, size=(rows, classes))
    return features, sums


def _ridge_refit(features: np.ndarray, targets: np.ndarray, ridge: float) -> tuple[np.ndarray, np.ndarray]:
    """Ridge with an unpenalised bias by the normal equations of the augmented design (independent of the SVD)."""
    design = np.hstack([features, np.ones((features.shape[0], 1))])
    penalty = ridge * np.eye(design.shape[1])
    penalty[-1, -1] = 0.0
    solution = np.linalg.solve(design.T @ design + penalty, design.T @ targets)
    return solution[:-1], solution[-1]


def test_weights_equal_the_normal_equations_at_the_chosen_ridge() -> None:
    features, sums = _problem()
    fit = fit_vote_regression(features, sums)
    centred = sums - sums.mean(axis=1, keepdims=True)
    weights, bias = _ridge_refit(features, centred, fit.ridge)
    np.testing.assert_allclose(fit.weights, weights, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(fit.bias, bias, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("seed", [0, 1])
def test_leave_one_out_errors_equal_brute_force_refits(seed: int) -> None:
    features, sums = _problem(rows=25, seed=seed)
    fit = fit_vote_regression(features, sums)
    centred = sums - sums.mean(axis=1, keepdims=True)
    for ridge in list(fit.loo_errors)[::4]:
        residuals = []
        for held in range(features.shape[0]):
            keep = np.arange(features.shape[0]) != held
            weights, bias = _ridge_refit(features[keep], centred[keep], ridge)
            residuals.append(centred[held] - (features[held] @ weights + bias))
        assert fit.loo_errors[ridge] == pytest.approx(float(np.mean(np.square(residuals))), rel=1e-8)
    assert fit.loo_errors[fit.ridge] == min(fit.loo_errors.values())


def test_row_offsets_do_not_change_the_fit() -> None:
    """A query's total (the responder count plus noise) says nothing about its class."""
    features, sums = _problem()
    shifted = sums + np.random.default_rng(3).normal(scale=50.0, size=(sums.shape[0], 1))
    first, second = fit_vote_regression(features, sums), fit_vote_regression(features, shifted)
    np.testing.assert_allclose(first.weights, second.weights, atol=1e-9)


def test_noisy_sums_are_averaged_out_over_many_queries() -> None:
    """Noise 10× the signal per query: the argmax of each noisy sum is mostly wrong, the fit mostly right."""
    rng = np.random.default_rng(5)
    rows, dim, classes = 4000, 5, 4
    features = rng.normal(size=(rows, dim))
    truth = rng.normal(size=(dim, classes))
    clean = features @ truth  # (R, C)
    noisy = clean + rng.normal(scale=10.0 * clean.std(), size=clean.shape)
    label = clean.argmax(axis=1)
    fit = fit_vote_regression(features, noisy)
    predicted = (features @ fit.weights + fit.bias).argmax(axis=1)
    # The released argmax's agreement: near chance (1/4) plus a little; a binomial sd at n=4000 is < 0.008.
    assert (noisy.argmax(axis=1) == label).mean() < 0.40
    # Least squares' coefficient error is ~10·sd/√4000 ≈ 0.16 sd: most argmaxes survive it.
    assert (predicted == label).mean() > 0.75


def test_the_student_module_computes_the_fit() -> None:
    features, sums = _problem(dim=12)
    images = features.reshape(-1, 3, 2, 2)  # the student flattens its input
    student = vote_regression_student(images, sums)
    fit = fit_vote_regression(features, sums)
    with torch.no_grad():
        out = student(torch.as_tensor(images, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(out, features @ fit.weights + fit.bias, rtol=1e-4, atol=1e-4)


def test_refuses_mismatched_rows() -> None:
    with pytest.raises(ValueError, match="one row per query"):
        fit_vote_regression(np.zeros((3, 2)), np.zeros((4, 2)))


def _shares(scores: np.ndarray, classes: int) -> np.ndarray:
    """Each class's share of the rows' argmax, counted directly."""
    return np.array([(scores.argmax(axis=1) == c).mean() for c in range(classes)])


@pytest.mark.parametrize("prior", [(0.25, 0.25, 0.25, 0.25), (0.4, 0.3, 0.2, 0.1)])
def test_prior_matching_gives_the_prior_shares(prior: tuple[float, ...]) -> None:
    """Scores skewed toward class 0 (a teacher bias): after the offsets the argmax shares are the prior's."""
    rng = np.random.default_rng(3)
    rows = 2_000
    scores = rng.normal(size=(rows, 4)) + np.array([1.0, 0.0, -0.3, 0.2])  # (P, C): class 0 over-picked
    assert abs(_shares(scores, 4)[0] - prior[0]) > 0.1
    offsets = prior_matched_offsets(scores, np.array(prior))
    assert offsets.shape == (4,) and abs(offsets.sum()) < 1e-9  # zero-mean: only differences matter
    # Shares move in steps of 1/P: matched to within a few rows a class.
    np.testing.assert_allclose(_shares(scores + offsets, 4), prior, atol=5.0 / rows)


def test_prior_matching_leaves_matching_scores_alone() -> None:
    """Scores whose argmax already has the prior's shares (each class its own block of rows) keep them."""
    scores = np.kron(np.eye(4), np.ones((50, 1))) * 3.0  # (200, 4): rows 0-49 class 0, ...
    offsets = prior_matched_offsets(scores, np.full(4, 0.25))
    np.testing.assert_array_equal((scores + offsets).argmax(axis=1), scores.argmax(axis=1))


def test_the_student_with_a_prior_shifts_only_its_bias() -> None:
    """The weights are the fit's; the bias moves so that the predictions on the pool have the prior's shares."""
    features, sums = _problem(rows=300, dim=5, classes=3, noise=4.0, seed=1)
    sums[:, 0] += 3.0  # every query over-voted for class 0
    pool = np.random.default_rng(2).normal(size=(600, 5))
    prior = np.array([0.2, 0.5, 0.3])
    student = vote_regression_student(features, sums, class_prior=prior, pool_features=pool)
    fit = fit_vote_regression(features, sums)
    linear = student[1]
    np.testing.assert_allclose(linear.weight.detach().numpy(), fit.weights.T, rtol=1e-6, atol=1e-6)
    with torch.no_grad():
        scores = student(torch.as_tensor(pool, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(_shares(scores, 3), prior, atol=5.0 / 600)
    np.testing.assert_allclose(
        linear.bias.detach().numpy() - fit.bias,
        prior_matched_offsets(pool @ fit.weights + fit.bias, prior),
        rtol=1e-5, atol=1e-5,
    )
