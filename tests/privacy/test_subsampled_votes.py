"""Events of weighted, Poisson-subsampled vote sums (issue 45), against independent computations.

Layers (../shared/STYLE.md, "Numbers are tested in layers"): at q = 1 and w = 1 the events
are PATE-FL's; a weighted Gaussian composition against the closed form of Balle & Wang
(2018, Thm 8) with μ = w·√Q/σ; the subsampled ones against dp-accounting's own PLD
accountant built here from dp-accounting's events (ADD_OR_REMOVE_ONE at the agent level,
REPLACE_ONE at the instance level); inequalities (amplification, monotonicity in w and q).
The agent-side release is tested statistically: its coin rate, and its noise on unsampled
queries, with tolerances from the sample size.
"""

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.privacy_accountant import NeighboringRelation
from scipy.optimize import brentq
from scipy.stats import norm

from fedvote.agents import teacher_votes
from fedvote.agents.agent import Agent
from fedvote.data.federation import LabeledData
from fedvote.errors import ConfigError, VoteRejected
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import pate_fl_events
from fedvote.privacy.subsampled_votes import SAMPLED_INSTANCE_BOUND_MAX_RATE, individual_vote_events

DELTA = 1e-3


def closed_form_epsilon(mu: float, delta: float) -> float:
    """ε of a μ-GDP mechanism at ``delta`` (Balle & Wang 2018, Thm 8), independent of fedvote."""

    def delta_at(epsilon: float) -> float:
        return norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon) * norm.cdf(-epsilon / mu - mu / 2)

    return brentq(lambda e: delta_at(e) - delta, 0.0, 200.0)


def dp_accounting_epsilon(inner: dp_event.DpEvent, count: int, relation: NeighboringRelation) -> float:
    """ε of ``count`` compositions of ``inner`` by dp-accounting's PLD accountant, called directly."""
    accountant = pld_privacy_accountant.PLDAccountant(
        neighboring_relation=relation, value_discretization_interval=1e-4
    )
    accountant.compose(inner, count)
    return accountant.get_epsilon(DELTA)


def test_weight_one_rate_one_is_pate_fl():
    assert individual_vote_events(7.0, 30) == pate_fl_events(7.0, 30)


@pytest.mark.parametrize("weight", [0.25, 0.5, 1.0, 1.7])
def test_weighted_sums_are_gaussian_with_mu_w_sqrt_q_over_sigma(weight):
    sigma, queries = 9.0, 100
    events = individual_vote_events(sigma, queries, weight=weight)
    assert events.agent_sensitivity == weight and events.instance_sensitivity == pytest.approx(math.sqrt(2) * weight)
    agent = epsilon_for(events.agent, DELTA)
    instance = epsilon_for(events.instance, DELTA)
    assert agent == pytest.approx(closed_form_epsilon(weight * math.sqrt(queries) / sigma, DELTA), rel=1e-4)
    assert instance == pytest.approx(
        closed_form_epsilon(math.sqrt(2) * weight * math.sqrt(queries) / sigma, DELTA), rel=1e-4
    )


@pytest.mark.parametrize(("rate", "weight"), [(0.5, 1.0), (0.2, 0.6), (0.9, 1.0)])
def test_sampled_agent_level_is_dp_accountings_poisson_subsampled_gaussian(rate, weight):
    sigma, queries = 4.0, 100
    ours = epsilon_for(individual_vote_events(sigma, queries, weight=weight, sampling_rate=rate).agent, DELTA)
    inner = dp_event.PoissonSampledDpEvent(rate, dp_event.GaussianDpEvent(sigma / weight))
    reference = dp_accounting_epsilon(inner, queries, NeighboringRelation.ADD_OR_REMOVE_ONE)
    assert ours == pytest.approx(reference, rel=1e-6)


def test_sampled_instance_level_is_dp_accountings_replace_one_pair_up_to_the_rate_cut():
    sigma, queries, rate = 4.0, 100, 0.5
    events = individual_vote_events(sigma, queries, sampling_rate=rate)
    inner = dp_event.PoissonSampledDpEvent(rate, dp_event.GaussianDpEvent(sigma))
    reference = dp_accounting_epsilon(inner, queries, NeighboringRelation.REPLACE_ONE)
    assert epsilon_for(events.instance, DELTA) == pytest.approx(reference, rel=1e-6)
    above = individual_vote_events(sigma, queries, sampling_rate=0.8)  # above 1/√2: the √2 Gaussian
    assert 0.8 > SAMPLED_INSTANCE_BOUND_MAX_RATE
    assert above.instance == pate_fl_events(sigma, queries).instance


def test_amplification_and_monotonicity():
    sigma, queries = 4.0, 100
    full = epsilon_for(individual_vote_events(sigma, queries).agent, DELTA)
    by_rate = [epsilon_for(individual_vote_events(sigma, queries, sampling_rate=q).agent, DELTA) for q in (0.1, 0.3, 0.6)]
    assert by_rate == sorted(by_rate) and by_rate[-1] < full  # sampling only lowers ε, less with larger q
    by_weight = [epsilon_for(individual_vote_events(sigma, queries, weight=w).agent, DELTA) for w in (0.3, 0.6, 1.0)]
    assert by_weight == sorted(by_weight)


def test_refusals_and_nothing_released():
    for rate in (0.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ConfigError) as error:
            individual_vote_events(4.0, 10, sampling_rate=rate)
        assert error.value.argument == "vote_sampling"
    nothing = individual_vote_events(4.0, 10, weight=0.0, sampling_rate=0.5)
    assert isinstance(nothing.agent, dp_event.NoOpDpEvent) and isinstance(nothing.instance, dp_event.NoOpDpEvent)


def make_agent(seed: int = 3) -> Agent:
    data = LabeledData(np.zeros((4, 2)), np.array([0, 1, 2, 3]))
    return Agent(
        agent_id=0, data=data, public_features=np.zeros((10, 2)), num_classes=4,
        noise_rng=np.random.default_rng(seed), seed=0,
    )


def test_the_agents_coins_sample_each_query_at_rate_q():
    """Without noise each row is w·e_y (sampled) or 0; the sampled share is q within 5 binomial std."""
    queries, rate, weight = 4000, 0.3, 0.7
    votes = np.eye(4)[np.arange(queries) % 4]  # (Q, C) one-hot
    released = teacher_votes.release_individual_votes(
        make_agent(), votes, weight=weight, sampling_rate=rate, noise_std=0.0, num_queries=queries
    )
    totals = released.sum(axis=1)  # (Q,)
    assert set(np.round(totals, 12)) <= {0.0, weight}
    sampled = np.mean(totals > 0)
    assert abs(sampled - rate) < 5 * math.sqrt(rate * (1 - rate) / queries)
    kept = totals > 0
    assert np.array_equal(released[kept] / weight, votes[kept])  # a sampled row is the weighted vote


def test_unsampled_queries_still_carry_the_noise_share():
    """Every row gets N(0, s²): the sample std of the unsampled rows is s within 5 standard errors."""
    queries, std = 4000, 2.0
    votes = np.eye(4)[np.zeros(queries, dtype=int)]
    released = teacher_votes.release_individual_votes(
        make_agent(), votes, weight=1.0, sampling_rate=0.01, noise_std=std, num_queries=queries
    )
    values = released[:, 1:].ravel()  # classes never voted: pure noise on every query
    assert abs(values.std() - std) < 5 * std / math.sqrt(2 * values.size)
    assert abs(values.mean()) < 5 * std / math.sqrt(values.size)


def test_the_exit_refuses_a_vote_heavier_than_the_weight():
    with pytest.raises(VoteRejected):
        teacher_votes.release_individual_votes(
            make_agent(), 2 * np.eye(4)[:3], weight=1.0, sampling_rate=1.0, noise_std=0.0, num_queries=3
        )


def test_without_the_pld_accountant_the_instance_level_takes_no_sampling_credit():
    """Only the PLD accountant computes the sampled REPLACE_ONE pair: others get the √2·w Gaussian."""
    from fedvote.methods.options.voting import PateFLOptions
    from fedvote.methods.pate_fl import PateFL

    events = individual_vote_events(4.0, 30, sampling_rate=0.5, sampled_instance=False)
    assert events.instance == pate_fl_events(4.0, 30).instance
    options = PateFLOptions(vote_sampling=0.5)
    for accountant, sampled in (("pld", True), ("rdp", False), ("classic", False)):
        method = PateFL(sigma=4.0, queries=30, min_responders=1, release_options=options, accountant=accountant)
        planned = method.planned_events()
        assert (planned.instance != pate_fl_events(4.0, 30).instance) is sampled
        assert planned.agent == individual_vote_events(4.0, 30, sampling_rate=0.5).agent
