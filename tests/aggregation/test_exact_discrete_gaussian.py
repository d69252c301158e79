"""The array sampler of exact discrete Gaussians (CKS20 Algorithms 1–3 on whole arrays): its
distributions against their exact pmfs, with tolerances from the sample sizes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chisquare

from fedvote.aggregation import secure_noise as sn


def seeded_bytes(seed: int):
    """A reproducible stand-in for os.urandom (tests only: the statistics must not flake)."""
    rng = np.random.default_rng(seed)
    return lambda n: rng.bytes(n)


def binned_chisquare(samples: np.ndarray, pmf, reach: int) -> float:
    """χ² p-value of ``samples`` against ``pmf`` on [−reach, reach], both tails lumped."""
    values = np.arange(-reach, reach + 1)
    probabilities = pmf(values)
    tail = (1.0 - probabilities.sum()) / 2.0
    observed = [int((samples < -reach).sum())] + [int((samples == v).sum()) for v in values] + [
        int((samples > reach).sum())]
    expected = np.array([tail, *probabilities, tail]) * samples.size
    keep = expected > 5  # χ²'s approximation needs expected counts above ~5
    observed_kept = np.array(observed)[keep]
    expected_kept = expected[keep] * observed_kept.sum() / expected[keep].sum()
    return float(chisquare(observed_kept, expected_kept).pvalue)


@pytest.mark.parametrize(("num", "den"), [(0, 1), (3, 10), (1, 1), (5, 2), (7, 3), (1, 1000)])
def test_bernoulli_exp_neg_has_probability_exp_minus_gamma(num, den):
    n = 200_000
    draws = sn.bernoulli_exp_neg(np.full(n, num), np.full(n, den), seeded_bytes(num * 31 + den))
    p = math.exp(-num / den)
    assert abs(draws.mean() - p) <= 5.0 * math.sqrt(max(p * (1 - p), 1e-12) / n) + 1e-12


def test_uniform_below_is_uniform():
    draws = sn._uniform_below(np.full(120_000, 6), seeded_bytes(1))
    assert draws.min() == 0 and draws.max() == 5
    assert chisquare(np.bincount(draws, minlength=6)).pvalue > 1e-4


@pytest.mark.parametrize("scale", [1, 3, 17])
def test_discrete_laplace_matches_its_pmf(scale):
    draws = sn.discrete_laplace(scale, 60_000, seeded_bytes(scale))
    norm = (1 - math.exp(-1 / scale)) / (1 + math.exp(-1 / scale))

    def pmf(x):
        return norm * np.exp(-np.abs(x) / scale)

    assert binned_chisquare(draws, pmf, 6 * scale) > 1e-4


@pytest.mark.parametrize("sigma_squared", [1, 9, 50, 2000])
def test_discrete_gaussian_matches_the_exact_pmf(sigma_squared):
    sigma = math.sqrt(sigma_squared)
    draws = sn.exact_discrete_gaussian(sigma_squared, (60_000,), seeded_bytes(sigma_squared))
    assert draws.dtype == np.int64
    assert binned_chisquare(draws, lambda x: sn.discrete_gaussian_pmf(sigma, x), math.ceil(5 * sigma)) > 1e-4
    values = np.arange(-math.ceil(40 * sigma), math.ceil(40 * sigma) + 1)
    variance = float((values**2 * sn.discrete_gaussian_pmf(sigma, values)).sum())  # exact, CKS20 Cor. 9
    # the sample variance's standard error for n draws is about √(2/n)·variance
    assert abs(draws.var() / variance - 1.0) < 5.0 * math.sqrt(2.0 / draws.size)


def test_default_randomness_is_the_os_csprng_and_shapes_hold():
    draws = sn.exact_discrete_gaussian(100, (3, 4))
    assert draws.shape == (3, 4) and draws.dtype == np.int64


def test_scalar_path_for_huge_gamma_is_exact():
    """The Python-integer path (|Y| beyond 2^31/t) has probability e^(−γ) too (γ = 3/2 here)."""
    n = 20_000
    hits = sum(sn._bernoulli_exp_neg_scalar(3, 2) for _ in range(n))
    p = math.exp(-1.5)
    assert abs(hits / n - p) <= 5.0 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("bad", [0, -4, 2.5, True, sn.MAX_EXACT_SIGMA_SQUARED + 1])
def test_bad_sigma_squared_is_refused(bad):
    with pytest.raises(ValueError):
        sn.exact_discrete_gaussian(bad, (2,))
