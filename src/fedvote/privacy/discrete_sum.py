"""DP-FedAvg's sum of quantised updates and distributed discrete Gaussian shares: pure math.

Kairouz, Liu & Steinke, "The Distributed Discrete Gaussian Mechanism for Federated Learning
with Secure Aggregation", ICML 2021 (KLS21; arXiv:2102.06387). Each sampled agent scales its
update, clipped to S, by 1/γ (γ the granularity) and rounds every coordinate at random to a
neighbouring integer, *conditionally*: a rounding whose L2 norm exceeds :func:`rounded_norm_bound`
is drawn again (KLS21 §4.1, Proposition 22/26: with β = e^(−1/2) each draw passes with probability
at least 1 − β), so every released integer vector has norm at most that bound B. Every agent,
sampled or not, adds its share N_Z(0, σ_l²) to every coordinate; the secure sum adds them up in
a ring that cannot wrap (checked). Nothing is a float until the server multiplies the integer
total by γ.

**Privacy.** One round is the distributed discrete Gaussian of L2 sensitivity B (zero-out of
one agent) in d dimensions with t shares — :class:`~fedvote.privacy.discrete.DiscreteGaussianDpEvent`
(σ = √(t·σ_l²), t, B, d), whose RDP is KLS21's Theorem 1 / Proposition 14 bound — applied to a
Poisson sample of the agents. Its amplification by sampling is Zhu & Wang's general upper bound
for Poisson-subsampled RDP ("Poisson subsampled Rényi differential privacy", ICML 2019; the
bound KLS21's own accounting applies to the sampled DDG, ``compute_rdp_dgaussian`` in
google-research/federated ``distributed_dp/accounting_utils.py``): at integer α ≥ 2,

    ε'(α) ≤ (1/(α−1))·log[(1−q)^(α−1)(αq − q + 1) + C(α,2)q²(1−q)^(α−2)e^(ε(2))
                          + 3·Σ_{ℓ=3}^{α} C(α,ℓ)(1−q)^(α−ℓ)q^ℓ e^((ℓ−1)ε(ℓ))],

taken with the unsampled ε(α) when smaller (:func:`poisson_subsampled_rdp`). Non-integer
orders use ⌈α⌉ (RDP grows with α).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special

from fedvote.privacy.discrete import DiscreteGaussianDpEvent, discrete_gaussian_rdp

# KLS21's β of conditional rounding (their experiments' e^(−1/2)).
ROUNDING_BETA = math.exp(-0.5)


def rounded_norm_bound(norm: float, dim: int, beta: float = ROUNDING_BETA) -> float:
    """B: the L2 norm conditional randomized rounding of a vector of norm ≤ ``norm`` in ``dim`` keeps.

    min(norm + √d, √(norm² + d/4 + √(2 ln(1/β))·(norm + √d/2))) (KLS21 Theorem 1 / Proposition 26;
    the first is deterministic: each coordinate moves by less than 1). β = 0: the first alone.
    """
    if not (norm >= 0 and math.isfinite(norm)):
        raise ValueError(f"norm must be finite and >= 0, got {norm}")
    if isinstance(dim, bool) or dim < 1:
        raise ValueError(f"dim must be an integer >= 1, got {dim!r}")
    if not 0 <= beta < 1:
        raise ValueError(f"beta must lie in [0, 1), got {beta}")
    deterministic = norm + math.sqrt(dim)
    if beta == 0:
        return deterministic
    squared = norm**2 + dim / 4.0 + math.sqrt(2.0 * math.log(1.0 / beta)) * (norm + math.sqrt(dim) / 2.0)
    return min(deterministic, math.sqrt(squared))


# Orders above this use the unsampled bound (valid; the sampled bound's sum grows with α).
MAX_SUBSAMPLED_ORDER = 256


def poisson_subsampled_rdp(
    orders: np.ndarray, q: float, rdp: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """RDP at ``orders`` of a mechanism on a Poisson sample of rate q, from its RDP ``rdp``.

    ``rdp`` maps an array of integer orders to the mechanism's RDP there. Zhu & Wang 2019's
    general upper bound (module docstring) at ⌈α⌉ ≥ 2, or ``rdp`` itself when smaller; above
    :data:`MAX_SUBSAMPLED_ORDER`, and at q = 1, ``rdp`` alone.
    """
    if not 0 < q <= 1:
        raise ValueError(f"q must lie in (0, 1], got {q}")
    alphas = np.maximum(2, np.ceil(np.asarray(orders, dtype=np.float64))).astype(np.int64)
    plain = np.asarray(rdp(alphas), dtype=np.float64)
    if q == 1:
        return plain
    top = int(min(alphas.max(), MAX_SUBSAMPLED_ORDER))
    ells = np.arange(0, top + 1)
    at = np.full(top + 1, np.inf)
    at[2:] = np.asarray(rdp(ells[2:]), dtype=np.float64)  # ε(ℓ), ℓ = 2..top
    log_q, log_1q = math.log(q), math.log1p(-q)
    out = plain.copy()
    for i, alpha in enumerate(alphas):
        if alpha > MAX_SUBSAMPLED_ORDER or not math.isfinite(plain[i]):
            continue
        ell = ells[3 : alpha + 1]
        log_comb = special.gammaln(alpha + 1) - special.gammaln(ell + 1) - special.gammaln(alpha - ell + 1)
        terms = np.concatenate([
            [(alpha - 1) * log_1q + math.log(alpha * q - q + 1),
             math.log(alpha * (alpha - 1) / 2) + 2 * log_q + (alpha - 2) * log_1q + at[2]],
            math.log(3.0) + log_comb + (alpha - ell) * log_1q + ell * log_q + (ell - 1) * at[ell],
        ])
        out[i] = min(plain[i], float(special.logsumexp(terms)) / (alpha - 1))
    return out


def integer_share_variance(noise_multiplier: float, bound: float, shares: int) -> int:
    """σ_l² = ⌈(z·B)²/t⌉: one agent's integer share variance parameter, so t shares carry ≥ (z·B)²."""
    if not (noise_multiplier >= 0 and math.isfinite(noise_multiplier)):
        raise ValueError(f"noise_multiplier must be finite and >= 0, got {noise_multiplier}")
    if shares < 1:
        raise ValueError(f"shares must be >= 1, got {shares}")
    return math.ceil((noise_multiplier * bound) ** 2 / shares)


def largest_share_value(bound: float, share_variance: int, tail_sigmas: float = 64.0) -> int:
    """The largest |coordinate| an agent may send: ⌈B⌉ + ⌈tail·σ_l⌉ (beyond: refused, never wrapped)."""
    return math.ceil(bound) + math.ceil(tail_sigmas * math.sqrt(share_variance))


def sampled_discrete_gaussian_rdp(orders: np.ndarray, q: float, event: DiscreteGaussianDpEvent) -> np.ndarray:
    """RDP at ``orders`` of ``event`` (KLS21's bound) on a Poisson sample of rate q (Zhu & Wang's bound)."""

    def plain(alphas: np.ndarray) -> np.ndarray:
        return discrete_gaussian_rdp(
            alphas.astype(np.float64), event.sigma, event.shares, event.sensitivity, event.dimension
        )

    return poisson_subsampled_rdp(orders, q, plain)


# The scale of the quantisation: the clipped update's norm is S/γ = min(1024·√d, 2048·√t/z) integer
# units — fine enough that the rounding's inflation d/4 is small beside its square (KLS21 §4.3),
# coarse enough that each share σ_l ≈ z·B/√t stays near 2048, within the exact sampler's range.
SCALE_PER_ROOT_D = 1024.0
TARGET_SHARE_SIGMA = 2048.0


@dataclass(frozen=True)
class DiscretePlan:
    """The public values of one round of quantised updates with distributed discrete Gaussian shares."""

    granularity: float  # γ: one integer unit in update units
    norm_bound: float  # B: every rounded vector's L2 norm bound (integer units)
    share_variance: int  # σ_l²: each agent's N_Z(0, σ_l²) share
    shares: int  # t: the honest shares the accounting counts on
    dimension: int  # d
    largest_value: int  # the largest |coordinate| an agent sends (beyond: refused)


def plan_discrete_sum(noise_multiplier: float, clip_norm: float, dimension: int, shares: int) -> DiscretePlan:
    """The round's γ, B and σ_l² from public values: S/γ = min(1024·√d, 2048·√t/z), B, ⌈(zB)²/t⌉.

    B = :func:`rounded_norm_bound` (S/γ, d). Never raises on a large z (calibration probes
    many); a σ_l² beyond the sampler's range is refused before the run (the method's check).
    """
    if not (clip_norm > 0 and math.isfinite(clip_norm)):
        raise ValueError(f"clip_norm must be > 0, got {clip_norm}")
    scaled = SCALE_PER_ROOT_D * math.sqrt(dimension)
    if noise_multiplier > 0:
        scaled = min(scaled, TARGET_SHARE_SIGMA * math.sqrt(shares) / noise_multiplier)
    bound = rounded_norm_bound(scaled, dimension)
    variance = integer_share_variance(noise_multiplier, bound, shares)
    return DiscretePlan(
        granularity=clip_norm / scaled,
        norm_bound=bound,
        share_variance=variance,
        shares=shares,
        dimension=dimension,
        largest_value=largest_share_value(bound, variance),
    )
