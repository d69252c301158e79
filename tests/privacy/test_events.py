"""Event builders: sensitivities (brute force where it matters) and ε against dp-accounting
computed independently here."""

import itertools
import math
import sys

import numpy as np
import pytest
from dp_accounting import dp_event, pld
from hypothesis import given, settings
from hypothesis import strategies as st

from fedvote.errors import ConfigError
from fedvote.privacy.accountant import epsilon_for, gaussian_mu
from fedvote.privacy.events import (
    dp_fedavg_events,
    dp_fedsgd_events,
    dp_sgd_event,
    multilabel_events,
    private_knn_fl_events,
    private_knn_fl_sensitivity,
    replace_one,
    weighted_voting_events,
)

# --- Private-kNN-FL: the tight instance-level sensitivity √2/k, by brute force ---------------


def knn_vote(features, labels, query, k, num_classes):
    """Mean of the labels of the k nearest records; ties broken by record index (stable)."""
    distances = np.sum((features - query) ** 2, axis=1)
    order = np.lexsort((np.arange(len(labels)), distances))  # distance first, then index
    return np.bincount(labels[order[:k]], minlength=num_classes) / k


GRID = np.array(list(itertools.product(range(3), range(3))), dtype=float)  # 9 points: many ties


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_knn_vote_moves_at_most_root2_over_k_under_replace_one(k):
    rng = np.random.default_rng(k)
    num_classes = 3
    bound = private_knn_fl_sensitivity(k, "instance", "tight")
    assert bound == pytest.approx(math.sqrt(2) / k)
    largest = 0.0
    for _ in range(12):  # small random agent datasets
        n = int(rng.integers(k, k + 4))
        features = GRID[rng.integers(0, len(GRID), size=n)]
        labels = rng.integers(0, num_classes, size=n)
        query = rng.uniform(-0.5, 2.5, size=2)
        if rng.random() < 0.3:
            query = GRID[rng.integers(0, len(GRID))]  # exact ties in distance too
        vote = knn_vote(features, labels, query, k, num_classes)
        for index in range(n):  # every replace-one neighbour with features on the grid
            for point, label in itertools.product(GRID, range(num_classes)):
                new_features = features.copy()
                new_labels = labels.copy()
                new_features[index] = point
                new_labels[index] = label
                moved = np.linalg.norm(knn_vote(new_features, new_labels, query, k, num_classes) - vote)
                assert moved <= bound + 1e-12
                largest = max(largest, moved)
    assert largest == pytest.approx(bound)  # the bound is attained: it is tight
    if k >= 2:
        assert private_knn_fl_sensitivity(k, "instance", "paper") > bound


def test_knn_agent_level_vote_norm_is_at_most_one():
    rng = np.random.default_rng(0)
    for k in (1, 3, 7):
        for _ in range(50):
            labels = rng.integers(0, 5, size=k + 3)
            vote = knn_vote(rng.normal(size=(k + 3, 2)), labels, np.zeros(2), k, 5)
            assert np.linalg.norm(vote) <= private_knn_fl_sensitivity(k, "agent") + 1e-12


@pytest.mark.parametrize("k", [1, 5, 30])
def test_private_knn_fl_events_match_theorem3_rdp_and_the_tight_gaussian(k):
    sigma, queries = 15.0, 400
    events = private_knn_fl_events(sigma, queries, k)
    # Theorem 3, agent level: the same as PATE-FL, μ = √Q/σ
    assert gaussian_mu(events.agent) == pytest.approx(math.sqrt(queries) / sigma)
    # paper: RDP Qα/(kσ²) ⇔ μ² = 2Q/(kσ²); tight: μ² = 2Q/(k²σ²)
    paper = private_knn_fl_events(sigma, queries, k, bound="paper")
    assert gaussian_mu(paper.instance) ** 2 == pytest.approx(2 * queries / (k * sigma**2))
    assert gaussian_mu(events.instance) ** 2 == pytest.approx(2 * queries / (k**2 * sigma**2))
    independent = pld.PLDAccountant().compose(dp_event.GaussianDpEvent(sigma * k / math.sqrt(2)), queries)
    assert epsilon_for(events.instance, 1e-4) == pytest.approx(independent.get_epsilon(1e-4), rel=1e-9)


@pytest.mark.parametrize(("k", "bound"), [(0, "tight"), (2.5, "tight"), (True, "tight"), (3, "loose")])
def test_private_knn_fl_rejects_bad_input(k, bound):
    with pytest.raises(ConfigError):
        private_knn_fl_events(10.0, 10, k, bound)


# --- weighted voting and multi-label votes -------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    st.floats(0.01, 10.0), st.floats(0.0, 1.0), st.floats(0.0, 1.0),
    st.integers(0, 4), st.integers(0, 4),
)
def test_weighted_vote_moves_at_most_root2_wmax(w_max, a, b, label_a, label_b):
    w, w_new = a * w_max, b * w_max  # any weights in [0, w_max]
    events = weighted_voting_events(10.0, 5, w_max)
    zero_out = np.linalg.norm(w * np.eye(5)[label_a])
    replaced = np.linalg.norm(w * np.eye(5)[label_a] - w_new * np.eye(5)[label_b])
    assert zero_out <= events.agent_sensitivity * (1 + 1e-12)
    assert replaced <= events.instance_sensitivity * (1 + 1e-12)


def test_weighted_voting_events_scale_with_the_max_weight():
    events = weighted_voting_events(20.0, 100, 2.0)
    assert gaussian_mu(events.agent) == pytest.approx(2.0 * 10 / 20.0)
    assert gaussian_mu(events.instance) == pytest.approx(2.0 * math.sqrt(2) * 10 / 20.0)
    with pytest.raises(ConfigError):
        weighted_voting_events(20.0, 100, 0.0)


@pytest.mark.parametrize("tau", [1, 2, 4])
def test_multilabel_sensitivity_by_enumeration(tau):
    num_classes = 2 * tau + 1  # room for two disjoint sets of τ labels
    votes = [
        np.array(v, dtype=float)
        for v in itertools.product((0, 1), repeat=num_classes)
        if sum(v) <= tau
    ]
    events = multilabel_events(50.0, 10, tau)
    assert max(np.linalg.norm(v) for v in votes) == pytest.approx(events.agent_sensitivity)
    largest = max(np.linalg.norm(u - v) for u in votes for v in votes)
    assert largest == pytest.approx(events.instance_sensitivity)
    assert events.instance_sensitivity == pytest.approx(math.sqrt(2 * tau))
    with pytest.raises(ConfigError):
        multilabel_events(50.0, 10, 0)


# --- gradient-based baselines --------------------------------------------------------------


def test_dp_sgd_event_matches_dp_accounting():
    q, z, steps = 0.01, 1.1, 1000
    event = dp_sgd_event(q, z, steps)
    independent = pld.PLDAccountant().compose(
        dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), steps
    )
    assert epsilon_for(event, 1e-5, "pld") == pytest.approx(independent.get_epsilon(1e-5), rel=1e-3)
    # Abadi et al. 2016's setting (q = 0.01, z = 1.1, 10k steps... here 1k): ε well below 2
    assert epsilon_for(event, 1e-5, "pld") < 2.0


def test_dp_sgd_degenerate_cases():
    assert isinstance(dp_sgd_event(0.1, 1.0, 0), dp_event.NoOpDpEvent)
    assert isinstance(dp_sgd_event(0.0, 1.0, 10), dp_event.NoOpDpEvent)
    assert isinstance(dp_sgd_event(0.1, 0.0, 10), dp_event.NonPrivateDpEvent)
    assert dp_sgd_event(1.0, 2.0, 7) == dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(2.0), 7)
    for args in ((1.5, 1.0, 10), (0.1, -1.0, 10), (0.1, 1.0, -1)):
        with pytest.raises(ConfigError):
            dp_sgd_event(*args)


def test_dp_fedsgd_has_no_agent_level_guarantee():
    events = dp_fedsgd_events(0.05, 1.0, 100)
    assert math.isinf(epsilon_for(events.agent, 1e-3))
    assert events.instance == replace_one(dp_sgd_event(0.05, 1.0, 100))  # replace-one record


def test_dp_fedavg_events():
    # Appendix F of the voting paper: q = 0.05, σ = 0.06·... here a noise multiplier z = 1.
    q, z, rounds = 0.05, 1.0, 200
    events = dp_fedavg_events(q, z, rounds)
    independent = pld.PLDAccountant().compose(
        dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), rounds
    )
    assert epsilon_for(events.agent, 1e-3) == pytest.approx(independent.get_epsilon(1e-3), rel=1e-3)
    # instance level: replace-one moves one sampled agent's clipped update by up to 2S, and
    # the agent's sampling (hidden from the server) amplifies it
    assert events.instance == replace_one(events.agent)
    assert epsilon_for(events.instance, 1e-3) == pytest.approx(5.137, abs=0.01)  # dp-accounting 0.6.0 PLD
    # every agent visible to the server (Algorithm 5 without secure aggregation): no sampling credit
    visible = dp_fedavg_events(q, z, rounds, visible_to_server=50)
    assert gaussian_mu(visible.agent) == pytest.approx(math.sqrt(rounds * 50) / z)
    assert gaussian_mu(visible.instance) == pytest.approx(2.0 * math.sqrt(rounds * 50) / z)


def test_a_subnormal_sampling_rate_is_rounded_up_to_a_normal_float():
    """q = 1e-320 broke dp-accounting's PLD (inf - inf); rounding q up can only raise ε."""
    from fedvote.privacy.events import poisson_sampled

    event = poisson_sampled(1e-320, dp_event.GaussianDpEvent(4.0))
    assert event.sampling_probability == sys.float_info.min
    assert poisson_sampled(1.0, dp_event.GaussianDpEvent(4.0)) == dp_event.GaussianDpEvent(4.0)
    tiny = epsilon_for(dp_sgd_event(1e-320, 4.0, 5), 1e-3)
    assert 0.0 <= tiny <= epsilon_for(dp_sgd_event(1e-6, 4.0, 5), 1e-3)
