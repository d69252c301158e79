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


def vote_regression_student(features: np.ndarray, sums: np.ndarray) -> nn.Module:
    """The linear student (flatten, then W x + b) of :func:`fit_vote_regression`, on the CPU."""
    fit = fit_vote_regression(features, sums)
    dim, classes = fit.weights.shape
    linear = nn.Linear(dim, classes)
    with torch.no_grad():
        linear.weight.copy_(torch.as_tensor(fit.weights.T, dtype=torch.float32))
        linear.bias.copy_(torch.as_tensor(fit.bias, dtype=torch.float32))
    return nn.Sequential(nn.Flatten(), linear).eval()
