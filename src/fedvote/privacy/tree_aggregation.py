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

**Two estimators, one bound** (``estimator``). ``"plain"`` releases only the node above
(one a round). ``"honaker"`` (the default) releases *every* node of the complete tree as it
completes — at round t the leaf x_t and each block of 2^j leaves ending at t, j ≤ h — and
estimates each node by Honaker's bottom-up pass ("Efficient use of differentially private
binary trees", 2015; Kairouz et al. 2021, Appendix B.1): the inverse-variance combination of
its own noisy value and the sum of its two children's estimates. A leaf still lies in at most
one released node per level, so the bound above is unchanged; the estimate is post-processing.
The completed nodes below the prefix's decomposition are exactly its nodes' subtrees, so the
prefix estimate is the best linear unbiased estimate from everything released by round t
(tested against generalised least squares); its variance is σ²·Σ r_h over the decomposition's
levels (:func:`honaker_variance_ratio`: 1, 2/3, 4/7, … → 1/2) instead of σ²·popcount(t).
"""

from __future__ import annotations

import numpy as np

from fedvote.privacy.config import TREE_ESTIMATORS


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


def honaker_variance_ratio(level: int) -> float:
    """r_h: the variance of Honaker's estimate of a level-h node over the node noise σ².

    r_0 = 1 (a leaf is its own noisy value); r_h = 2r_{h−1}/(1 + 2r_{h−1}), the inverse-variance
    combination of the node (variance 1) and its children's estimates (variance 2r_{h−1}).
    """
    if level < 0:
        raise ValueError(f"level must be >= 0, got {level}")
    ratio = 1.0
    for _ in range(level):
        ratio = 2.0 * ratio / (1.0 + 2.0 * ratio)
    return ratio


class TreeAggregator:
    """Online noisy prefix sums of (d,) leaves: each released node noised once with N(0, std²).

    ``add(x_t)`` returns the estimate of x_1 + … + x_t; ``noise_std`` is the node noise σ
    (absolute, e.g. z·C); ``estimator`` one of :data:`TREE_ESTIMATORS` (module docstring). The
    exact sums and estimates of the nodes still needed (one per level) are all it keeps. The
    noise comes from the ``rng`` passed to each call (the run's privacy generator), one
    ``normal`` draw per released node, lowest level first.
    """

    def __init__(self, dim: int, noise_std: float, estimator: str = "honaker") -> None:
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        if not (noise_std >= 0 and np.isfinite(noise_std)):
            raise ValueError(f"noise_std must be finite and >= 0, got {noise_std}")
        if estimator not in TREE_ESTIMATORS:
            raise ValueError(f"estimator must be one of {', '.join(TREE_ESTIMATORS)}, got {estimator!r}")
        self.dim = dim
        self.noise_std = float(noise_std)
        self.estimator = estimator
        self.steps = 0
        self._exact: dict[int, np.ndarray] = {}  # level -> exact sum of its open node, (d,)
        self._estimate: dict[int, np.ndarray] = {}  # level -> the estimate of that node, (d,)

    def _noised(self, exact: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if self.noise_std == 0:
            return exact.copy()
        return exact + rng.normal(0.0, self.noise_std, size=self.dim)

    def add(self, leaf: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Take x_t (d,), release the nodes it completes with fresh noise; the prefix estimate (d,)."""
        value = np.asarray(leaf, dtype=np.float64).reshape(-1)
        if value.shape != (self.dim,):
            raise ValueError(f"leaf has shape {value.shape}, expected ({self.dim},)")
        self.steps += 1
        h, _ = node_of(self.steps)
        if self.estimator == "plain":  # one node: the level-h block ending at t
            node = value.copy()
            for lower in range(h):  # it merges the blocks of every lower level
                node += self._exact.pop(lower)
                self._estimate.pop(lower)
            self._exact[h] = node
            self._estimate[h] = self._noised(node, rng)
            return self.prefix_estimate()
        exact, estimate = value.copy(), self._noised(value, rng)  # level 0: the leaf
        for level in range(1, h + 1):  # the block of 2^level leaves ending at t, from its children
            exact += self._exact.pop(level - 1)
            children = estimate + self._estimate.pop(level - 1)  # variance 2·r_{level−1}·σ²
            weight = 2.0 * honaker_variance_ratio(level - 1)
            weight /= 1.0 + weight  # the node's own share: 2r/(1 + 2r)
            estimate = weight * self._noised(exact, rng) + (1.0 - weight) * children
        self._exact[h], self._estimate[h] = exact, estimate
        return self.prefix_estimate()

    def prefix_estimate(self) -> np.ndarray:
        """The sum of the estimates of the current t's decomposition, (d,)."""
        total = np.zeros(self.dim, dtype=np.float64)
        for h in sorted(self._estimate, reverse=True):
            total += self._estimate[h]
        return total

    def prefix_variance_ratio(self) -> float:
        """The current prefix estimate's noise variance per coordinate over σ²."""
        if self.estimator == "plain":
            return float(len(self._estimate))
        return sum(honaker_variance_ratio(h) for h in self._estimate)
