"""Replace-one events inside fedvote's compositions, checked against independent computations."""

from __future__ import annotations

import math

import pytest
from dp_accounting import dp_event, pld
from dp_accounting.pld import privacy_loss_distribution
from dp_accounting.privacy_accountant import NeighboringRelation
from scipy import integrate, optimize, stats

from fedvote.errors import ConfigError
from fedvote.privacy.accountant import ACCOUNTANTS, epsilon_for, gaussian_epsilon
from fedvote.privacy.events import LevelEvents, ReplaceOneDpEvent, replace_one
from fedvote.privacy.ledger import PersistentLedger, event_from_json, event_to_json

DELTA = 1e-5


def _poisson(q: float, z: float) -> dp_event.DpEvent:
    return dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z))


@pytest.mark.parametrize("kind", ACCOUNTANTS)
def test_replace_one_gaussian_is_sensitivity_two_in_every_accountant(kind: str) -> None:
    z = 3.0
    wrapped = dp_event.SelfComposedDpEvent(replace_one(dp_event.GaussianDpEvent(z)), 4)
    folded = dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(z / 2.0), 4)
    assert epsilon_for(wrapped, DELTA, kind) == pytest.approx(epsilon_for(folded, DELTA, kind), rel=1e-9)
    if kind == "exact":  # μ = 2·√4/z
        assert epsilon_for(wrapped, DELTA, kind) == pytest.approx(gaussian_epsilon(4.0 / z, DELTA), rel=1e-12)


def test_replace_one_poisson_gaussian_is_dp_accountings_replace_one_pld() -> None:
    q, z, steps = 0.05, 1.0, 30
    ours = epsilon_for(dp_event.SelfComposedDpEvent(replace_one(_poisson(q, z)), steps), DELTA, "pld")
    theirs = pld.PLDAccountant(NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-4)
    theirs.compose(_poisson(q, z), steps)
    assert ours == pytest.approx(theirs.get_epsilon(DELTA), rel=1e-9)


def _hockey_stick(epsilon: float, q: float, z: float) -> float:
    """δ(ε) of one replace-one Poisson-sampled Gaussian step, by numerical integration.

    P = (1−q)N(0, z²) + qN(1, z²), Q = (1−q)N(0, z²) + qN(−1, z²): the pair of a sum of
    clipped (norm ≤ 1) contributions whose one record, sampled with probability q, points
    one way or the opposite. The pair is symmetric, so one direction suffices.
    """

    def p(x: float) -> float:
        return (1 - q) * stats.norm.pdf(x, 0, z) + q * stats.norm.pdf(x, 1, z)

    def r(x: float) -> float:
        return (1 - q) * stats.norm.pdf(x, 0, z) + q * stats.norm.pdf(x, -1, z)

    value, _ = integrate.quad(lambda x: max(0.0, p(x) - math.exp(epsilon) * r(x)), -12 * z, 12 * z, limit=400)
    return value


def test_one_replace_one_sampled_step_matches_numerical_integration() -> None:
    q, z, delta = 0.2, 0.8, 1e-3
    exact = optimize.brentq(lambda e: _hockey_stick(e, q, z) - delta, 1e-6, 20.0, xtol=1e-10)
    ours = epsilon_for(replace_one(_poisson(q, z)), delta, "pld")
    assert exact <= ours <= exact + 0.01  # PLD is pessimistic, by its discretisation at most


def test_a_composition_mixing_relations_composes_the_two_plds() -> None:
    """A folded Gaussian release (add/remove convention) then replace-one sampled steps."""
    q, z, steps, vote_sigma = 0.02, 0.9, 50, 12.0
    event = dp_event.ComposedDpEvent(
        [dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(vote_sigma), 10), replace_one(_poisson(q, z))]
    )
    event = dp_event.ComposedDpEvent([event, dp_event.SelfComposedDpEvent(replace_one(_poisson(q, z)), steps - 1)])
    votes = privacy_loss_distribution.from_gaussian_mechanism(
        vote_sigma / math.sqrt(10), value_discretization_interval=1e-4
    )
    sampled = privacy_loss_distribution.from_gaussian_mechanism(
        z,
        sampling_prob=q,
        neighboring_relation=NeighboringRelation.REPLACE_ONE,
        value_discretization_interval=1e-4,
    ).self_compose(steps)
    reference = votes.compose(sampled).get_epsilon_for_delta(DELTA)
    assert epsilon_for(event, DELTA, "pld") == pytest.approx(reference, rel=1e-6)
    assert epsilon_for(event, DELTA, "pld") > epsilon_for(dp_event.SelfComposedDpEvent(
        dp_event.GaussianDpEvent(vote_sigma), 10), DELTA, "pld")


def test_replace_one_is_never_below_add_or_remove_for_poisson_sampling() -> None:
    for q, z in [(0.01, 0.7), (0.05, 1.0), (0.3, 2.0)]:
        add_remove = epsilon_for(dp_event.SelfComposedDpEvent(_poisson(q, z), 20), DELTA, "pld")
        replace = epsilon_for(dp_event.SelfComposedDpEvent(replace_one(_poisson(q, z)), 20), DELTA, "pld")
        assert replace >= add_remove


@pytest.mark.parametrize("kind", ["rdp", "classic", "exact"])
def test_accountants_without_a_replace_one_sampled_bound_refuse_it_by_name(kind: str) -> None:
    with pytest.raises(ConfigError) as raised:
        epsilon_for(replace_one(_poisson(0.05, 1.0)), DELTA, kind)
    assert raised.value.argument == "accountant"


def test_non_private_parts_stay_unbounded_inside_replace_one() -> None:
    assert math.isinf(epsilon_for(ReplaceOneDpEvent(dp_event.SelfComposedDpEvent(
        dp_event.NonPrivateDpEvent(), 2)), DELTA, "pld"))
    assert replace_one(dp_event.NoOpDpEvent()) == dp_event.NoOpDpEvent()


def test_replace_one_events_survive_the_ledger(tmp_path) -> None:
    event = dp_event.SelfComposedDpEvent(replace_one(_poisson(0.05, 1.0)), 7)
    assert event_from_json(event_to_json(event)) == event
    release = LevelEvents(
        agent=dp_event.GaussianDpEvent(5.0), instance=event, agent_sensitivity=1.0, instance_sensitivity=2.0
    )
    ledger = PersistentLedger(
        tmp_path / "l.db", federation="f", budget_epsilon=None, delta=DELTA, level="agent", accountant="pld"
    )
    expected = epsilon_for(dp_event.SelfComposedDpEvent(replace_one(_poisson(0.05, 1.0)), 14), DELTA, "pld")
    with ledger:
        ledger.charge(release)
        ledger.charge(release)
        assert ledger.spent("instance") == pytest.approx(expected, rel=1e-6)
    reopened = PersistentLedger(
        tmp_path / "l.db", federation="f", budget_epsilon=None, delta=DELTA, level="agent", accountant="pld"
    )
    with reopened:  # a later run reads the stored replace-one events back
        assert reopened.spent("instance") == pytest.approx(expected, rel=1e-6)
