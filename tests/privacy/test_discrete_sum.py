"""DP-FedAvg's discrete secure path, its math: Zhu & Wang's subsampled RDP bound, KLS21's rounding
bound and the plan, each against an independent computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp

from fedvote.agents.local_updates import conditional_rounding
from fedvote.privacy import discrete_sum as ds
from fedvote.privacy.discrete import DiscreteGaussianDpEvent, kls21_tau

ORDERS = np.array([1.5, 2.0, 3.0, 4.5, 8.0, 16.0, 32.0, 64.0, 300.0])


@pytest.mark.parametrize(("q", "z"), [(0.05, 0.8), (0.01, 1.5), (0.3, 2.0), (1.0, 1.0)])
def test_subsampled_bound_of_a_gaussian_is_above_the_exact_and_below_the_unsampled(q, z):
    """For a Gaussian base (ε(α) = α/(2z²)) the general bound can only be looser than
    dp-accounting's exact subsampled-Gaussian RDP at integer orders, and never above the unsampled."""
    ours = ds.poisson_subsampled_rdp(ORDERS, q, lambda a: a / (2 * z * z))
    for order, value in zip(ORDERS, ours, strict=True):
        alpha = max(2, math.ceil(order))
        exact = dp_rdp._compute_rdp_poisson_subsampled_gaussian(q, z, [float(alpha)])[0]
        assert value >= exact * (1 - 1e-9)
        assert value <= alpha / (2 * z * z) * (1 + 1e-12)
    if q == 1.0:
        np.testing.assert_allclose(ours, np.maximum(2, np.ceil(ORDERS)) / (2 * z * z))


def zhu_wang_by_hand(alpha: int, q: float, eps) -> float:
    """The general upper bound written out in Python's exact binomials and floats, term by term."""
    total = (1 - q) ** (alpha - 1) * (alpha * q - q + 1)
    total += math.comb(alpha, 2) * q**2 * (1 - q) ** (alpha - 2) * math.exp(eps(2))
    for ell in range(3, alpha + 1):
        total += 3 * math.comb(alpha, ell) * (1 - q) ** (alpha - ell) * q**ell * math.exp((ell - 1) * eps(ell))
    return min(math.log(total) / (alpha - 1), eps(alpha))


def kls21_by_hand(alpha: int, sigma: float, shares: int, sensitivity: float, dim: int) -> float:
    """KLS21 Theorem 1 (τ from its definition) with one share's CKS20 bound, at integer α."""
    local = sigma / math.sqrt(shares)
    tau = 10 * sum(math.exp(-2 * math.pi**2 * local**2 * k / (k + 1)) for k in range(1, shares))
    scale = sensitivity / sigma
    kls = min(alpha * scale**2 / 2 + tau * dim, alpha / 2 * (scale + tau * math.sqrt(dim)) ** 2)
    return min(kls, alpha * sensitivity**2 / (2 * local**2))


@pytest.mark.parametrize(("sigma", "shares", "bound", "dim", "q"),
                         [(2048.0 * math.sqrt(10), 10, 6477.0, 9610, 0.05), (3.0, 4, 2.0, 5, 0.2)])
def test_sampled_discrete_gaussian_rdp_equals_a_computation_by_hand(sigma, shares, bound, dim, q):
    event = DiscreteGaussianDpEvent(sigma, shares, bound, dim)
    ours = ds.sampled_discrete_gaussian_rdp(np.array([2.0, 3.0, 7.0, 20.0]), q, event)
    for alpha, value in zip((2, 3, 7, 20), ours, strict=True):
        by_hand = zhu_wang_by_hand(alpha, q, lambda a: kls21_by_hand(a, sigma, shares, bound, dim))
        assert value == pytest.approx(by_hand, rel=1e-9)
    assert kls21_tau(sigma, shares) >= 0


@pytest.mark.parametrize("dim", [5, 100, 9610])
def test_conditional_rounding_keeps_the_bound_and_rarely_redraws(dim):
    """Every rounded vector has norm ≤ B; a first draw passes with probability ≥ 1 − β (KLS21)."""
    rng = np.random.default_rng(dim)
    norm = 1024.0 * math.sqrt(dim)
    bound = ds.rounded_norm_bound(norm, dim)
    limit = math.floor(bound * bound)
    fails, trials = 0, 300
    for _ in range(trials):
        direction = rng.normal(size=dim)
        values = direction / np.linalg.norm(direction) * norm * rng.uniform(0.5, 1.0)
        rounded = conditional_rounding(values, bound, rng)
        assert int(np.dot(rounded, rounded)) <= limit
        assert np.all(np.abs(rounded - values) < 1.0)
        first = np.floor(values) + (rng.random(dim) < values - np.floor(values))
        fails += int(np.dot(first, first) > limit)
    beta = ds.ROUNDING_BETA
    assert fails / trials <= beta + 5 * math.sqrt(beta * (1 - beta) / trials)


def test_rounded_bound_closed_form():
    assert ds.rounded_norm_bound(10.0, 4, beta=0.0) == 12.0
    squared = 100 + 1 + math.sqrt(2 * 0.5) * (10 + 1)  # β = e^(−1/2): √(2 ln(1/β)) = 1
    assert ds.rounded_norm_bound(10.0, 4) == pytest.approx(min(12.0, math.sqrt(squared)))


def test_plan_shares_carry_the_noise_and_fit_the_sampler():
    plan = ds.plan_discrete_sum(0.9, 0.08, 9610, 50)
    assert plan.shares * plan.share_variance >= (0.9 * plan.norm_bound) ** 2
    assert plan.share_variance <= 2**24
    assert plan.norm_bound >= 0.08 / plan.granularity  # B covers the scaled clip
    assert plan.largest_value >= plan.norm_bound + 64 * math.sqrt(plan.share_variance)
