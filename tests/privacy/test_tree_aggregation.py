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


def complete_tree_nodes(t: int) -> list[tuple[int, set[int]]]:
    """Brute force: (round, leaves) of every node of the complete tree released by round t, in
    release order (by round, then by size): each dyadic block [a·2^j + 1, (a + 1)·2^j] ⊆ [1, t],
    released at the round it ends."""
    nodes = []
    for end in range(1, t + 1):
        for size in (2**j for j in range(t.bit_length())):
            if end % size == 0:
                nodes.append((end, set(range(end - size + 1, end + 1))))
    return nodes


@pytest.mark.parametrize("k", [*range(1, 70), 100, 127, 128, 129, 1000])
def test_complete_tree_puts_a_leaf_in_at_most_levels_nodes(k):
    """Honaker's estimator releases every node of the complete tree: still one per level a leaf."""
    nodes = [leaves for _, leaves in complete_tree_nodes(k)]
    per_leaf = [sum(leaf in node for node in nodes) for leaf in range(1, k + 1)]
    assert max(per_leaf) == ta.levels(k)


class _ScriptedNoise:
    """A stand-in generator whose ``normal`` hands out the given draws in order, and counts them."""

    def __init__(self, draws: np.ndarray) -> None:
        self.draws, self.used = draws, 0

    def normal(self, loc: float, scale: float, size: int) -> np.ndarray:
        out = loc + scale * self.draws[self.used]
        self.used += 1
        return out


@pytest.mark.parametrize("t", [1, 2, 3, 5, 7, 8, 12, 13, 16, 23])
def test_honaker_prefix_is_the_generalised_least_squares_estimate(t):
    """At every round s ≤ t the prefix estimate equals the best linear unbiased estimate of
    x_1 + … + x_s from every node released by s, computed by least squares on the brute-force
    node list (equal node variances: ordinary least squares is the BLUE)."""
    d, sigma = 4, 0.7
    rng = np.random.default_rng(t)
    leaves = rng.normal(size=(t, d))
    nodes = complete_tree_nodes(t)
    draws = rng.normal(size=(len(nodes), d))
    noise = _ScriptedNoise(draws)
    tree = ta.TreeAggregator(d, sigma, "honaker")
    for s in range(1, t + 1):
        estimate = tree.add(leaves[s - 1], noise)  # type: ignore[arg-type]
        released = [i for i, (end, _) in enumerate(nodes) if end <= s]
        assert noise.used == len(released)  # one draw per released node, in release order
        design = np.array([[leaf in nodes[i][1] for leaf in range(1, s + 1)] for i in released], dtype=float)
        observed = design @ leaves[:s] + sigma * draws[released]  # (nodes, d)
        fitted, *_ = np.linalg.lstsq(design, observed, rcond=None)  # (s, d): the leaves' BLUE
        np.testing.assert_allclose(estimate, fitted.sum(axis=0), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("estimator", ta.TREE_ESTIMATORS)
def test_noiseless_tree_returns_exact_prefix_sums(estimator):
    rng = np.random.default_rng(0)
    leaves = rng.normal(size=(37, 5))
    tree = ta.TreeAggregator(5, 0.0, estimator)
    for t in range(37):
        np.testing.assert_allclose(tree.add(leaves[t], rng), leaves[: t + 1].sum(axis=0), rtol=1e-12, atol=1e-12)


def test_prefix_noise_variance_is_popcount_sigma_squared():
    """Coordinates are independent draws: the sample variance of the prefix noise at t is
    popcount(t)·σ² within 5 standard errors (√(2/n) relative for n normal draws)."""
    d, sigma = 20_000, 1.5
    tree = ta.TreeAggregator(d, sigma, "plain")
    rng = np.random.default_rng(1)
    for t in range(1, 16):
        noise = tree.add(np.zeros(d), rng)
        expected = bin(t).count("1") * sigma**2
        assert abs(noise.var() / expected - 1.0) < 5.0 * math.sqrt(2.0 / d)


def test_honaker_variance_ratio_closed_form():
    """r_h = 2^h / (2^(h+1) − 1): unrolling r_h = 2r/(1 + 2r) from r_0 = 1."""
    for h in range(12):
        assert ta.honaker_variance_ratio(h) == pytest.approx(2**h / (2 ** (h + 1) - 1), rel=1e-12)


def test_honaker_prefix_noise_variance():
    """The sample variance of the prefix noise at t is σ²·Σ r_h over t's set bits (5 standard
    errors), never above the plain estimator's popcount(t)·σ², and about half of it at t = 2^m."""
    d, sigma = 20_000, 1.5
    tree = ta.TreeAggregator(d, sigma, "honaker")
    rng = np.random.default_rng(2)
    for t in range(1, 33):
        noise = tree.add(np.zeros(d), rng)
        expected = sigma**2 * sum(ta.honaker_variance_ratio(h) for h in range(t.bit_length()) if t >> h & 1)
        assert tree.prefix_variance_ratio() * sigma**2 == pytest.approx(expected, rel=1e-12)
        assert abs(noise.var() / expected - 1.0) < 5.0 * math.sqrt(2.0 / d)
        assert expected <= bin(t).count("1") * sigma**2 + 1e-12
    assert tree.prefix_variance_ratio() == pytest.approx(32 / 63)


def test_unknown_estimator_refused():
    with pytest.raises(ValueError, match="estimator"):
        ta.TreeAggregator(3, 1.0, "best")


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
