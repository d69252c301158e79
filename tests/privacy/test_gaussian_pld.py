"""fedvote's vectorised Gaussian PLD against dp-accounting's own ``from_gaussian_mechanism``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event, pld
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_module
from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType, GaussianPrivacyLoss
from dp_accounting.privacy_accountant import NeighboringRelation

from fedvote.privacy.accountant import clear_epsilon_memo, epsilon_for
from fedvote.privacy.events import ReplaceOneDpEvent
from fedvote.privacy.gaussian_pld import VectorisedGaussianPrivacyLoss, connect_dots_pmf, gaussian_pld

ADD_OR_REMOVE = NeighboringRelation.ADD_OR_REMOVE_ONE
REPLACE = NeighboringRelation.REPLACE_ONE

# (σ, q, relation, grid): DP-FedAvg's digits and MNIST defaults, PATE's unsampled votes, extreme
# rates on both sides, tiny and large noise, a coarse grid.
CASES = [
    (0.767, 0.05, ADD_OR_REMOVE, 1e-4),
    (0.767, 0.05, REPLACE, 1e-4),
    (10.99, 1.0, ADD_OR_REMOVE, 1e-4),
    (2.0, 1.0, REPLACE, 1e-4),
    (1.1, 0.01, ADD_OR_REMOVE, 1e-3),
    (0.5, 0.3, REPLACE, 1e-4),
    (4.0, 0.999, ADD_OR_REMOVE, 1e-4),
    (0.3, 1e-6, ADD_OR_REMOVE, 1e-4),
    (25.0, 0.5, REPLACE, 1e-4),
]


def _pmfs(distribution: pld_module.PrivacyLossDistribution) -> list:
    return [distribution._pmf_remove, distribution._pmf_add]  # noqa: SLF001 - the PMFs compared


@pytest.mark.parametrize(("sigma", "q", "relation", "grid"), CASES)
def test_the_pld_equals_dp_accountings_own(sigma: float, q: float, relation: NeighboringRelation,
                                           grid: float) -> None:  # fmt: skip
    """Same grid offset, same length, probabilities within a few ulps of the reference."""
    reference = pld_module.from_gaussian_mechanism(
        sigma, value_discretization_interval=grid, sampling_prob=q, neighboring_relation=relation
    )
    ours = gaussian_pld(sigma, grid, sampling_prob=q, neighboring_relation=relation)
    for theirs, mine in zip(_pmfs(reference), _pmfs(ours), strict=True):
        assert mine._lower_loss == theirs._lower_loss  # noqa: SLF001
        assert mine._probs.shape == theirs._probs.shape  # noqa: SLF001
        np.testing.assert_allclose(mine._probs, theirs._probs, rtol=0, atol=1e-11)  # noqa: SLF001
        assert mine._infinity_mass == pytest.approx(theirs._infinity_mass, abs=1e-15)  # noqa: SLF001
    for delta in (1e-3, 1e-5):
        expected = reference.self_compose(50).get_epsilon_for_delta(delta)
        assert ours.self_compose(50).get_epsilon_for_delta(delta) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("adjacency", [AdjacencyType.ADD, AdjacencyType.REMOVE, AdjacencyType.REPLACE])
@pytest.mark.parametrize("q", [1.0, 0.05, 0.7])
def test_delta_for_epsilon_equals_the_scalar_reference_on_and_off_the_boundaries(
    adjacency: AdjacencyType, q: float
) -> None:
    """Every ε, including 0 and the sampled loss's bounds ±log(1 − q), one at a time in dp-accounting."""
    arguments = {"sensitivity": 1.0, "sampling_prob": q, "adjacency_type": adjacency}
    reference = GaussianPrivacyLoss(0.9, **arguments)
    ours = VectorisedGaussianPrivacyLoss(0.9, **arguments)
    bounds = [] if q == 1.0 else [math.log1p(-q), -math.log1p(-q), math.log1p(-q) * (1 + 1e-12)]
    epsilons = np.concatenate([np.linspace(-6.0, 6.0, 241), [0.0, 1e-12, -1e-12], bounds])
    expected = np.array([reference.get_delta_for_epsilon(float(e)) for e in epsilons])
    np.testing.assert_allclose(ours.get_delta_for_epsilon(epsilons), expected, rtol=1e-12, atol=1e-15)
    assert ours.get_delta_for_epsilon(1.5) == pytest.approx(reference.get_delta_for_epsilon(1.5), rel=1e-12)


@pytest.mark.parametrize(
    "event",
    [
        dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.05, dp_event.GaussianDpEvent(0.767)), 100),
        ReplaceOneDpEvent(
            dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.05, dp_event.GaussianDpEvent(0.767)), 100)
        ),
        dp_event.ComposedDpEvent([dp_event.GaussianDpEvent(3.0), dp_event.SelfComposedDpEvent(
            dp_event.PoissonSampledDpEvent(0.2, dp_event.GaussianDpEvent(1.3)), 7)]),  # fmt: skip
    ],
)
def test_fedvotes_accountant_reports_dp_accountings_epsilon(event: dp_event.DpEvent) -> None:
    """The accountant that builds its Gaussians here agrees with dp-accounting's PLD accountant."""
    clear_epsilon_memo()
    relation = REPLACE if isinstance(event, ReplaceOneDpEvent) else ADD_OR_REMOVE
    inner = event.event if isinstance(event, ReplaceOneDpEvent) else event
    reference = pld.PLDAccountant(relation, value_discretization_interval=1e-4).compose(inner)
    assert epsilon_for(event, 1e-3) == pytest.approx(reference.get_epsilon(1e-3), rel=1e-9)


@pytest.mark.parametrize(("size", "lowest"), [(1, 3), (2, -1), (1000, -500), (1001, -500), (40_000, -17_000)])
def test_the_connect_the_dots_pmf_is_dp_accountings_to_the_bit(size: int, lowest: int, assert_same_pmf) -> None:
    """Built from the same δ(ε) array: the same kind of PMF, offset, probabilities and +∞ mass.

    The δ are random non-increasing values in [0, 1] with small rises inside dp-accounting's
    tolerance (which both flatten), and a final stretch of equal values (zero probabilities).
    """
    rng = np.random.default_rng(size)
    deltas = np.sort(rng.uniform(0.0, 0.9, size))[::-1].copy()  # (size,)
    if size > 2:
        deltas[size // 3] += 5e-8  # a rise within the tolerance
        deltas[-(size // 4) :] = deltas[-(size // 4)]
    expected = pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(1e-4, lowest, lowest + size - 1, deltas)
    assert_same_pmf(connect_dots_pmf(1e-4, lowest, deltas), expected)


@pytest.mark.parametrize(
    "deltas",
    [np.linspace(0.5, 1.2, 2000), np.linspace(0.5, -0.1, 2000), np.linspace(0.1, 0.5, 2000)],
    ids=["above one", "below zero", "increasing"],
)
def test_the_connect_the_dots_pmf_refuses_what_is_not_a_divergence_curve(deltas: np.ndarray) -> None:
    """δ outside [0, 1], or rising with ε beyond rounding, is refused as dp-accounting refuses it."""
    with pytest.raises(ValueError, match="hockey-stick"):
        connect_dots_pmf(1e-4, 0, deltas)
    with pytest.raises(ValueError):
        pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(1e-4, 0, deltas.size - 1, deltas)
