import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedvote.data.partition import PartitionSpec, partition_indices
from fedvote.errors import ConfigError


@st.composite
def labelled_problem(draw):
    num_classes = draw(st.integers(2, 8))
    n = draw(st.integers(max(num_classes * 4, 12), 300))  # at least as many records as agents
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    # every class present at least 4 times, the rest random
    labels = np.concatenate([np.repeat(np.arange(num_classes), 4), rng.integers(0, num_classes, n - 4 * num_classes)])
    return rng.permutation(labels), num_classes, seed


def assert_exact_cover(parts, n):
    everything = np.concatenate(parts)
    assert everything.shape[0] == n
    assert np.array_equal(np.sort(everything), np.arange(n))
    assert all(p.shape[0] >= 1 for p in parts)


@settings(max_examples=40, deadline=None)
@given(labelled_problem(), st.integers(1, 12))
def test_iid_assigns_every_record_once_in_near_equal_parts(problem, agents):
    labels, _, seed = problem
    parts = partition_indices(labels, agents, PartitionSpec("iid"), np.random.default_rng(seed))
    assert_exact_cover(parts, labels.shape[0])
    sizes = [p.shape[0] for p in parts]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=40, deadline=None)
@given(labelled_problem(), st.integers(1, 6), st.integers(1, 3))
def test_shards_assigns_every_record_once(problem, agents, shards):
    labels, _, seed = problem
    spec = PartitionSpec("shards", shards_per_agent=shards)
    if agents * shards > labels.shape[0]:
        with pytest.raises(ConfigError):
            partition_indices(labels, agents, spec, np.random.default_rng(seed))
        return
    parts = partition_indices(labels, agents, spec, np.random.default_rng(seed))
    assert_exact_cover(parts, labels.shape[0])


def test_shards_give_few_classes_per_agent():
    labels = np.repeat(np.arange(10), 60)  # 600 records, 10 classes
    parts = partition_indices(labels, 100, PartitionSpec("shards", shards_per_agent=2), np.random.default_rng(0))
    # each shard of 3 sorted records spans at most 2 classes, so an agent sees at most 4
    assert max(np.unique(labels[p]).shape[0] for p in parts) <= 4


@settings(max_examples=40, deadline=None)
@given(labelled_problem(), st.integers(1, 12), st.integers(1, 8))
def test_classes_scheme_respects_classes_per_agent(problem, agents, per_agent):
    labels, num_classes, seed = problem
    spec = PartitionSpec("classes", classes_per_agent=per_agent)
    possible = per_agent <= num_classes and agents * per_agent >= num_classes
    if not possible:
        with pytest.raises(ConfigError) as error:
            partition_indices(labels, agents, spec, np.random.default_rng(seed))
        assert error.value.argument == "classes_per_agent"
        return
    try:
        parts = partition_indices(labels, agents, spec, np.random.default_rng(seed))
    except ConfigError as error:  # a class too small to share among its holders
        assert error.argument == "classes_per_agent"
        assert "records but" in error.detail
        return
    assert_exact_cover(parts, labels.shape[0])
    for p in parts:
        assert np.unique(labels[p]).shape[0] <= per_agent


@settings(max_examples=30, deadline=None)
@given(labelled_problem(), st.integers(1, 6), st.floats(0.05, 100.0))
def test_dirichlet_assigns_every_record_once(problem, agents, alpha):
    labels, _, seed = problem
    try:
        parts = partition_indices(labels, agents, PartitionSpec("dirichlet", alpha=alpha), np.random.default_rng(seed))
    except ConfigError as error:  # very skewed draws may starve an agent; the error says so
        assert error.argument == "dirichlet_alpha"
        return
    assert_exact_cover(parts, labels.shape[0])


def test_small_alpha_is_more_skewed_than_large_alpha():
    labels = np.repeat(np.arange(10), 200)

    def mean_classes_seen(alpha):
        parts = partition_indices(labels, 20, PartitionSpec("dirichlet", alpha=alpha), np.random.default_rng(1))
        return np.mean([np.unique(labels[p]).shape[0] for p in parts])

    assert mean_classes_seen(0.1) < mean_classes_seen(100.0)
    assert mean_classes_seen(100.0) == 10


@pytest.mark.parametrize("scheme", ["iid", "shards", "classes", "dirichlet"])
def test_partition_is_deterministic_under_a_seed(scheme):
    labels = np.random.default_rng(3).integers(0, 10, 500)
    spec = PartitionSpec(scheme, classes_per_agent=3)
    first = partition_indices(labels, 7, spec, np.random.default_rng(42))
    second = partition_indices(labels, 7, spec, np.random.default_rng(42))
    other = partition_indices(labels, 7, spec, np.random.default_rng(43))
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


def test_classes_per_agent_six_of_ten_like_the_paper():
    labels = np.repeat(np.arange(10), 600)
    parts = partition_indices(labels, 100, PartitionSpec("classes", classes_per_agent=6), np.random.default_rng(0))
    assert all(np.unique(labels[p]).shape[0] == 6 for p in parts)
    assert_exact_cover(parts, labels.shape[0])


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"scheme": "bogus"}, "partition"),
        ({"alpha": 0.0}, "dirichlet_alpha"),
        ({"alpha": -1.0}, "dirichlet_alpha"),
        ({"alpha": float("inf")}, "dirichlet_alpha"),  # once a numpy cast warning and a wrong hint
        ({"alpha": float("nan")}, "dirichlet_alpha"),
        ({"classes_per_agent": 0}, "classes_per_agent"),
        ({"shards_per_agent": 0}, "shards_per_agent"),
    ],
)
def test_bad_specs_name_the_argument(kwargs, argument):
    with pytest.raises(ConfigError) as error:
        PartitionSpec(**kwargs)
    assert error.value.argument == argument


def test_more_agents_than_records_is_refused():
    with pytest.raises(ConfigError) as error:
        partition_indices(np.zeros(5, dtype=int), 6, PartitionSpec(), np.random.default_rng(0))
    assert error.value.argument == "agents"
    assert "6 agents" in str(error.value)


def test_too_many_shards_is_refused():
    with pytest.raises(ConfigError) as error:
        partition_indices(np.zeros(10, dtype=int), 4, PartitionSpec("shards", shards_per_agent=3), np.random.default_rng(0))
    assert error.value.argument == "shards_per_agent"
