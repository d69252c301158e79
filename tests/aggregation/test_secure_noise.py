"""The exact discrete Gaussian sampler against its pmf (χ²), and the CSPRNG-seeded generators.

A CSPRNG cannot be seeded, so the χ² tests are run at a significance that a sound sampler
fails with probability at most 1e-6 (the asymptotic χ² law with every pooled bin's
expected count ≥ 5), and their power is derived from the sample size: against the pmf of
a σ off by 10 % the non-central χ² of the statistic lies below the critical value with
probability < 1e-9, and the test is shown to reject such a pmf on the same draws.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fedvote.aggregation.secure_noise import (
    csprng_seed,
    csprng_seeded_generator,
    csprng_seeded_torch_generator,
    discrete_gaussian,
    discrete_gaussian_pmf,
    secure_gaussian,
)

SIGNIFICANCE = 1e-6
DRAWS = 100_000


def pooled_bins(sigma: float, draws: int) -> tuple[list[tuple[int, int]], np.ndarray]:
    """Integer bins [lo, hi] pooled from the left until each expects ≥ 5 draws; the ends take the tails."""
    reach = math.ceil(12 * sigma) + 2
    support = np.arange(-reach, reach + 1)
    expected = draws * discrete_gaussian_pmf(sigma, support)
    bins: list[tuple[int, int]] = []
    start, mass = int(support[0]), 0.0
    for x, e in zip(support, expected, strict=True):
        mass += e
        if mass >= 5:
            bins.append((start, int(x)))
            start, mass = int(x) + 1, 0.0
    if mass > 0:  # the right tail's remainder joins the last bin
        bins[-1] = (bins[-1][0], int(support[-1]))
    return bins, support


def chi_square(samples: np.ndarray, sigma_of_pmf: float) -> tuple[float, int, float]:
    """(statistic, degrees of freedom, p-value) of ``samples`` against N_Z(0, σ²)'s pmf, pooled bins."""
    n = samples.size
    bins, support = pooled_bins(sigma_of_pmf, n)
    lo_end, hi_end = bins[0][0], bins[-1][1]
    clipped = np.clip(samples, lo_end, hi_end)  # the end bins hold the tails
    observed = np.array([np.sum((clipped >= lo) & (clipped <= hi)) for lo, hi in bins], dtype=np.float64)
    pmf = discrete_gaussian_pmf(sigma_of_pmf, support)
    expected = np.array([pmf[(support >= lo) & (support <= hi)].sum() for lo, hi in bins])
    expected[0] += 0.5 * (1.0 - pmf.sum())  # mass beyond ±reach, split evenly (symmetric)
    expected[-1] += 0.5 * (1.0 - pmf.sum())
    expected *= n
    assert expected.min() >= 5 - 1e-9
    statistic = float(np.sum((observed - expected) ** 2 / expected))
    dof = len(bins) - 1
    return statistic, dof, float(stats.chi2.sf(statistic, dof))


@pytest.mark.parametrize("sigma", [0.8, 3.5, 25.0])
def test_sampler_matches_the_exact_discrete_gaussian_pmf(sigma: float) -> None:
    samples = discrete_gaussian(sigma, (DRAWS,))
    assert samples.dtype == np.int64 and samples.shape == (DRAWS,)
    _, _, p_value = chi_square(samples, sigma)
    assert p_value >= SIGNIFICANCE, f"χ² rejects the sampler at σ = {sigma}: p = {p_value:.3g}"


@pytest.mark.parametrize("sigma", [0.8, 3.5])
def test_chi_square_rejects_a_sigma_off_by_ten_percent(sigma: float) -> None:
    """The same test has power: a pmf with σ·1.1 or σ/1.1 is rejected surely at this sample size."""
    samples = discrete_gaussian(sigma, (DRAWS,))
    for wrong in (sigma * 1.1, sigma / 1.1):
        # Power derived from the sample size: the statistic is non-central χ² with
        # λ = n Σ (p − q)²/q over the wrong pmf's bins; its mass below the critical value is < 1e-9.
        bins, support = pooled_bins(wrong, DRAWS)
        true_pmf = discrete_gaussian_pmf(sigma, support)
        wrong_pmf = discrete_gaussian_pmf(wrong, support)
        p = np.array([true_pmf[(support >= lo) & (support <= hi)].sum() for lo, hi in bins])
        q = np.array([wrong_pmf[(support >= lo) & (support <= hi)].sum() for lo, hi in bins])
        dof = len(bins) - 1
        critical = stats.chi2.isf(SIGNIFICANCE, dof)
        noncentrality = DRAWS * float(np.sum((p - q) ** 2 / q))
        assert stats.ncx2.cdf(critical, dof, noncentrality) < 1e-9
        _, _, p_value = chi_square(samples, wrong)
        assert p_value < SIGNIFICANCE, f"χ² accepts σ = {wrong:.3g} for draws of σ = {sigma}"


def test_pmf_is_normalised_and_symmetric() -> None:
    for sigma in (0.3, 1.0, 7.5):
        support = np.arange(-math.ceil(40 * sigma) - 1, math.ceil(40 * sigma) + 2)
        pmf = discrete_gaussian_pmf(sigma, support)
        assert math.isclose(math.fsum(pmf), 1.0, rel_tol=1e-14)
        np.testing.assert_allclose(pmf, pmf[::-1], rtol=1e-15)
    # σ = 0.3: P[0] = 1 / (1 + 2e^(−1/0.18) + 2e^(−4/0.18) + ...)
    expected = 1.0 / math.fsum([1.0] + [2 * math.exp(-(k * k) / 0.18) for k in range(1, 20)])
    assert math.isclose(float(discrete_gaussian_pmf(0.3, np.array([0]))[0]), expected, rel_tol=1e-14)


def test_sampler_refuses_bad_sigma_and_draws_nothing_at_zero() -> None:
    assert np.array_equal(discrete_gaussian(0.0, (3, 2)), np.zeros((3, 2), dtype=np.int64))
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="sigma"):
            discrete_gaussian(bad, (2,))


def test_csprng_seeds_differ_and_have_the_asked_width() -> None:
    seeds = {csprng_seed(63) for _ in range(64)}
    assert len(seeds) == 64 and all(0 <= s < 2**63 for s in seeds)
    first = csprng_seeded_generator().integers(2**62, size=4)
    second = csprng_seeded_generator().integers(2**62, size=4)
    assert not np.array_equal(first, second)
    a = csprng_seeded_torch_generator().initial_seed()
    b = csprng_seeded_torch_generator().initial_seed()
    assert a != b and 0 <= a < 2**63


def test_secure_gaussian_has_the_asked_variance() -> None:
    """(z₁+…+z₄)/2 is N(0, s²): sample variance within 6 standard errors of s² (n = 200,000)."""
    n, std = 200_000, 1.7
    values = secure_gaussian(csprng_seeded_generator(), std, (n,))
    standard_error = std**2 * math.sqrt(2.0 / (n - 1))
    assert abs(float(np.var(values, ddof=1)) - std**2) < 6 * standard_error
    assert abs(float(np.mean(values))) < 6 * std / math.sqrt(n)
