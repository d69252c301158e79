"""experiments/cifar10_release_variants.py (issue 43): sparse votes, their σ at the same ε, the
power normalisation, and a section that says what its rows say."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedvote.data.federation import LabeledData
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import gaussian_release_event


@pytest.fixture(scope="module")
def variants(load_experiment):
    return load_experiment("cifar10_release_variants")


def test_sparse_votes_count_each_agents_most_confident_queries(variants):
    rng = np.random.default_rng(0)
    probabilities = rng.dirichlet(np.ones(4), size=(5, 12))  # (A, Q, C)
    sums = variants.sparse_votes(probabilities, 3)
    assert sums.sum() == 5 * 3  # m votes an agent
    expected = np.zeros((12, 4))
    for agent in probabilities:  # brute force, agent by agent
        for query in np.argsort(-agent.max(axis=1), kind="stable")[:3]:
            expected[query, agent[query].argmax()] += 1
    np.testing.assert_array_equal(sums, expected)
    assert variants.sparse_votes(probabilities, 12).sum(axis=1).tolist() == [5.0] * 12  # m = Q: dense


def test_sparse_sigma_keeps_the_agent_level_epsilon(variants):
    """m queries of sensitivity 1 at σ_m and Q at σ_Q are one Gaussian each, of μ = √m/σ_m = √Q/σ_Q."""
    dense_sigma, queries, per_agent = 45.08, 3000, 300
    sparse = variants.sparse_sigma(dense_sigma, queries, per_agent)
    assert math.sqrt(per_agent) / sparse == pytest.approx(math.sqrt(queries) / dense_sigma, rel=1e-12)
    dense_epsilon = epsilon_for(gaussian_release_event(dense_sigma, 1.0, queries), 1e-3)
    sparse_epsilon = epsilon_for(gaussian_release_event(sparse, 1.0, per_agent), 1e-3)
    assert sparse_epsilon == pytest.approx(dense_epsilon, rel=1e-6)


def test_centred_votes_have_norm_at_most_the_root_of_one_less_a_class_share(variants):
    """‖v − 1/C‖ ≤ √(1 − 1/C) for every one-hot and every probability vector (brute force over
    one-hots, random and extreme probabilities), attained by the one-hots; σ scaled by that bound
    keeps the dense release's ε at the agent level."""
    for classes in (2, 3, 10):
        bound = math.sqrt(1.0 - 1.0 / classes)
        one_hots = np.eye(classes)
        np.testing.assert_allclose(np.linalg.norm(one_hots - 1.0 / classes, axis=1), bound, rtol=1e-12)
        rng = np.random.default_rng(classes)
        probabilities = np.concatenate([rng.dirichlet(np.full(classes, 0.05), size=2000),
                                        rng.dirichlet(np.ones(classes), size=2000)])
        assert np.linalg.norm(probabilities - 1.0 / classes, axis=1).max() <= bound + 1e-12
        sigma, queries = 45.08, 3000
        centred = variants.centred_sigma(sigma, classes)
        dense_epsilon = epsilon_for(gaussian_release_event(sigma, 1.0, queries), 1e-3)
        centred_epsilon = epsilon_for(gaussian_release_event(centred, bound, queries), 1e-3)
        assert centred_epsilon == pytest.approx(dense_epsilon, rel=1e-6)


def test_soft_votes_sum_each_agents_probabilities(variants):
    probabilities = np.random.default_rng(1).dirichlet(np.ones(3), size=(4, 5))  # (A, Q, C)
    sums = variants.soft_votes(probabilities)
    assert sums.shape == (5, 3)
    np.testing.assert_allclose(sums.sum(axis=1), 4.0)  # one unit of vote per agent and query
    np.testing.assert_allclose(sums[2], sum(agent[2] for agent in probabilities))


def test_power_normalise_is_the_root_of_the_shift_to_the_pool_minimum(variants):
    pool = np.array([[-1.0, 2.0], [0.0, 4.0], [3.0, 2.0]])
    other = np.array([[-2.0, 6.0]])
    mapped_pool, mapped_other = variants.power_normalise(pool, other)
    np.testing.assert_allclose(mapped_pool.mean(axis=0), 0.0, atol=1e-12)
    rooted = np.sqrt(pool - pool.min(axis=0))
    expected = (np.sqrt(np.clip(other - pool.min(axis=0), 0, None)) - rooted.mean(0)) / (rooted.std(0) + 1e-6)
    np.testing.assert_allclose(mapped_other, expected)


def _record(noisy_means: list[float]) -> dict:
    names = ["dense votes (the defaults' release), ridge student (the defaults')", "power", "sparse 300"]
    rows = [
        {"what": name, "sigma": 45.0, "clean": 0.6, "noisy": [mean] * 3}
        for name, mean in zip(names, noisy_means, strict=True)
    ]
    return {"date": "2026-11-28", "machine": "here", "queries": 3000, "sigma_dense": 45.0, "draws": 3,
            "rows": rows, "wall_seconds": 300.0}


def test_section_reports_the_best_variant_against_the_defaults(variants):
    text = variants.section(_record([0.498, 0.503, 0.43]))
    assert "The defaults' release and student: 0.498. The best other: 0.503 (power), +0.5 points." in text
    assert "None reaches 0.60" in text
    assert "| power | 45.00 | 0.600 | 0.503, 0.503, 0.503 | 0.503 |" in text


def test_section_names_a_variant_that_reaches_the_bar(variants):
    text = variants.section(_record([0.498, 0.61, 0.43]))
    assert "Reaching 0.60: power." in text and "None reaches" not in text


def test_mirrors_follow_the_images_and_first_half_takes_them_back(variants):
    images = np.arange(2 * 3 * 2 * 4, dtype=np.float32).reshape(2, 3, 2, 4)  # (n, C, H, W)
    part = LabeledData(features=images, labels=np.array([1, 0]))
    mirrored = variants.with_mirrors(part)
    assert len(mirrored) == 4 and mirrored.labels.tolist() == [1, 0, 1, 0]
    for index in range(2):  # brute force: column w of the mirror is column W-1-w of the image
        for column in range(4):
            np.testing.assert_array_equal(mirrored.features[2 + index][..., column], images[index][..., 3 - column])
    back = variants.first_half(mirrored)
    np.testing.assert_array_equal(back.features, images)
    assert back.labels.tolist() == [1, 0]
