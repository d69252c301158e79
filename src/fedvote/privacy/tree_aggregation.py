"""Tree aggregation (the binary mechanism) for DP-FTRL: noisy prefix sums of a stream of vectors.

Kairouz, McMahan, Song, Thakkar, Thakurta & Xu, "Practical and private (deep) learning without
sampling or shuffling", ICML 2021 (DP-FTRL), after Dwork et al. 2010 and Chan, Shi & Song 2011.
Leaves x_1, x_2, … arrive one a round. Round t creates one node, the dyadic block of the
2^h leaves ending at t, h the number of trailing zero bits of t, and releases it once with
fresh N(0, σ²I); the prefix sum x_1 + … + x_t is the sum of the noisy nodes of t's binary
decomposition (one per set bit of t, so its noise has variance popcount(t)·σ²).

**Sensitivity** (the paper's §3 and Appendix, the zCDP of the tree with one leaf per user).
In a tree of k leaves a leaf lies in one created node per level h with 2^h ≤ k (the block of
length 2^h holding it is created only if it ends by k; at most one per level), so in at most
``levels(k)`` = ⌊log₂ k⌋ + 1 released nodes. If one agent's contribution to its single leaf moves
by at most Δ, the vector of every released node moves by at most Δ·√levels(k): the tree is a
Gaussian mechanism of L2 sensitivity Δ·√levels(k) and noise σ, i.e. ρ = levels(k)·Δ²/(2σ²)-zCDP,
the same as ``levels(k)`` Gaussian mechanisms of sensitivity Δ each (which is how fedvote writes
its events). Restarting the tree every epoch in which each agent contributes to one leaf, E
epochs compose: Σ_e levels(k_e) Gaussians in all (:func:`gaussian_count`). The leaves may be
chosen adaptively (θ_t depends on earlier releases): each node is a Gaussian mechanism given the
past, and Gaussians compose adaptively.
"""

from __future__ import annotations

import numpy as np


def levels(leaves: int) -> int:
    """⌊log₂ k⌋ + 1: the most released nodes a leaf of a k-leaf tree lies in (0 for k = 0)."""
    if leaves < 0:
        raise ValueError(f"leaves must be >= 0, got {leaves}")
    return int(leaves).bit_length()


def epoch_lengths(rounds: int, epoch_rounds: int) -> list[int]:
    """The trees of ``rounds`` rounds restarted every ``epoch_rounds``: their leaf counts k_e."""
    if rounds < 0 or epoch_rounds < 1:
        raise ValueError(f"need rounds >= 0 and epoch_rounds >= 1, got {rounds}, {epoch_rounds}")
    full, rest = divmod(rounds, epoch_rounds)
    return [epoch_rounds] * full + ([rest] if rest else [])


def gaussian_count(rounds: int, epoch_rounds: int) -> int:
    """Σ_e levels(k_e): the Gaussians of sensitivity Δ an agent in one leaf per epoch is in."""
    return sum(levels(k) for k in epoch_lengths(rounds, epoch_rounds))


def node_of(t: int) -> tuple[int, int]:
    """The node round t (1-based) creates: (level h, first leaf), covering leaves first..t."""
    if t < 1:
        raise ValueError(f"rounds are counted from 1, got {t}")
    h = (t & -t).bit_length() - 1  # trailing zero bits of t
    return h, t - (1 << h) + 1


def prefix_nodes(t: int) -> list[tuple[int, int]]:
    """The nodes (h, first leaf) whose sum is x_1 + … + x_t: one per set bit of t, largest first."""
    if t < 0:
        raise ValueError(f"t must be >= 0, got {t}")
    nodes, start = [], 1
    for h in range(t.bit_length() - 1, -1, -1):
        if t >> h & 1:
            nodes.append((h, start))
            start += 1 << h
    return nodes


class TreeAggregator:
    """Online noisy prefix sums of (d,) leaves: each created node noised once with N(0, std²).

    ``add(x_t)`` returns the noisy x_1 + … + x_t; ``noise_std`` is the node noise σ (absolute,
    e.g. z·C). The exact and noisy sums of the nodes still needed (one per level) are all it
    keeps. The noise comes from the ``rng`` passed to each call (the run's privacy generator).
    """

    def __init__(self, dim: int, noise_std: float) -> None:
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        if not (noise_std >= 0 and np.isfinite(noise_std)):
            raise ValueError(f"noise_std must be finite and >= 0, got {noise_std}")
        self.dim = dim
        self.noise_std = float(noise_std)
        self.steps = 0
        self._exact: dict[int, np.ndarray] = {}  # level -> exact sum of its open node, (d,)
        self._noisy: dict[int, np.ndarray] = {}  # level -> the released (noisy) node, (d,)

    def add(self, leaf: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Take x_t (d,), release its node with fresh noise; the noisy prefix sum (d,) float64."""
        value = np.asarray(leaf, dtype=np.float64).reshape(-1)
        if value.shape != (self.dim,):
            raise ValueError(f"leaf has shape {value.shape}, expected ({self.dim},)")
        self.steps += 1
        h, _ = node_of(self.steps)
        node = value.copy()
        for lower in range(h):  # the node merges the blocks of every lower level
            node += self._exact.pop(lower)
            self._noisy.pop(lower)
        self._exact[h] = node
        noise = rng.normal(0.0, self.noise_std, size=self.dim) if self.noise_std > 0 else 0.0
        self._noisy[h] = node + noise
        return self.noisy_prefix()

    def noisy_prefix(self) -> np.ndarray:
        """The sum of the noisy nodes of the current t's decomposition, (d,)."""
        total = np.zeros(self.dim, dtype=np.float64)
        for h in sorted(self._noisy, reverse=True):
            total += self._noisy[h]
        return total
