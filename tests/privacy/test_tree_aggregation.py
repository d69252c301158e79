"""Tree aggregation (DP-FTRL's binary mechanism): its nodes by brute force, its noise, its events."""

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from fedvote.privacy import tree_aggregation as ta
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import dp_ftrl_events


def created_nodes(k: int) -> list[set[int]]:
    """Brute force: the leaves of each node the online tree of k leaves releases (one per round).

    Round t closes the dyadic block of length 2^h ending at t, h the largest with 2^h | t.
    """
    nodes = []
    for t in range(1, k + 1):
        h = 0
        while t % (2 ** (h + 1)) == 0:
            h += 1
        nodes.append(set(range(t - 2**h + 1, t + 1)))
    return nodes


@pytest.mark.parametrize("k", [*range(1, 70), 100, 127, 128, 129, 1000])
def test_a_leaf_lies_in_at_most_levels_released_nodes(k):
    """The largest number of released nodes holding one leaf is ⌊log₂ k⌋ + 1, by enumeration."""
    nodes = created_nodes(k)
    per_leaf = [sum(leaf in node for node in nodes) for leaf in range(1, k + 1)]
    assert max(per_leaf) == ta.levels(k) == math.floor(math.log2(k)) + 1


@pytest.mark.parametrize("t", range(1, 80))
def test_prefix_nodes_partition_the_prefix_with_released_nodes(t):
    released = [frozenset(node) for node in created_nodes(t)]
    blocks = [frozenset(range(first, first + 2**h)) for h, first in ta.prefix_nodes(t)]
    assert all(block in released for block in blocks)
    assert sorted(leaf for block in blocks for leaf in block) == list(range(1, t + 1))
    assert len(blocks) == bin(t).count("1")
    assert ta.node_of(t)[1] + 2 ** ta.node_of(t)[0] - 1 == t


def test_noiseless_tree_returns_exact_prefix_sums():
    rng = np.random.default_rng(0)
    leaves = rng.normal(size=(37, 5))
    tree = ta.TreeAggregator(5, 0.0)
    for t in range(37):
        np.testing.assert_allclose(tree.add(leaves[t], rng), leaves[: t + 1].sum(axis=0), rtol=1e-12, atol=1e-12)


def test_prefix_noise_variance_is_popcount_sigma_squared():
    """Coordinates are independent draws: the sample variance of the prefix noise at t is
    popcount(t)·σ² within 5 standard errors (√(2/n) relative for n normal draws)."""
    d, sigma = 20_000, 1.5
    tree = ta.TreeAggregator(d, sigma)
    rng = np.random.default_rng(1)
    for t in range(1, 16):
        noise = tree.add(np.zeros(d), rng)
        expected = bin(t).count("1") * sigma**2
        assert abs(noise.var() / expected - 1.0) < 5.0 * math.sqrt(2.0 / d)


def test_gaussian_count_over_restarted_epochs():
    assert ta.epoch_lengths(100, 20) == [20] * 5
    assert ta.gaussian_count(100, 20) == 5 * 5
    assert ta.epoch_lengths(50, 32) == [32, 18]
    assert ta.gaussian_count(50, 32) == 6 + 5
    # brute force, one leaf per epoch anywhere in its tree
    assert ta.gaussian_count(37, 9) == sum(max(sum(leaf in node for node in created_nodes(k))
                                                for leaf in range(1, k + 1)) for k in ta.epoch_lengths(37, 9))


def balle_wang_epsilon(mu: float, delta: float) -> float:
    """The exact (ε, δ) of μ-GDP (Balle & Wang 2018, Theorem 8), solved here independently."""
    def excess(eps: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta
    return brentq(excess, 1e-9, 200.0, xtol=1e-12)


@pytest.mark.parametrize(("z", "gaussians"), [(4.1, 25), (2.0, 12), (10.0, 60)])
def test_events_equal_one_gaussian_of_sensitivity_root_count(z, gaussians):
    """Agent: μ = √G/z; instance (replace-one, 2C): μ = 2√G/z — the paper's zCDP
    ρ = G/(2z²) is μ²/2, the Gaussian it bounds; compared with the exact GDP ε."""
    events = dp_ftrl_events(z, gaussians)
    delta = 1e-3
    for event, mu in ((events.agent, math.sqrt(gaussians) / z), (events.instance, 2 * math.sqrt(gaussians) / z)):
        ours, exact = epsilon_for(event, delta), balle_wang_epsilon(mu, delta)
        assert ours == pytest.approx(exact, rel=1e-6)
        assert ours >= exact - 1e-9  # never below the exact figure
