"""Reputation weights (reputation-weighted-pate.txt, Sec. 4.1.1) against hand-computed values."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedvote.aggregation.voting import (
    WEIGHT_SCHEMES,
    WeightRule,
    accuracy_bin,
    percentile_score,
    project_histogram,
    rank_score,
    scheme_score,
    weight_from_score,
    zscore_score,
)

HISTOGRAM = np.array([2.0, 0.0, 3.0, 5.0])  # 10 agents over 4 bins of [0, 1]


def test_weight_from_score_maps_zero_and_one_to_the_ends_and_clips():
    assert weight_from_score(0.0, 0.1, 3.0) == pytest.approx(0.1)
    assert weight_from_score(1.0, 0.1, 3.0) == pytest.approx(3.0)
    assert weight_from_score(0.5, 0.1, 3.0) == pytest.approx(1.55)
    assert weight_from_score(1.7, 0.1, 3.0) == pytest.approx(3.0)
    assert weight_from_score(-2.0, 0.1, 3.0) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        weight_from_score(0.5, 2.0, 1.0)


def test_accuracy_bins():
    assert [accuracy_bin(a, 10) for a in (0.0, 0.05, 0.1, 0.95, 1.0)] == [0, 0, 1, 9, 9]


def test_projection_onto_the_scaled_simplex_by_hand():
    # sorted (5, 2, -1), cumulative − 4 = (1, 3, 2): ρ = 2, τ = 3/2 → (3.5, 0, 0.5)
    assert np.allclose(project_histogram(np.array([5.0, -1.0, 2.0]), 4.0), [3.5, 0.0, 0.5])
    # an exact histogram is its own projection
    assert np.allclose(project_histogram(HISTOGRAM, 10.0), HISTOGRAM)


@given(st.lists(st.floats(-50, 50), min_size=1, max_size=12), st.floats(0.5, 100))
def test_projection_is_nonnegative_with_the_total(values, total):
    projected = project_histogram(np.array(values), total)
    assert projected.min() >= 0
    assert projected.sum() == pytest.approx(total, rel=1e-9)


def test_percentile_rank_and_zscore_by_hand():
    # accuracy 0.6 falls in bin 2; 2 agents below, 3 in its bin, 10 in all
    assert percentile_score(0.6, HISTOGRAM) == pytest.approx((2 + 1.5) / 10)
    assert rank_score(0.6, HISTOGRAM) == pytest.approx((2 + (3 - 1) / 2) / 9)  # mid-rank of the tie
    # centres 1/8, 3/8, 5/8, 7/8: mean 0.65, variance 0.080625
    z = (0.6 - 0.65) / math.sqrt(0.080625)
    assert zscore_score(0.6, HISTOGRAM) == pytest.approx((z + 1) / 2)
    assert zscore_score(0.6, HISTOGRAM, span=2.0) == pytest.approx((z + 2) / 4)
    assert zscore_score(0.99, HISTOGRAM) == 1.0  # z ≈ 1.2 > span: clipped
    assert zscore_score(0.5, np.array([0.0, 0.0, 4.0, 0.0])) == 0.5  # no spread: z = 0


def test_accuracy_scheme_is_the_accuracy_and_one_vote_is_one():
    assert scheme_score("accuracy", 0.83) == pytest.approx(0.83)
    assert WeightRule("accuracy").weight(0.83) == pytest.approx(0.1 + 0.83 * 2.9)
    assert WeightRule("one-vote").weight(0.0) == 1.0


def test_relative_schemes_need_the_released_histogram():
    for scheme in ("percentile", "zscore", "rank"):
        with pytest.raises(ValueError, match="histogram"):
            WeightRule(scheme)


@given(
    st.sampled_from(WEIGHT_SCHEMES[1:]),
    st.floats(0, 1),
    st.lists(st.floats(0, 20), min_size=2, max_size=10),
    st.floats(0, 1),
    st.floats(0, 5),
)
def test_every_weight_lies_in_its_range(scheme, accuracy, counts, low, extra):
    rule = WeightRule(scheme, min_weight=low, max_weight=low + extra + 1e-3, histogram=np.array(counts))
    weight = rule.weight(accuracy)
    assert rule.min_weight - 1e-12 <= weight <= rule.max_weight + 1e-12
