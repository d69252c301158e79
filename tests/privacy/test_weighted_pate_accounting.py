"""Reputation-weighted voting: sensitivities by brute force, events against dp-accounting.

The weights are computed *agent-side* from the agent's own validation accuracy and public
values (the rule, the released accuracy histogram), so changing one agent's data moves
only that agent's weighted vote (docs/privacy.md, "Reputation-weighted voting").
"""

import itertools
import math

import numpy as np
import pytest
from dp_accounting import dp_event, pld

from fedvote.aggregation.voting import WeightRule, accuracy_bin
from fedvote.privacy.accountant import epsilon_for, gaussian_mu
from fedvote.privacy.events import (
    accuracy_summary_events,
    pate_fl_events,
    weighted_pate_events,
    weighted_voting_events,
)

C = 3
ACCURACIES = np.linspace(0.0, 1.0, 11)
HISTOGRAM = np.array([1.0, 0.0, 2.0, 0.0, 3.0, 0.0, 1.0, 0.0, 4.0, 2.0])  # a released summary


def weighted_vote(rule, accuracy, label):
    vote = np.zeros(C)
    vote[label] = rule.weight(accuracy)
    return vote


@pytest.mark.parametrize("scheme", ["accuracy", "percentile", "zscore", "rank"])
@pytest.mark.parametrize("w_range", [(0.1, 3.0), (0.5, 1.0), (0.0, 2.0)])
def test_local_weights_give_sensitivity_w_max_and_root2_w_max(scheme, w_range):
    rule = WeightRule(scheme, *w_range, histogram=HISTOGRAM)
    w_max = w_range[1]
    cases = list(itertools.product(ACCURACIES, range(C)))
    # agent level (zero-out): the agent's weighted vote against zeros
    agent = max(np.linalg.norm(weighted_vote(rule, a, y)) for a, y in cases)
    # instance level: one record changes both the vote and the accuracy (so the weight)
    instance = max(
        np.linalg.norm(weighted_vote(rule, a, y) - weighted_vote(rule, b, z))
        for (a, y), (b, z) in itertools.product(cases, cases)
    )
    assert agent <= w_max + 1e-12
    assert instance <= math.sqrt(2) * w_max + 1e-12
    events = weighted_voting_events(10.0, 1, w_max) if w_max > 0 else None
    assert events is not None and events.agent_sensitivity == pytest.approx(w_max)
    assert events.instance_sensitivity == pytest.approx(math.sqrt(2) * w_max)
    if scheme == "accuracy" and w_range[0] == 0.0:  # attained: a = 1 gives w_max
        assert agent == pytest.approx(w_max)
        assert instance == pytest.approx(math.sqrt(2) * w_max)


def test_the_whole_sum_moves_by_root2_w_max_when_one_agent_changes():
    """Three agents, two queries: the sum of weighted votes, one agent's (accuracy, votes) varied."""
    rule = WeightRule("zscore", 0.1, 3.0, histogram=HISTOGRAM)
    others = [(0.7, (0, 1)), (0.4, (2, 2))]
    base = sum(np.stack([weighted_vote(rule, a, y) for y in ys]) for a, ys in others)  # (Q, C)
    worst = 0.0
    options = list(itertools.product(ACCURACIES, itertools.product(range(C), repeat=2)))
    totals = [base + np.stack([weighted_vote(rule, a, y) for y in ys]) for a, ys in options]
    for first, second in itertools.combinations(totals, 2):
        worst = max(worst, float(np.max(np.linalg.norm(first - second, axis=1))))  # per query
    assert worst <= math.sqrt(2) * 3.0 + 1e-12


def test_relative_weights_from_the_others_exact_accuracies_would_break_the_bound():
    """Why the summary is released: z-scores over the *exact* accuracies couple the agents."""

    def exact_zscore_weights(accuracies):
        a = np.asarray(accuracies)
        z = (a - a.mean()) / a.std() if a.std() > 0 else np.zeros_like(a)
        return 0.1 + np.clip((z + 1) / 2, 0, 1) * 2.9

    worst = 0.0
    for a0, b0 in itertools.product(ACCURACIES, ACCURACIES):
        others = [0.5, 0.6] * 10  # 21 agents, all voting the same class
        before = exact_zscore_weights([a0, *others]).sum()
        after = exact_zscore_weights([b0, *others]).sum()
        worst = max(worst, abs(before - after))
    assert worst > math.sqrt(2) * 3.0


def test_accuracy_summary_sensitivity_by_brute_force():
    bins = 10

    def share(a):
        one_hot = np.zeros(bins)
        one_hot[accuracy_bin(a, bins)] = 1.0
        return one_hot

    assert max(np.linalg.norm(share(a)) for a in ACCURACIES) == pytest.approx(1.0)
    instance = max(np.linalg.norm(share(a) - share(b)) for a, b in itertools.product(ACCURACIES, ACCURACIES))
    assert instance == pytest.approx(math.sqrt(2))
    events = accuracy_summary_events(8.0)
    assert (events.agent_sensitivity, events.instance_sensitivity) == (1.0, pytest.approx(math.sqrt(2)))


def test_one_vote_is_pate_fl():
    assert weighted_pate_events(12.0, 50, 1.0) == pate_fl_events(12.0, 50)


@pytest.mark.parametrize("level, factor", [("agent", 1.0), ("instance", math.sqrt(2))])
def test_weighted_pate_events_against_dp_accounting(level, factor):
    sigma, queries, w_max, summary_sigma, delta = 30.0, 200, 3.0, 8.0, 1e-5
    event = weighted_pate_events(sigma, queries, w_max, summary_sigma).at(level)
    # closed form: μ² = Q (s/σ)² + (s_summary/σ_s)²
    mu = math.sqrt(queries * (factor * w_max / sigma) ** 2 + (factor / summary_sigma) ** 2)
    assert gaussian_mu(event) == pytest.approx(mu)
    independent = pld.PLDAccountant().compose(
        dp_event.ComposedDpEvent(
            [
                dp_event.GaussianDpEvent(summary_sigma / factor),
                dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(sigma / (factor * w_max)), queries),
            ]
        )
    )
    assert epsilon_for(event, delta, "pld") == pytest.approx(independent.get_epsilon(delta), rel=1e-3)
    assert epsilon_for(event, delta, "exact") <= epsilon_for(event, delta, "pld") + 1e-6


def test_the_summary_costs_privacy_and_weights_raise_sigma_at_equal_epsilon():
    delta = 1e-3
    plain = epsilon_for(weighted_pate_events(30.0, 100, 3.0).agent, delta)
    with_summary = epsilon_for(weighted_pate_events(30.0, 100, 3.0, 8.0).agent, delta)
    one_vote = epsilon_for(weighted_pate_events(10.0, 100, 1.0).agent, delta)
    assert with_summary > plain
    assert one_vote == pytest.approx(plain)  # σ scales with w_max at equal ε
