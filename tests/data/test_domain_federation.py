"""Domain scenarios: agents on source datasets, public pool and test set from a target."""

from __future__ import annotations

import numpy as np
import pytest

from fedvote.data.datasets import Dataset
from fedvote.data.federation import (
    build_domain_federation,
    build_noniid_federation,
)
from fedvote.data.partition import PartitionSpec
from fedvote.errors import ConfigError

STEP = 1e-4  # constant images: pixel value = base + (id + 1) * STEP identifies a record


def tagged(name: str, n: int, base: float, size: int, num_classes: int = 10, seed: int = 0) -> Dataset:
    """n constant images of size x size whose value encodes (dataset, record id).

    A constant image stays constant (up to rounding) under area and bilinear resampling,
    so the id survives a resize.
    """
    labels = np.random.default_rng(seed).integers(0, num_classes, size=n)
    labels[:num_classes] = np.arange(num_classes)  # every class present
    values = base + (np.arange(n) + 1) * STEP
    features = np.broadcast_to(values[:, None, None, None], (n, 1, size, size)).astype(np.float32)
    return Dataset(name, np.ascontiguousarray(features), labels.astype(np.int64), tuple(str(c) for c in range(num_classes)))


def ids(features: np.ndarray, base: float) -> np.ndarray:
    """Record ids from tagged images (all pixels of an image carry the same id)."""
    values = features.reshape(features.shape[0], -1)
    assert np.allclose(values, values[:, :1], atol=1e-6)
    return np.round((values[:, 0].astype(np.float64) - base) / STEP).astype(np.int64) - 1


def test_one_source_to_a_target_with_an_official_test_split():
    source = tagged("src", 400, 0.0, 28)
    target, target_test = tagged("tgt", 150, 0.3, 16), tagged("tgt", 60, 0.6, 16)
    fed = build_domain_federation([source], target, target_test=target_test, num_agents=7, seed=1)
    assert fed.dataset_name == "src->tgt" and fed.num_agents == 7
    assert fed.example_shape == (1, 16, 16)  # the target's
    assert all(a.features.shape[1:] == (1, 16, 16) for a in fed.agents)
    # Agents: an exact cover of the source, with each record's own label.
    agent_ids = np.concatenate([ids(a.features, 0.0) for a in fed.agents])
    assert np.array_equal(np.sort(agent_ids), np.arange(400))
    for a in fed.agents:
        assert np.array_equal(a.labels, source.labels[ids(a.features, 0.0)])
    # Pool: the whole target (public_fraction = 1); test: the official test split, in order.
    assert np.array_equal(np.sort(ids(fed.public.features, 0.3)), np.arange(150))
    assert np.array_equal(fed.public.labels, target.labels[ids(fed.public.features, 0.3)])
    assert np.array_equal(ids(fed.test.features, 0.6), np.arange(60))
    assert np.array_equal(fed.test.labels, target_test.labels)
    assert fed.agent_domains == ("src",) * 7 and fed.agent_public_access
    server = fed.server_data()
    assert server.public_features.shape == (150, 1, 16, 16) and server.example_shape == (1, 16, 16)


def test_pool_and_test_are_disjoint_draws_from_the_target_without_a_test_split():
    source, target = tagged("src", 300, 0.0, 8), tagged("tgt", 200, 0.5, 8)
    fed = build_domain_federation(
        [source], target, num_agents=5, test_fraction=0.25, public_fraction=0.5, seed=2
    )
    test_ids, public_ids = ids(fed.test.features, 0.5), ids(fed.public.features, 0.5)
    assert len(test_ids) == 50 and len(public_ids) == 75  # half of the 150 left
    assert len(np.intersect1d(test_ids, public_ids)) == 0
    assert len(np.unique(public_ids)) == 75 and len(np.unique(test_ids)) == 50


def test_three_domains_spread_over_agents_in_proportion():
    a, b, target = tagged("a", 600, 0.0, 28), tagged("b", 200, 0.2, 8), tagged("t", 100, 0.5, 16)
    fed = build_domain_federation([a, b], target, num_agents=8, image_size=(12, 12), seed=0)
    # 1 each, then 6 more split 3:1 -> quotas 5.5 and 2.5 -> 6 and 2 (ties go to the first).
    assert fed.agent_domains == ("a",) * 6 + ("b",) * 2
    assert fed.example_shape == (1, 12, 12)
    assert fed.dataset_name == "a+b->t"
    a_ids = np.concatenate([ids(x.features, 0.0) for x in fed.agents[:6]])
    b_ids = np.concatenate([ids(x.features, 0.2) for x in fed.agents[6:]])
    assert np.array_equal(np.sort(a_ids), np.arange(600)) and np.array_equal(np.sort(b_ids), np.arange(200))
    explicit = build_domain_federation([a, b], target, num_agents=8, agents_per_source=[3, 5], seed=0)
    assert explicit.agent_domains == ("a",) * 3 + ("b",) * 5


def test_mixed_agents_hold_records_of_several_domains():
    a, b, target = tagged("a", 300, 0.0, 8), tagged("b", 300, 0.2, 8), tagged("t", 100, 0.5, 8)
    fed = build_domain_federation([a, b], target, num_agents=4, mixing="mixed", seed=3)
    seen = {"a": [], "b": []}
    for agent, domain in zip(fed.agents, fed.agent_domains, strict=True):
        values = agent.features[:, 0, 0, 0]
        in_b = values >= 0.2
        held = ({"a"} if (~in_b).any() else set()) | ({"b"} if in_b.any() else set())
        assert domain == "+".join(sorted(held))
        seen["a"].append(ids(agent.features[~in_b], 0.0))
        seen["b"].append(ids(agent.features[in_b], 0.2))
        assert np.array_equal(agent.labels[~in_b], a.labels[seen["a"][-1]])
        assert np.array_equal(agent.labels[in_b], b.labels[seen["b"][-1]])
    assert np.array_equal(np.sort(np.concatenate(seen["a"])), np.arange(300))
    assert np.array_equal(np.sort(np.concatenate(seen["b"])), np.arange(300))
    assert all(d == "a+b" for d in fed.agent_domains)  # iid over 600 records: both domains everywhere


def test_records_per_agent_caps_each_source():
    source, target = tagged("src", 500, 0.0, 8), tagged("t", 100, 0.5, 8)
    fed = build_domain_federation([source], target, num_agents=4, records_per_agent=30, seed=0)
    assert fed.agent_sizes().tolist() == [30, 30, 30, 30]
    assert len(np.unique(np.concatenate([ids(a.features, 0.0) for a in fed.agents]))) == 120
    with pytest.raises(ConfigError) as error:
        build_domain_federation([source], target, num_agents=4, records_per_agent=200)
    assert error.value.argument == "records_per_agent"


def test_deterministic_under_a_seed():
    source, target = tagged("src", 300, 0.0, 8), tagged("t", 100, 0.5, 8)
    kwargs = {"num_agents": 6, "partition": PartitionSpec("dirichlet", alpha=0.5)}
    one = build_domain_federation([source], target, seed=5, **kwargs)
    two = build_domain_federation([source], target, seed=5, **kwargs)
    other = build_domain_federation([source], target, seed=6, **kwargs)
    assert all(np.array_equal(x.features, y.features) for x, y in zip(one.agents, two.agents, strict=True))
    assert np.array_equal(one.public.features, two.public.features)
    assert np.array_equal(one.test.features, two.test.features)
    assert not np.array_equal(one.test.features, other.test.features)


def test_mnist_to_usps_on_the_samples(mnist_sample, usps_sample, usps_sample_test):
    fed = build_domain_federation(
        [mnist_sample], usps_sample, target_test=usps_sample_test, num_agents=5, seed=0
    )
    assert fed.dataset_name == "mnist->usps" and fed.example_shape == (1, 16, 16)
    # The agents hold MNIST (resized), the pool and the test set hold USPS as loaded.
    rows = np.concatenate([a.features for a in fed.agents]).reshape(500, -1)
    expected = mnist_sample.resized((16, 16)).features.reshape(500, -1)
    assert np.array_equal(np.unique(rows, axis=0), np.unique(expected, axis=0))
    assert np.array_equal(np.unique(fed.public.features.reshape(500, -1), axis=0),
                          np.unique(usps_sample.features.reshape(500, -1), axis=0))
    assert np.array_equal(fed.test.features, usps_sample_test.features)


def test_usps_to_mnist_and_mnist_digits_to_usps(digits, mnist_sample, mnist_sample_test, usps_sample, usps_sample_test):
    fed = build_domain_federation([usps_sample], mnist_sample, target_test=mnist_sample_test, num_agents=3)
    assert fed.example_shape == (1, 28, 28) and len(fed.test) == 200 and len(fed.public) == 500
    three = build_domain_federation(
        [mnist_sample, digits], usps_sample, target_test=usps_sample_test, num_agents=6,
        image_size=(28, 28), agent_public_access=False, seed=1,
    )
    assert three.example_shape == (1, 28, 28) and three.dataset_name == "digits+mnist->usps"
    assert sorted(set(three.agent_domains)) == ["digits", "mnist"] and not three.agent_public_access
    assert sum(len(a) for a in three.agents) == 500 + 1797
    assert all(a.features.shape[1:] == (1, 28, 28) for a in three.agents)
    assert three.test.features.shape == (200, 1, 28, 28)


def test_the_papers_noniid_setting_on_the_samples(mnist_sample, mnist_sample_test):
    fed = build_noniid_federation(mnist_sample, mnist_sample_test, num_agents=10, classes_per_agent=6)
    assert fed.dataset_name == "mnist" and fed.num_agents == 10
    assert (np.count_nonzero(fed.class_counts(), axis=1) <= 6).all()
    assert len(fed.public) == 60 and len(fed.test) == 140
    assert fed.agent_sizes().sum() == 500
    pool_and_test = np.concatenate([fed.public.features, fed.test.features]).reshape(200, -1)
    assert np.array_equal(np.unique(pool_and_test, axis=0),
                          np.unique(mnist_sample_test.features.reshape(200, -1), axis=0))


@pytest.mark.parametrize(
    ("change", "argument"),
    [
        ({"sources": []}, "dataset"),
        ({"sources": "same"}, "target"),
        ({"sources": "classes"}, "target"),
        ({"sources": "channels"}, "target"),
        ({"mixing": "blend"}, "mixing"),
        ({"mixing": "mixed", "agents_per_source": [4]}, "agents_per_source"),
        ({"agents_per_source": [2]}, "agents_per_source"),
        ({"agents_per_source": [1, 3]}, "agents_per_source"),
        ({"public_fraction": 0.0}, "public_fraction"),
        ({"public_fraction": 1.5}, "public_fraction"),
        ({"test_fraction": 1.0}, "test_fraction"),
        ({"test_fraction": 0.2, "target_test": "given"}, "test_fraction"),
        ({"num_agents": 0}, "num_agents"),
        ({"num_agents": 5000}, "agents"),
        ({"records_per_agent": 0}, "records_per_agent"),
        ({"image_size": (0, 4)}, "image_size"),
        ({"public_fraction": 0.001}, "public_fraction"),
    ],
)
def test_impossible_domain_federations_name_the_argument(change, argument):
    source, target = tagged("src", 300, 0.0, 8), tagged("t", 100, 0.5, 8)
    kwargs = {"num_agents": 4} | change
    sources = kwargs.pop("sources", [source])
    if sources == "same":
        sources = [target]
    elif sources == "classes":
        sources = [tagged("five", 50, 0.0, 8, num_classes=5)]
    elif sources == "channels":
        # RGB and grey mix (colour becomes luminance); two channels and one do not.
        sources = [Dataset("two", np.zeros((20, 2, 8, 8), np.float32), np.arange(20) % 10, target.class_names)]
    if kwargs.get("target_test") == "given":
        kwargs["target_test"] = tagged("t", 20, 0.8, 8)
    with pytest.raises(ConfigError) as error:
        build_domain_federation(sources, target, **kwargs)
    assert error.value.argument == argument
    assert "\n" not in error.value.detail


@pytest.mark.parametrize("agents", [401, 10**20])  # 10**20 overflowed the per-source float quota
def test_more_agents_than_source_records_is_refused_by_name(agents):
    source = tagged("src", 400, 0.0, 28)
    target, target_test = tagged("tgt", 150, 0.3, 16), tagged("tgt", 60, 0.6, 16)
    with pytest.raises(ConfigError, match=rf"^agents: {agents} agents but only 400 records$"):
        build_domain_federation([source], target, target_test=target_test, num_agents=agents, seed=1)
