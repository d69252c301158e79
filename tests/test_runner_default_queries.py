"""Q when none is given (``fedvote.runner.default_queries``, ``plan``): from the pool's size, fewer at a small ε."""

from __future__ import annotations

import pytest

from fedvote.data.federation import PublicMetadata
from fedvote.runner import (
    DEFAULT_MAX_QUERIES,
    DEFAULT_MIN_QUERIES,
    MAX_DEFAULT_VOTE_NOISE_SHARE,
    POOL_POINTS_PER_QUERY,
    default_queries,
    make_federation,
    plan,
)
from fedvote.settings import build_config


@pytest.mark.parametrize(
    ("pool", "queries"),
    [
        (40, 40),  # a pool smaller than the minimum: all of it
        (270, 100),  # digits: the minimum
        (1_500, 100),  # 100 per 15 points is still the minimum
        (2_250, 150),  # one per 15 points
        (3_000, 200),  # MNIST's pool (30 % of its test set): the maximum
        (7_291, 200),  # USPS' training set as a pool: capped
    ],
)
def test_one_query_per_15_pool_points_between_100_and_200(pool: int, queries: int):
    assert default_queries(pool) == queries


def test_the_rule_at_its_bounds():
    assert default_queries(DEFAULT_MIN_QUERIES * POOL_POINTS_PER_QUERY) == DEFAULT_MIN_QUERIES
    assert default_queries(DEFAULT_MAX_QUERIES * POOL_POINTS_PER_QUERY - 1) == DEFAULT_MAX_QUERIES - 1
    assert default_queries(10**6) == DEFAULT_MAX_QUERIES
    assert default_queries(1) == 1


def test_a_planned_run_asks_the_default_and_a_given_q_wins():
    config = build_config("pate-fl")  # digits: a 270-point pool
    public = make_federation(config).public_metadata()
    assert plan(config, public).queries == default_queries(public.pool_size) == 100
    assert plan(build_config("pate-fl", queries=37), public).queries == 37


# The voting paper's MNIST federation as the server sees it: 100 agents of 600 records, a
# 3,000-point pool (default Q 200), 28x28 images.
MNIST_PUBLIC = PublicMetadata(
    pool_size=3_000, num_agents=100, num_classes=10, example_shape=(1, 28, 28), agent_records=(600,) * 100
)


@pytest.mark.parametrize("method", ["pate-fl", "private-knn-fl"])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 1.5, 2.0, 4.3])
def test_a_small_target_epsilon_asks_fewer_queries_exactly_when_q_200_is_too_noisy(method: str, epsilon: float):
    """Q = 100 where σ calibrated at Q = 200 would exceed N/4 (25 for 100 agents), else Q = 200."""
    config = build_config(method, epsilon=epsilon, delta=1e-3)
    at_200 = plan(build_config(method, epsilon=epsilon, delta=1e-3, queries=200), MNIST_PUBLIC)
    planned = plan(config, MNIST_PUBLIC)
    too_noisy = at_200.sigma > MAX_DEFAULT_VOTE_NOISE_SHARE * MNIST_PUBLIC.num_agents
    assert planned.queries == (DEFAULT_MIN_QUERIES if too_noisy else DEFAULT_MAX_QUERIES)
    assert too_noisy == (epsilon < 2.0)  # σ at Q = 200: 65.2, 36.4, 25.9 | 20.4, 11.0
    if too_noisy:  # calibrated again at Q = 100: √2 less noise for the same ε
        again = plan(build_config(method, epsilon=epsilon, delta=1e-3, queries=100), MNIST_PUBLIC)
        assert planned.sigma == again.sigma < at_200.sigma


def test_a_given_q_or_sigma_is_never_changed():
    """The user's Q stands at any ε; with σ given there is no calibration for Q to change."""
    assert plan(build_config("pate-fl", epsilon=0.5, delta=1e-3, queries=200), MNIST_PUBLIC).queries == 200
    assert plan(build_config("pate-fl", sigma=80.0), MNIST_PUBLIC).queries == DEFAULT_MAX_QUERIES
