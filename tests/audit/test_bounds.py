"""Clopper-Pearson and the counts -> epsilon conversion, against independent computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from fedvote.audit.bounds import ErrorCounts, audit_scores, clopper_pearson


@pytest.mark.parametrize("n", [1, 7, 100, 20_000])
def test_clopper_pearson_closed_forms_at_the_ends(n: int) -> None:
    # k = 0: upper = 1 - (alpha/2)^(1/n); k = n: lower = (alpha/2)^(1/n) (solve the binomial tail).
    alpha = 0.05
    assert clopper_pearson(0, n) == (0.0, pytest.approx(1 - (alpha / 2) ** (1 / n), rel=1e-10))
    lower, upper = clopper_pearson(n, n)
    assert upper == 1.0 and lower == pytest.approx((alpha / 2) ** (1 / n), rel=1e-10)


@pytest.mark.parametrize(("k", "n"), [(1, 10), (13, 10_000), (500, 1000), (9_990, 10_000)])
def test_clopper_pearson_inverts_the_binomial_tails(k: int, n: int) -> None:
    # The defining property: P[Bin(n, upper) <= k] = alpha/2 and P[Bin(n, lower) >= k] = alpha/2.
    lower, upper = clopper_pearson(k, n, 0.9)
    assert binom.cdf(k, n, upper) == pytest.approx(0.05, rel=1e-6)
    assert binom.sf(k - 1, n, lower) == pytest.approx(0.05, rel=1e-6)
    assert lower < k / n < upper


def test_clopper_pearson_refuses_bad_counts() -> None:
    with pytest.raises(ValueError, match="successes"):
        clopper_pearson(11, 10)
    with pytest.raises(ValueError, match="confidence"):
        clopper_pearson(1, 10, 1.0)


def test_epsilon_from_hand_worked_counts() -> None:
    # 400 of 1000 D-trials and 10 of 1000 D'-trials above the threshold, delta = 1e-3, 95 %.
    counts = ErrorCounts(true_positives=400, positives=1000, false_positives=10, negatives=1000)
    tpr_lo = clopper_pearson(400, 1000)[0]
    fpr_hi = clopper_pearson(10, 1000)[1]
    # Normal approximation as a sanity check of the exact ends (Wilson-like widths at 97.5 %).
    assert tpr_lo == pytest.approx(0.4 - 1.96 * math.sqrt(0.4 * 0.6 / 1000), abs=2e-3)
    assert 0.017 < fpr_hi < 0.019  # Poisson(10): upper 97.5 % quantile of the mean 18.3
    expected = math.log((tpr_lo - 1e-3) / fpr_hi)
    assert expected == pytest.approx(math.log((0.369469 - 0.001) / 0.018313), abs=1e-4)  # = 3.0017
    assert counts.forward_bound(1e-3) == pytest.approx(expected)
    assert counts.epsilon_lower_bound(1e-3) == pytest.approx(expected)
    # The other inequality: (TNR_lo - delta)/FNR_hi, tnr 990/1000, fnr 600/1000: about 0.46.
    tnr_lo, fnr_hi = clopper_pearson(990, 1000)[0], clopper_pearson(600, 1000)[1]
    assert counts.backward_bound(1e-3) == pytest.approx(math.log((tnr_lo - 1e-3) / fnr_hi))


def test_a_test_that_cannot_tell_the_neighbours_apart_bounds_nothing() -> None:
    counts = ErrorCounts(true_positives=500, positives=1000, false_positives=500, negatives=1000)
    assert counts.epsilon_lower_bound(1e-3) == 0.0
    assert ErrorCounts(0, 10, 0, 10).forward_bound(1e-3) == -math.inf


def test_threshold_chosen_on_one_half_evaluated_on_the_other() -> None:
    rng = np.random.default_rng(0)
    scores_in, scores_out = rng.normal(2.0, 1.0, 4000), rng.normal(0.0, 1.0, 4000)
    outcome = audit_scores(scores_in, scores_out, delta=1e-3, selection_fraction=0.5)
    counts = outcome.counts
    assert counts.positives == counts.negatives == 2000  # the evaluation half only
    assert counts.true_positives == int(np.sum(scores_in[2000:] >= outcome.threshold))
    assert counts.false_positives == int(np.sum(scores_out[2000:] >= outcome.threshold))
    # mu = 2: the exact (eps, 1e-3) is about 6.6; the audit is positive and below it.
    assert 1.5 < outcome.epsilon_lower_bound < 6.6
