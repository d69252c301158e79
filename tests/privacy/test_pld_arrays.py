"""Self-composition and ε over arrays against dp-accounting's own ``self_compose`` and ε walk."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event, pld
from dp_accounting.pld import common, pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_module
from dp_accounting.privacy_accountant import NeighboringRelation
from hypothesis import given, settings
from hypothesis import strategies as st

from fedvote.privacy import pld_arrays
from fedvote.privacy.accountant import clear_epsilon_memo, epsilon_for, pld_discretization

ADD_OR_REMOVE = NeighboringRelation.ADD_OR_REMOVE_ONE
REPLACE = NeighboringRelation.REPLACE_ONE

# (σ, q, relation, count): DP-FedAvg's defaults (100 rounds), DP-SGD-like long runs, unsampled
# Gaussians (PATE), a sampled replace-one event, extreme rates.
COMPOSITIONS = [
    (0.767, 0.05, ADD_OR_REMOVE, 100),
    (0.767, 0.05, REPLACE, 100),
    (2.0, 0.01, ADD_OR_REMOVE, 1000),
    (1.0, 1.0, ADD_OR_REMOVE, 5),
    (0.5, 0.2, REPLACE, 50),
    (5.0, 0.001, ADD_OR_REMOVE, 3000),
    (0.3, 0.999, ADD_OR_REMOVE, 2),
]


def _reference(sigma: float, q: float, relation: NeighboringRelation) -> pld_module.PrivacyLossDistribution:
    return pld_module.from_gaussian_mechanism(
        sigma, value_discretization_interval=1e-4, sampling_prob=q, neighboring_relation=relation
    )


def _pmfs(distribution: pld_module.PrivacyLossDistribution) -> list[pld_pmf.PLDPmf]:
    return [distribution._pmf_remove, distribution._pmf_add]  # noqa: SLF001 - the PMFs compared


@pytest.mark.parametrize(("sigma", "q", "relation", "count"), COMPOSITIONS)
def test_self_compose_equals_dp_accountings(sigma: float, q: float, relation: NeighboringRelation,
                                            count: int) -> None:  # fmt: skip
    """Same support (offset and length), the same probabilities bit for bit, the same mass at infinity."""
    single = _reference(sigma, q, relation)
    theirs, ours = single.self_compose(count), pld_arrays.self_compose(single, count)
    assert ours._symmetric == theirs._symmetric  # noqa: SLF001
    for expected, got in zip(_pmfs(theirs), _pmfs(ours), strict=True):
        assert isinstance(got, pld_pmf.DensePLDPmf)
        assert got._lower_loss == expected._lower_loss  # noqa: SLF001
        assert got._probs.shape == expected._probs.shape  # noqa: SLF001
        np.testing.assert_array_equal(got._probs, expected._probs)  # noqa: SLF001
        assert got._infinity_mass == pytest.approx(expected._infinity_mass, rel=1e-15, abs=0)  # noqa: SLF001
    for delta in (1e-2, 1e-3, 1e-5, 1e-8):
        assert pld_arrays.epsilon_for_delta(ours, delta) == pytest.approx(
            theirs.get_epsilon_for_delta(delta), rel=1e-12
        )


def _identity() -> pld_module.PrivacyLossDistribution:
    return pld_module.identity(value_discretization_interval=1e-4)


def _laplace() -> pld_module.PrivacyLossDistribution:
    return pld_module.from_laplace_mechanism(2.0, value_discretization_interval=1e-4)


def _randomized_response() -> pld_module.PrivacyLossDistribution:
    return pld_module.from_randomized_response(0.3, 4, value_discretization_interval=1e-4)


# (first, second): the accountant's first composition (identity with a dense pair), two dense
# pairs, symmetric with asymmetric, dense with sparse, two small sparse PMFs.
PAIRS = {
    "identity, sampled Gaussian": (_identity, lambda: _reference(0.767, 0.05, ADD_OR_REMOVE).self_compose(100)),
    "identity, replace-one": (_identity, lambda: _reference(0.767, 0.05, REPLACE).self_compose(100)),
    "two sampled Gaussians": (lambda: _reference(2.0, 0.01, ADD_OR_REMOVE).self_compose(10),
                              lambda: _reference(0.767, 0.05, ADD_OR_REMOVE).self_compose(20)),
    "replace-one with add/remove": (lambda: _reference(0.5, 0.2, REPLACE),
                                    lambda: _reference(1.0, 0.1, ADD_OR_REMOVE)),
    "Laplace with a Gaussian": (_laplace, lambda: _reference(1.0, 1.0, ADD_OR_REMOVE)),
    "sparse with sparse": (_randomized_response, _randomized_response),
}


@pytest.mark.parametrize("pair", list(PAIRS))
def test_compose_equals_dp_accountings(pair: str, assert_same_pmf) -> None:
    """Same support, the same probabilities bit for bit, the same mass at infinity as dp-accounting's compose."""
    first, second = (make() for make in PAIRS[pair])
    theirs, ours = first.compose(second), pld_arrays.compose(first, second)
    assert ours._symmetric == theirs._symmetric  # noqa: SLF001
    for expected, got in zip(_pmfs(theirs), _pmfs(ours), strict=True):
        assert_same_pmf(got, expected)
    for delta in (1e-3, 1e-6):
        assert pld_arrays.epsilon_for_delta(ours, delta) == theirs.get_epsilon_for_delta(delta)


@pytest.mark.parametrize("pessimistic", [True, False])
def test_tails_within_the_truncation_are_cut_as_dp_accounting_cuts_them(pessimistic: bool, assert_same_pmf) -> None:
    """Three losses of 1e-17 at each end (3e-17 < 5e-16 each side): cut, their mass moved as dp-accounting moves it."""
    probs = np.concatenate([np.full(3, 1e-17), [0.25, 0.5, 0.25 - 6e-17], np.full(3, 1e-17)])
    tailed = pld_module.PrivacyLossDistribution(pld_pmf.DensePLDPmf(1e-4, -4, probs, 0.0, pessimistic))
    point = pld_module.PrivacyLossDistribution(pld_pmf.DensePLDPmf(1e-4, 0, np.ones(1), 0.0, pessimistic))
    theirs, ours = tailed.compose(point), pld_arrays.compose(tailed, point)
    assert_same_pmf(ours._pmf_remove, theirs._pmf_remove)  # noqa: SLF001
    assert ours._pmf_remove._lower_loss == -1 and ours._pmf_remove._probs.size == 3  # noqa: SLF001


@pytest.mark.parametrize(("sigma", "q", "relation", "count"), COMPOSITIONS)
def test_the_truncation_bounds_equal_dp_accountings(sigma: float, q: float, relation: NeighboringRelation,
                                                    count: int) -> None:  # fmt: skip
    """The Chernoff bounds decide what is cut off into the mass at infinity: exactly dp-accounting's."""
    for pmf in _pmfs(_reference(sigma, q, relation)):
        if isinstance(pmf, pld_pmf.DensePLDPmf):
            probs = pmf._probs  # noqa: SLF001
            expected = common.compute_self_convolve_bounds(probs, count, pld_arrays.TAIL_MASS_TRUNCATION)
            assert pld_arrays._self_convolve_bounds(probs, count) == expected  # noqa: SLF001


def test_a_sparse_pmf_is_composed_by_dp_accounting() -> None:
    sparse = pld_module.from_randomized_response(0.1, num_buckets=4)
    assert isinstance(sparse._pmf_remove, pld_pmf.SparsePLDPmf)  # noqa: SLF001
    ours = pld_arrays.self_compose(sparse, 7)
    theirs = sparse.self_compose(7)
    for delta in (1e-3, 0.2):
        assert pld_arrays.epsilon_for_delta(ours, delta) == pytest.approx(theirs.get_epsilon_for_delta(delta))


@settings(max_examples=200, deadline=None)
@given(
    probs=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=60),
    lower_loss=st.integers(-1200, 3000),  # dp-accounting overflows below a loss of -709
    discretization=st.sampled_from([1e-4, 1e-2, 0.5]),
    infinity=st.floats(0.0, 0.05),
    delta=st.floats(1e-9, 0.5),
)
def test_epsilon_equals_dp_accountings_walk_on_any_dense_pmf(
    probs: list[float], lower_loss: int, discretization: float, infinity: float, delta: float
) -> None:
    """Any dense PMF (normalised with its mass at infinity), any δ: the same ε, ∞ and 0 included."""
    values = np.asarray(probs)
    if values.sum() == 0:
        values[0] = 1.0
    values = values / values.sum() * (1.0 - infinity)
    pmf = pld_pmf.DensePLDPmf(discretization, lower_loss, values, infinity, True)
    expected = pmf.get_epsilon_for_delta(delta)
    got = pld_arrays.epsilon_for_delta(pld_module.PrivacyLossDistribution(pmf), delta)
    if math.isinf(expected):
        assert math.isinf(got)
    else:
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_a_loss_too_large_for_its_exponential_returns_that_loss_as_dp_accounting_does() -> None:
    """e^{−L}·p underflows to 0 at L = 800: the walk stops at max(0, L)."""
    pmf = pld_pmf.DensePLDPmf(1.0, 800, np.array([0.5, 0.5]), 0.0, True)
    distribution = pld_module.PrivacyLossDistribution(pmf)
    assert pld_arrays.epsilon_for_delta(distribution, 0.3) == pmf.get_epsilon_for_delta(0.3) == 801.0


def test_the_accountant_reports_dp_accountings_epsilon_for_a_dp_fedavg_run() -> None:
    """The whole path (event → composed PLD → ε) against dp-accounting's PLDAccountant."""
    event = dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.05, dp_event.GaussianDpEvent(0.767)), 100)
    grid = pld_discretization(event)
    reference = pld.PLDAccountant(value_discretization_interval=grid).compose(event).get_epsilon(1e-3)
    clear_epsilon_memo()
    assert epsilon_for(event, 1e-3) == pytest.approx(reference, rel=1e-9)
