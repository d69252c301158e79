"""A linear student fitted to the released noisy vote sums by ridge regression.

PATE-FL's server receives, for each query x_q, the noisy vote sums y_q = v(x_q) + N(0, σ²I)
(the voting paper's Algorithm 1). The noisy argmax keeps one bit of that release and loses
the rest; but the noise is zero-mean and independent across queries, so a student that
*regresses* the sums on the public features averages it out over many queries:

    min_{W, b}  Σ_q ‖(y_q − ȳ_q·1) − (W x_q + b)‖² + λ‖W‖²          (ridge; rows centred)

With the privacy cost fixed, Q/σ² is fixed (Gaussian composition), so more queries bring
noisier sums but the same total information, spread over more of the pool. λ is chosen by
exact leave-one-out error *against the released sums* (the hat matrix's closed form): the
noise is independent of the fit, so this estimates the error against the clean sums up to a
constant, and it reads nothing but released values and public features (post-processing:
no ε). Everything here is post-processing of the release.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

# λ candidates: the mean squared feature norm (the scale of XᵀX's eigenvalues summed per row)
# times 10^k, k from −1.5 to 2.5 in quarter decades.
RIDGE_GRID_EXPONENTS: tuple[float, ...] = tuple(-1.5 + 0.25 * i for i in range(17))
# Matching the student's class shares on the pool to a known prior: steps, and the first
# step as a share of the scores' standard deviation per unit of share gap.
PRIOR_MATCHING_STEPS = 500
PRIOR_MATCHING_STEP = 0.5


@dataclass(frozen=True)
class VoteRegression:
    """The fitted student's weights (d, C) and bias (C,), the chosen λ and each λ's leave-one-out error."""

    weights: np.ndarray
    bias: np.ndarray
    ridge: float
    loo_errors: dict[float, float]


def fit_vote_regression(features: np.ndarray, sums: np.ndarray) -> VoteRegression:
    """Ridge regression of the row-centred sums (R, C) on ``features`` (R, ...), λ by leave-one-out.

    Rows are centred (the sum of a query's votes is the responder count plus noise: it says
    nothing about the class), then columns and features are centred so the bias is fitted
    unpenalised. One SVD serves every λ.
    """
    inputs = np.asarray(features, dtype=np.float64).reshape(len(features), -1)  # (R, d)
    targets = np.asarray(sums, dtype=np.float64)  # (R, C)
    if inputs.shape[0] != targets.shape[0] or targets.ndim != 2:
        raise ValueError(f"features {inputs.shape} and sums {targets.shape} must have one row per query")
    if inputs.shape[0] < 2:
        raise ValueError("the regression needs at least two released queries")
    targets = targets - targets.mean(axis=1, keepdims=True)
    feature_mean, target_mean = inputs.mean(axis=0), targets.mean(axis=0)  # (d,), (C,)
    centred, centred_targets = inputs - feature_mean, targets - target_mean
    left, singular, right_t = np.linalg.svd(centred, full_matrices=False)  # (R, k), (k,), (k, d)
    squared = singular**2  # (k,)
    projected = left.T @ centred_targets  # (k, C)
    scale = float(squared.sum()) / inputs.shape[0]
    if scale <= 0.0:  # every query's features equal: only the bias can be fitted
        return VoteRegression(np.zeros((inputs.shape[1], targets.shape[1])), target_mean, 0.0, {})
    errors: dict[float, float] = {}
    for exponent in RIDGE_GRID_EXPONENTS:
        ridge = scale * 10.0**exponent
        shrink = squared / (squared + ridge)  # (k,)
        fitted = left @ (shrink[:, None] * projected)  # (R, C)
        leverage = 1.0 / inputs.shape[0] + (left**2) @ shrink  # (R,): the hat's diagonal, bias included
        residuals = (centred_targets - fitted) / (1.0 - leverage)[:, None]
        errors[ridge] = float(np.mean(residuals**2))
    ridge = min(errors, key=lambda value: errors[value])
    weights = right_t.T @ ((singular / (squared + ridge))[:, None] * projected)  # (d, C)
    return VoteRegression(weights, target_mean - feature_mean @ weights, ridge, errors)


def prior_matched_offsets(
    scores: np.ndarray, prior: np.ndarray, steps: int = PRIOR_MATCHING_STEPS
) -> np.ndarray:
    """Offsets b (C,) such that argmax(``scores`` + b) on the pool (P, C) has the class shares ``prior``.

    The noisy sums' ridge fit is biased toward the classes the teachers over-vote (a class
    every non-IID teacher confuses others with); where the pool's class proportions are
    known in advance (documented: :func:`fedvote.data.datasets.documents_balanced_classes`),
    shifting each class's score until the student's predictions on the pool have those
    proportions removes that bias. Subgradient steps on the shares' gap, decaying as 1/√t,
    keeping the offsets whose shares came closest (L1) to ``prior``; zero-mean. Reads public
    features and the released sums only: post-processing.
    """
    rows, classes = scores.shape
    scale = float(scores.std()) or 1.0
    offsets, best, best_gap = np.zeros(classes), np.zeros(classes), np.inf
    for step in range(steps):
        shares = np.bincount((scores + offsets).argmax(axis=1), minlength=classes) / rows  # (C,)
        gap = float(np.abs(shares - prior).sum())
        if gap < best_gap:
            best, best_gap = offsets.copy(), gap
        offsets = offsets - PRIOR_MATCHING_STEP * scale * (shares - prior) / np.sqrt(step + 1.0)
    return best - best.mean()


def vote_regression_student(
    features: np.ndarray,
    sums: np.ndarray,
    *,
    class_prior: np.ndarray | None = None,
    pool_features: np.ndarray | None = None,
) -> nn.Module:
    """The linear student (flatten, then W x + b) of :func:`fit_vote_regression`, on the CPU.

    With ``class_prior`` (C,) the bias is shifted (:func:`prior_matched_offsets`) so that the
    student's predictions on ``pool_features`` (default: ``features``) have those class shares.
    """
    fit = fit_vote_regression(features, sums)
    bias = fit.bias
    if class_prior is not None:
        pool = np.asarray(features if pool_features is None else pool_features, dtype=np.float64)
        scores = pool.reshape(len(pool), -1) @ fit.weights + fit.bias  # (P, C)
        bias = fit.bias + prior_matched_offsets(scores, np.asarray(class_prior, dtype=np.float64))
    dim, classes = fit.weights.shape
    linear = nn.Linear(dim, classes)
    with torch.no_grad():
        linear.weight.copy_(torch.as_tensor(fit.weights.T, dtype=torch.float32))
        linear.bias.copy_(torch.as_tensor(bias, dtype=torch.float32))
    return nn.Sequential(nn.Flatten(), linear).eval()
