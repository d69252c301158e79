"""Confident-GNMax (PATE-FL ``--release labels``; Papernot et al. 2018, Algorithm 1).

Data-independent events against the exact Gaussian closed form; the threshold check's
pass probability against Monte Carlo; its RDP against a transcription of the authors'
``compute_rdp_threshold``; and the data-dependent per-query RDP (threshold check + GNMax)
against the *exact* Rényi divergence of the mechanism's output distribution, computed by
numerical integration, for every neighbouring vote histogram.
"""

import itertools
import math

import numpy as np
import pytest
import scipy.stats
from dp_accounting.rdp import rdp_privacy_accountant
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import integrate

from fedvote.errors import ConfigError
from fedvote.privacy.accountant import epsilon_for, gaussian_epsilon
from fedvote.privacy.data_dependent import (
    CONFIDENT_LABEL,
    DATA_DEPENDENT_ORDERS,
    confident_gnmax_epsilon,
    confident_gnmax_independent_epsilon,
    confident_gnmax_rdp,
    gnmax_logq,
    gnmax_rdp,
    threshold_log_probabilities,
    threshold_logpr,
    threshold_rdp,
)
from fedvote.privacy.events import confident_gnmax_events

ORDERS = np.asarray(DATA_DEPENDENT_ORDERS)


# --- data-independent: every query pays Gaussian(σ₁/s) ∘ Gaussian(σ₂/s) ---------------------


@pytest.mark.parametrize(("sigma", "threshold_sigma", "queries"), [(10.0, 20.0, 100), (25.0, 50.0, 500), (4.0, 4.0, 7)])
def test_confident_gnmax_events_are_the_exact_gaussian_composition(sigma, threshold_sigma, queries):
    delta = 1e-3
    events = confident_gnmax_events(sigma, threshold_sigma, queries)
    for level, s in (("agent", 1.0), ("instance", math.sqrt(2.0))):
        mu = s * math.sqrt(queries * (1 / threshold_sigma**2 + 1 / sigma**2))
        assert epsilon_for(events.at(level), delta, "exact") == pytest.approx(gaussian_epsilon(mu, delta), rel=1e-12)
        # PLD converges to the closed form from above (discretisation 1e-4)
        pld = epsilon_for(events.at(level), delta, "pld")
        assert gaussian_epsilon(mu, delta) * (1 - 1e-9) <= pld <= gaussian_epsilon(mu, delta) * (1 + 1e-3)
    assert (events.agent_sensitivity, events.instance_sensitivity) == (1.0, math.sqrt(2.0))


def test_label_release_costs_more_than_sums_at_equal_sigma_and_nothing_without_queries():
    assert epsilon_for(confident_gnmax_events(10.0, 20.0, 100).agent, 1e-3) > epsilon_for(
        confident_gnmax_events(10.0, 1e9, 100).agent, 1e-3
    )
    assert epsilon_for(confident_gnmax_events(10.0, 20.0, 0).agent, 1e-3) == 0.0
    assert math.isinf(epsilon_for(confident_gnmax_events(0.0, 20.0, 5).agent, 1e-3))
    with pytest.raises(ConfigError) as error:
        confident_gnmax_events(10.0, -1.0, 5)
    assert error.value.argument == "threshold_sigma"


# --- the threshold check ------------------------------------------------------------------


def test_pass_probability_matches_monte_carlo():
    rng = np.random.default_rng(0)
    histogram = np.array([[30.0, 10, 10], [18, 17, 15], [50, 0, 0], [5, 5, 40], [2, 1, 0]])
    threshold, sigma, draws = 25.0, 6.0, 200_000
    noisy = histogram[None] + rng.normal(scale=sigma, size=(draws, *histogram.shape))
    empirical = np.mean(noisy.max(axis=2) >= threshold, axis=0)
    log_pass, log_fail = threshold_log_probabilities(histogram, threshold, sigma)
    exact = np.exp(log_pass)
    standard_error = np.sqrt(exact * (1 - exact) / draws)
    assert np.all(np.abs(empirical - exact) <= 5 * standard_error + 1 / draws)
    np.testing.assert_allclose(np.exp(log_pass) + np.exp(log_fail), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(threshold_logpr(histogram, threshold, sigma), log_pass)


def _log1mexp(x):
    if x < -1:
        return math.log1p(-math.exp(x))
    if x < 0:
        return math.log(-math.expm1(x))
    return -np.inf


def reference_rdp_gaussian(logq, sigma, orders):
    """Theorem 6 as the authors' ``rdp_gaussian`` computes it (variance σ², RDP λ/σ²)."""
    if np.isneginf(logq):
        return np.zeros_like(orders)
    variance = sigma**2
    mu_hi2 = math.sqrt(variance * -logq)
    mu_hi1 = mu_hi2 + 1
    ret = orders / variance
    mask = np.logical_and(mu_hi1 > orders, mu_hi2 > 1)
    rdp_hi1, rdp_hi2 = mu_hi1 / variance, mu_hi2 / variance
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


def reference_rdp_threshold(max_count, threshold, sigma, orders):
    """The authors' scalar check: logpr = log Φ̄((T − max n)/σ); Theorem 6 at σ√2 on min(p, 1 − p)."""
    logpr = scipy.stats.norm.logsf(threshold - max_count, scale=sigma)
    return reference_rdp_gaussian(min(logpr, _log1mexp(logpr)), math.sqrt(2.0) * sigma, orders.copy())


@pytest.mark.parametrize(("max_count", "threshold", "sigma"), [(240, 200, 20.0), (120, 200, 25.0), (199, 200, 40.0)])
def test_threshold_rdp_matches_the_reference_code_for_the_scalar_check(max_count, threshold, sigma):
    log_p = scipy.stats.norm.logsf(threshold - max_count, scale=sigma)
    ours = threshold_rdp(np.array([log_p]), 1.0 / (2.0 * sigma**2), ORDERS)[0]  # s = 1: ρ = 1/(2σ₁²)
    np.testing.assert_allclose(ours, reference_rdp_threshold(max_count, threshold, sigma, ORDERS), rtol=1e-9)


# --- the exact Rényi divergence of the mechanism, by numerical integration -----------------


def argmax_probabilities(counts, sigma):
    """Pr[argmax_j (n_j + Z_j) = j], Z ~ N(0, σ²I): ∫ φ_σ(x − n_j) Π_{i≠j} Φ((x − n_i)/σ) dx."""
    out = []
    for j in range(counts.shape[0]):
        others = np.delete(counts, j)

        def density(x, j=j, others=others):
            return scipy.stats.norm.pdf(x, loc=counts[j], scale=sigma) * np.prod(
                scipy.stats.norm.cdf((x - others) / sigma)
            )

        lo, hi = counts.min() - 12 * sigma, counts.max() + 12 * sigma
        value, _ = integrate.quad(density, lo, hi, epsabs=0.0, epsrel=1e-12, limit=400, points=list(counts))
        out.append(value)
    return np.array(out)


def output_distribution(counts, threshold, sigma1, sigma2):
    """The law of one Confident-GNMax answer: (⊥, label 0, ..., label C−1)."""
    log_pass, _ = threshold_log_probabilities(counts[None, :], threshold, sigma1)
    p = math.exp(log_pass[0])
    return np.concatenate([[1.0 - p], p * argmax_probabilities(counts, sigma2)])


def renyi(p, q, order):
    """D_λ(P‖Q) of two discrete distributions."""
    return float(np.log(np.sum(p**order * q ** (1 - order))) / (order - 1))


def neighbours(counts, level):
    """Agent level (zero-out): one agent's one-hot vote removed. Instance: one vote moved."""
    classes = range(counts.shape[0])
    voters = [a for a in classes if counts[a] >= 1]
    if level == "agent":
        return [counts - np.eye(counts.shape[0])[a] for a in voters]
    return [counts - np.eye(counts.shape[0])[a] + np.eye(counts.shape[0])[b] for a in voters for b in classes if b != a]


@pytest.mark.parametrize("level", ["agent", "instance"])
@pytest.mark.parametrize(
    ("counts", "threshold", "sigma1", "sigma2", "bites"),
    [
        ([24.0, 1, 0], 12.0, 3.0, 2.5, True),  # clear consensus, far above T
        ([20.0, 4, 1], 8.0, 2.5, 2.0, True),
        ([14.0, 10, 1], 12.0, 3.0, 3.0, False),  # close vote near T: the data-independent curve
    ],
)
def test_data_dependent_rdp_bounds_the_exact_divergence_to_every_neighbour(
    counts, threshold, sigma1, sigma2, bites, level
):
    counts = np.asarray(counts)
    s = 1.0 if level == "agent" else math.sqrt(2.0)
    orders = np.array([1.5, 2.0, 4.0, 8.0, 16.0])
    bound = confident_gnmax_rdp(
        counts[None, :], np.array([True]), threshold=threshold, threshold_sigma=sigma1, sigma=sigma2,
        sensitivity=s, orders=orders,
    )
    check_only = confident_gnmax_rdp(
        counts[None, :], np.array([False]), threshold=threshold, threshold_sigma=sigma1, sigma=sigma2,
        sensitivity=s, orders=orders,
    )
    actual = output_distribution(counts, threshold, sigma1, sigma2)
    worst = np.zeros_like(orders)
    worst_bit = np.zeros_like(orders)
    for other in neighbours(counts, level):
        law = output_distribution(other, threshold, sigma1, sigma2)
        bit = np.array([actual[0], 1 - actual[0]]), np.array([law[0], 1 - law[0]])
        for i, order in enumerate(orders):
            worst[i] = max(worst[i], renyi(actual, law, order))
            worst_bit[i] = max(worst_bit[i], renyi(*bit, order))
    # Theorem 6 bounds D_λ(M(D)‖M(D')) for the actual D: the answered query (check + argmax)
    # and the check alone (an unanswered query's only release).
    assert np.all(worst <= bound * (1 + 1e-6) + 1e-12)
    assert np.all(worst_bit <= check_only * (1 + 1e-6) + 1e-12)
    # where the votes agree, the check is tested where its data-dependent bound really bites
    data_independent = orders * s**2 / 2 * (1 / sigma1**2 + 1 / sigma2**2)
    assert np.all(bound <= data_independent * (1 + 1e-12))
    assert np.any(bound < 0.5 * data_independent) == bites


# --- composition over queries and the cap ------------------------------------------------


def test_epsilon_composes_the_check_on_every_query_and_gnmax_on_the_answered_ones():
    rng = np.random.default_rng(3)
    histogram = np.stack([rng.multinomial(200, p) for p in rng.dirichlet(np.full(10, 0.1), size=300)]).astype(float)
    answered = histogram.max(axis=1) > 120
    threshold, sigma1, sigma2, delta = 150.0, 60.0, 20.0, 1e-5
    result = confident_gnmax_epsilon(
        histogram, answered, threshold=threshold, threshold_sigma=sigma1, sigma=sigma2, delta=delta
    )
    log_pass, log_fail = threshold_log_probabilities(histogram, threshold, sigma1)
    rho1, rho2 = 1 / (2 * sigma1**2), 1 / (2 * sigma2**2)
    total = gnmax_rdp(np.minimum(log_pass, log_fail), rho1, ORDERS).sum(axis=0)
    total += gnmax_rdp(gnmax_logq(histogram[answered], sigma2), rho2, ORDERS).sum(axis=0)
    expected, _ = rdp_privacy_accountant.compute_epsilon(ORDERS, total, delta)
    assert result.epsilon_data_dependent == pytest.approx(expected, rel=1e-12)
    mu = math.sqrt(300 * (1 / sigma1**2 + 1 / sigma2**2))
    assert result.epsilon_data_independent == pytest.approx(gaussian_epsilon(mu, delta), rel=1e-9)
    assert result.epsilon == min(result.epsilon_data_dependent, result.epsilon_data_independent)
    assert result.epsilon < 0.5 * result.epsilon_data_independent  # confident teachers pay little
    assert (result.queries_checked, result.queries_answered) == (300, int(answered.sum()))
    assert result.label == CONFIDENT_LABEL and "not itself private" in result.label


def test_per_query_noise_is_grouped_exactly():
    rng = np.random.default_rng(4)
    histogram = np.stack([rng.multinomial(40, [0.8, 0.1, 0.1]) for _ in range(60)]).astype(float)
    answered = rng.random(60) < 0.7
    sigma1 = np.where(np.arange(60) < 30, 6.0, 9.0)
    sigma2 = sigma1 / 2
    whole = confident_gnmax_epsilon(histogram, answered, threshold=25.0, threshold_sigma=sigma1, sigma=sigma2,
                                    delta=1e-4)
    parts = [
        confident_gnmax_rdp(histogram[rows], answered[rows], threshold=25.0, threshold_sigma=s1, sigma=s1 / 2,
                            sensitivity=1.0, orders=ORDERS)
        for rows, s1 in ((slice(0, 30), 6.0), (slice(30, 60), 9.0))
    ]
    expected, _ = rdp_privacy_accountant.compute_epsilon(ORDERS, parts[0] + parts[1], 1e-4)
    assert whole.epsilon_data_dependent == pytest.approx(expected, rel=1e-12)
    assert whole.epsilon_data_independent == pytest.approx(
        confident_gnmax_independent_epsilon(sigma1, sigma2, 1.0, 1e-4, "exact"), rel=1e-12
    )


@settings(max_examples=30, deadline=None)
@given(
    arrays(np.int64, st.tuples(st.integers(1, 20), st.integers(2, 5)), elements=st.integers(0, 50)),
    st.floats(0.5, 60.0),
    st.floats(0.5, 60.0),
    st.floats(-10.0, 80.0),
    st.sampled_from([1.0, math.sqrt(2.0)]),
    st.data(),
)
def test_never_exceeds_the_data_independent_epsilon(histogram, sigma1, sigma2, threshold, sensitivity, data):
    answered = np.array(data.draw(st.lists(st.booleans(), min_size=len(histogram), max_size=len(histogram))))
    result = confident_gnmax_epsilon(histogram, answered, threshold=threshold, threshold_sigma=sigma1, sigma=sigma2,
                                     delta=1e-5, sensitivity=sensitivity)
    assert 0.0 <= result.epsilon <= result.epsilon_data_independent


def test_bad_inputs_name_the_argument():
    with pytest.raises(ConfigError) as error:
        confident_gnmax_epsilon(np.ones((3, 2)), np.ones(2, bool), threshold=1.0, threshold_sigma=1.0, sigma=1.0,
                                delta=1e-3)
    assert error.value.argument == "answered"
    with pytest.raises(ConfigError) as error:
        threshold_log_probabilities(np.ones((3, 2)), math.nan, 1.0)
    assert error.value.argument == "threshold"


def test_every_neighbour_enumeration_is_what_the_levels_say():
    counts = np.array([2.0, 0.0, 1.0])
    assert {tuple(n) for n in neighbours(counts, "agent")} == {(1.0, 0.0, 1.0), (2.0, 0.0, 0.0)}
    moved = {tuple(n) for n in neighbours(counts, "instance")}
    assert moved == {
        tuple(counts - np.eye(3)[a] + np.eye(3)[b]) for a, b in itertools.permutations(range(3), 2) if counts[a] >= 1
    }
