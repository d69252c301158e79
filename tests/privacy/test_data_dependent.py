"""Data-dependent analysis: against a scalar transcription of Papernot et al.'s reference
code (pate/core.py: compute_logq_gaussian, rdp_gaussian), Monte Carlo checks of the
probability bounds, composition, and never exceeding the data-independent ε."""

import math

import numpy as np
import pytest
import scipy.stats
from dp_accounting.rdp import rdp_privacy_accountant
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from fedvote.errors import ConfigError
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.data_dependent import (
    DATA_DEPENDENT_ORDERS,
    LABEL,
    data_dependent_epsilon,
    gnmax_logq,
    gnmax_rdp,
    lemma4_log_mismatch_probability,
    lemma4_mismatch_probability,
    theorem5_rdp,
    vote_margins,
)
from fedvote.privacy.events import gaussian_release_event

ORDERS = np.asarray(DATA_DEPENDENT_ORDERS)


# Scalar reference, transcribed from Papernot et al. (2018)'s published code.
def reference_logq(counts, sigma):
    n = len(counts)
    idx_max = np.argmax(counts)
    rest = (counts[idx_max] - counts)[np.arange(n) != idx_max]
    logs = scipy.stats.norm.logsf(rest, scale=math.sqrt(2 * sigma**2))
    m = max(logs)
    logq = m + math.log(sum(np.exp(logs - m)))
    return min(logq, math.log(1 - 1 / n))


def _log1mexp(x):
    if x < -1:
        return math.log1p(-math.exp(x))
    if x < 0:
        return math.log(-math.expm1(x))
    return -np.inf


def reference_rdp_gaussian(logq, sigma, orders):
    if np.isneginf(logq):
        return np.zeros_like(orders)
    variance = sigma**2
    mu_hi2 = math.sqrt(variance * -logq)
    mu_hi1 = mu_hi2 + 1
    ret = orders / variance
    mask = np.logical_and(mu_hi1 > orders, mu_hi2 > 1)
    rdp_hi1 = mu_hi1 / variance
    rdp_hi2 = mu_hi2 / variance
    log_a2 = (mu_hi2 - 1) * rdp_hi2
    if (
        np.any(mask)
        and logq <= log_a2 - mu_hi2 * (math.log(1 + 1 / (mu_hi1 - 1)) + math.log(1 + 1 / (mu_hi2 - 1)))
        and -logq > rdp_hi2
    ):
        log1q = _log1mexp(logq)
        log_a = (orders - 1) * (log1q - _log1mexp((logq + rdp_hi2) * (1 - 1 / mu_hi2)))
        log_b = (orders - 1) * (rdp_hi1 - logq / (mu_hi1 - 1))
        log_s = np.logaddexp(log1q + log_a, logq + log_b)
        ret[mask] = np.minimum(ret, log_s / (orders - 1))[mask]
    return ret


def random_histograms(rng, queries, classes, teachers):
    probabilities = rng.dirichlet(np.full(classes, 0.2), size=queries)
    return np.stack([rng.multinomial(teachers, p) for p in probabilities]).astype(float)


@pytest.mark.parametrize("sigma", [5.0, 25.0, 60.0])
def test_gnmax_matches_the_reference_code(sigma):
    rng = np.random.default_rng(int(sigma))
    histogram = random_histograms(rng, 300, 10, 250)
    histogram[0] = [250] + [0] * 9  # unanimous
    histogram[1] = [125, 125] + [0] * 8  # tie
    logq = gnmax_logq(histogram, sigma)
    expected_logq = np.array([reference_logq(row, sigma) for row in histogram])
    np.testing.assert_allclose(logq, expected_logq, rtol=1e-9, atol=1e-12)
    # Papernot's GNMax is replace-one of one teacher: ρ = 1/σ² (Prop. 8)
    ours = gnmax_rdp(logq, 1.0 / sigma**2, ORDERS)
    expected = np.stack([reference_rdp_gaussian(lq, sigma, ORDERS.copy()) for lq in expected_logq])
    np.testing.assert_allclose(ours, expected, rtol=1e-9, atol=1e-12)
    assert np.any(ours < ORDERS / sigma**2 - 1e-9)  # the data-dependent bound does bite somewhere


def test_gnmax_logq_bounds_the_monte_carlo_mismatch_probability():
    rng = np.random.default_rng(1)
    sigma = 20.0
    histogram = np.array([[60.0, 20, 20], [50, 45, 5], [100, 0, 0], [34, 33, 33]])
    noisy = histogram[None] + rng.normal(scale=sigma, size=(40_000, *histogram.shape))
    empirical = np.mean(np.argmax(noisy, axis=2) != np.argmax(histogram, axis=1), axis=0)
    standard_error = np.sqrt(empirical * (1 - empirical) / 40_000)
    assert np.all(empirical <= np.exp(gnmax_logq(histogram, sigma)) + 4 * standard_error + 1e-4)
    assert np.all(empirical <= lemma4_mismatch_probability(histogram, sigma) + 4 * standard_error + 1e-4)


def test_lemma4_and_margins_closed_form():
    histogram = np.array([[10.0, 3, 1], [5, 5, 0]])
    np.testing.assert_allclose(vote_margins(histogram), [7.0, 0.0])
    np.testing.assert_allclose(
        lemma4_mismatch_probability(histogram, 2.0), [min(1, 3 * math.exp(-49 / 32)), 1.0]
    )


def test_theorem5_is_lemma13_with_gaussian_rdp():
    histogram = np.array([[400.0, 0, 0, 0]])
    sigma, s = 25.0, 1.0
    alpha = 3.0
    q = 4 * math.exp(-(400.0**2) / (8 * sigma**2))
    eps_2alpha = 2 * alpha * s**2 / (2 * sigma**2)
    expected = -math.log(1 - q) + math.log(
        1 + math.sqrt(q) * (1 - q) ** (alpha - 1) * math.exp((2 * alpha - 1) * eps_2alpha / 2)
    ) / (alpha - 1)
    got = theorem5_rdp(histogram, sigma, s, np.array([alpha]))[0, 0]
    assert got == pytest.approx(min(expected, alpha * s**2 / (2 * sigma**2)), rel=1e-9)
    assert got < alpha / (2 * sigma**2)  # large margin: better than data-independent


def test_composition_and_conversion():
    sigma, delta, queries = 25.0, 1e-3, 500
    row = np.array([190.0, 10] + [0] * 8)
    result = data_dependent_epsilon(np.tile(row, (queries, 1)), sigma, delta)
    per_query = gnmax_rdp(gnmax_logq(row, sigma), 1 / (2 * sigma**2), ORDERS)[0]
    expected, _ = rdp_privacy_accountant.compute_epsilon(ORDERS, queries * per_query, delta)
    assert result.epsilon_data_dependent == pytest.approx(expected, rel=1e-9)
    assert result.epsilon_data_independent == pytest.approx(
        epsilon_for(gaussian_release_event(sigma, 1.0, queries), delta, "pld"), rel=1e-3
    )
    assert result.epsilon < 0.1 * result.epsilon_data_independent  # strong consensus pays little
    assert result.label == LABEL == "data-dependent (not itself private)"
    payload = result.to_dict()
    assert len(payload["per_query"]["epsilon"]) == queries


@settings(max_examples=40, deadline=None)
@given(
    arrays(np.int64, st.tuples(st.integers(1, 30), st.integers(2, 6)), elements=st.integers(0, 60)),
    st.floats(0.5, 80.0),
    st.sampled_from([1.0, math.sqrt(2.0), 0.1]),
    st.sampled_from(["gnmax", "theorem5"]),
)
def test_never_exceeds_the_data_independent_epsilon(histogram, sigma, sensitivity, bound):
    result = data_dependent_epsilon(histogram, sigma, 1e-5, sensitivity=sensitivity, bound=bound)
    assert result.epsilon <= result.epsilon_data_independent
    assert 0.0 <= result.epsilon
    rho = sensitivity**2 / (2 * sigma**2)
    if bound == "gnmax":
        curve = gnmax_rdp(gnmax_logq(histogram, sigma), rho, ORDERS)
    else:
        curve = theorem5_rdp(histogram, sigma, sensitivity, ORDERS)
    assert np.all(curve <= rho * ORDERS * (1 + 1e-12))


def test_vectorised_over_many_queries():
    rng = np.random.default_rng(0)
    unique = random_histograms(rng, 100, 10, 200)
    result = data_dependent_epsilon(np.tile(unique, (1000, 1)), 25.0, 1e-3)  # 10⁵ queries × 10 classes
    assert result.queries == 100_000
    assert result.epsilon <= result.epsilon_data_independent
    small = data_dependent_epsilon(unique, 25.0, 1e-3)
    np.testing.assert_allclose(result.per_query_epsilon[:100], small.per_query_epsilon)


@pytest.mark.parametrize(
    "histogram", [np.zeros((0, 3)), np.ones((3, 1)), -np.ones((2, 3)), np.full((2, 3), np.nan)]
)
def test_bad_histograms_are_config_errors(histogram):
    with pytest.raises(ConfigError):
        data_dependent_epsilon(histogram, 10.0, 1e-3)


def test_bad_parameters_are_config_errors():
    with pytest.raises(ConfigError):
        data_dependent_epsilon(np.ones((2, 3)), 0.0, 1e-3)
    with pytest.raises(ConfigError):
        data_dependent_epsilon(np.ones((2, 3)), 1.0, 1e-3, bound="smooth")


def test_lemma4_log_bound_is_exact_where_the_probability_underflows():
    # Margin 10 000 votes at σ = 1: e^(-1.25e7) is 0.0 as a float; its log is log 3 − 1.25e7.
    histogram = np.array([[10_000.0, 0.0, 0.0], [5.0, 4.0, 4.0]])
    log_q = lemma4_log_mismatch_probability(histogram, 1.0)
    assert log_q[0] == pytest.approx(math.log(3) - 10_000.0**2 / 8.0, rel=1e-12)
    assert log_q[1] == 0.0  # min(1, 3·e^(−1/8)) = 1
    np.testing.assert_allclose(np.exp(log_q), lemma4_mismatch_probability(histogram, 1.0), rtol=1e-12)

