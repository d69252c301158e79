"""Q when none is given (``fedvote.runner.default_queries``): from the pool's size alone."""

from __future__ import annotations

import pytest

from fedvote.methods.settings import build_config
from fedvote.runner import (
    DEFAULT_MAX_QUERIES,
    DEFAULT_MIN_QUERIES,
    POOL_POINTS_PER_QUERY,
    default_queries,
    make_federation,
    plan,
)


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
