"""Query selection: seeded random subsets and TypiClust's typical points, from the public pool only."""

from __future__ import annotations

import numpy as np
import pytest

from fedvote.config import RunConfig
from fedvote.data.query_selection import (
    QUERY_SELECTIONS,
    TYPICALITY_NEIGHBOURS,
    choose_queries,
    random_queries,
    resolve_query_selection,
    typical_queries,
)
from fedvote.errors import ConfigError


def _blobs(centres: np.ndarray, per_blob: int, spread: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``per_blob`` Gaussian points around each centre (B, d), as (B·per_blob, d) and their blob ids."""
    rng = np.random.default_rng(seed)
    points = np.concatenate([c + spread * rng.standard_normal((per_blob, centres.shape[1])) for c in centres])
    return points, np.repeat(np.arange(centres.shape[0]), per_blob)


def _brute_force_most_typical(points: np.ndarray) -> int:
    """The row with the least mean distance to its K nearest other rows, by full pairwise distances."""
    neighbours = min(TYPICALITY_NEIGHBOURS, points.shape[0] - 1)
    best, best_mean = -1, np.inf
    for i, point in enumerate(points):
        others = np.sort(np.linalg.norm(np.delete(points, i, axis=0) - point, axis=1))
        mean = others[:neighbours].mean()
        if mean < best_mean:
            best, best_mean = i, mean
    return best


def test_random_queries_are_distinct_seeded_and_nested() -> None:
    first = random_queries(500, 40, seed=3)
    assert len(set(first.tolist())) == 40 and first.max() < 500
    np.testing.assert_array_equal(first, random_queries(500, 40, seed=3))
    np.testing.assert_array_equal(random_queries(500, 80, seed=3)[:40], first)  # more queries: a superset
    assert not np.array_equal(first, random_queries(500, 40, seed=4))


def test_typical_queries_take_one_point_per_separated_cluster_the_most_typical() -> None:
    centres = 50.0 * np.eye(6)[:, :6]  # six far-apart clusters in 6 dimensions
    points, blob = _blobs(centres, per_blob=30, spread=1.0, seed=0)
    chosen = typical_queries(points, 6, seed=0)
    assert sorted(blob[chosen].tolist()) == list(range(6))  # every cluster once
    for index in chosen:
        members = np.flatnonzero(blob == blob[index])
        assert members[_brute_force_most_typical(points[members])] == index


def test_typical_queries_work_on_images_and_are_reproducible() -> None:
    rng = np.random.default_rng(1)
    images = rng.random((120, 1, 8, 8)).astype(np.float32)  # (P, C, H, W): flattened, projected
    chosen = typical_queries(images, 15, seed=2)
    assert chosen.shape == (15,) and len(set(chosen.tolist())) == 15
    np.testing.assert_array_equal(chosen, typical_queries(images, 15, seed=2))


def test_asking_for_the_whole_pool_returns_it() -> None:
    pool = np.arange(20, dtype=np.float32).reshape(10, 2)
    np.testing.assert_array_equal(typical_queries(pool, 10, seed=0), np.arange(10))
    np.testing.assert_array_equal(typical_queries(pool, 25, seed=0), np.arange(10))


def test_choose_queries_dispatches_and_refuses_an_unknown_rule_by_name() -> None:
    pool = np.random.default_rng(0).random((60, 4))
    np.testing.assert_array_equal(choose_queries(pool, 9, 5, "random"), random_queries(60, 9, 5))
    np.testing.assert_array_equal(choose_queries(pool, 9, 5, "typical"), typical_queries(pool, 9, 5))
    with pytest.raises(ConfigError, match="query_selection"):
        choose_queries(pool, 9, 5, "nearest")
    assert QUERY_SELECTIONS[0] == "auto"  # the default of fedvote run


def test_auto_is_typical_from_ten_pool_points_per_query_up() -> None:
    assert resolve_query_selection("auto", 3000, 100) == "typical"  # MNIST's pool, Q = 100
    assert resolve_query_selection("auto", 1000, 100) == "typical"
    assert resolve_query_selection("auto", 999, 100) == "random"
    assert resolve_query_selection("auto", 270, 100) == "random"  # digits' pool
    assert resolve_query_selection("random", 3000, 100) == "random"
    pool = np.random.default_rng(0).random((200, 3))
    np.testing.assert_array_equal(choose_queries(pool, 20, 1, "auto"), typical_queries(pool, 20, 1))
    np.testing.assert_array_equal(choose_queries(pool, 21, 1, "auto"), random_queries(200, 21, 1))


def test_a_config_recorded_before_query_selection_reruns_with_random_queries() -> None:
    recorded = RunConfig().to_dict()
    del recorded["query_selection"]
    assert RunConfig.from_dict(recorded).query_selection == "random"
    assert RunConfig().query_selection == "auto"
    with pytest.raises(ConfigError, match="query_selection"):
        RunConfig(query_selection="nearest")
