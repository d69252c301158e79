"""Votes: one-hot histograms, noise shares, the noisy argmax (Algorithm 1), Confident-GNMax's step."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedvote.errors import ConfigError


def one_hot_votes(predictions: np.ndarray, num_classes: int) -> np.ndarray:
    """One-hot votes (Q, C) float64 from predicted labels (Q,)."""
    votes = np.zeros((predictions.shape[0], num_classes), dtype=np.float64)
    votes[np.arange(predictions.shape[0]), predictions] = 1.0
    return votes


def noise_share_std(sigma: float, min_responders: int) -> float:
    """Std of one agent's noise share, σ/√t (DESIGN.md "Distributed noise").

    With at least ``min_responders`` (t) honest agents each adding N(0, σ²/t), the
    noise in the sum has variance ≥ σ², whatever the others do.
    """
    if min_responders < 1:
        raise ValueError(f"min_responders must be at least 1, got {min_responders}")
    return sigma / math.sqrt(min_responders)


def noisy_argmax(vote_sums: np.ndarray) -> np.ndarray:
    """Pseudo-labels (Q,) = argmax over classes of the noisy vote sums (Q, C); Alg. 1 line 7."""
    return np.argmax(vote_sums, axis=1).astype(np.int64)


def confident_gnmax_step(
    check_sums: np.ndarray, argmax_sums: np.ndarray, threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """The aggregator's step of Confident-GNMax (Papernot et al. 2018, Algorithm 1, lines 2-4).

    ``check_sums`` and ``argmax_sums`` (Q, C) are two independently noised copies of the
    vote sums. Returns the pass bits (Q,) = max_j check_sums ≥ ``threshold`` and the
    argmax labels (A,) of ``argmax_sums`` on the queries that pass — all that is released.
    """
    if check_sums.shape != argmax_sums.shape:
        raise ValueError(f"the two noisy copies differ in shape: {check_sums.shape} vs {argmax_sums.shape}")
    answered = np.max(check_sums, axis=1) >= threshold  # (Q,)
    return answered, noisy_argmax(argmax_sums[answered])


def top_two_gap(vote_sums: np.ndarray) -> np.ndarray:
    """Gap (Q,) between the largest and second largest entry of each row of (Q, C) sums."""
    top_two = np.sort(vote_sums, axis=1)[:, -2:]
    return top_two[:, 1] - top_two[:, 0]


# --- Reputation-weighted voting (reputation-weighted-pate.txt, Sec. 3.1 and 4.1.1) ------------

WEIGHT_SCHEMES: tuple[str, ...] = ("one-vote", "accuracy", "percentile", "zscore", "rank")
# Schemes whose weight depends on the other agents' accuracies: they need a released summary.
RELATIVE_SCHEMES: tuple[str, ...] = ("percentile", "zscore", "rank")


def weight_from_score(score: float, min_weight: float, max_weight: float) -> float:
    """The weight w = s + v·(m − s) of a score v, clipped to [0, 1] first (Sec. 4.1.1).

    The paper writes w_i = v_i·(s − m) + s with s = min-weight, m = max-weight; read
    literally, a better teacher would get a *smaller* weight, so fedvote takes the sign as
    a typo: v = 0 gives w_min, v = 1 gives w_max. Clipping v is what keeps every weight in
    [w_min, w_max], the range the privacy analysis assumes.
    """
    _check_weight_range(min_weight, max_weight)
    v = min(max(float(score), 0.0), 1.0)
    return min_weight + v * (max_weight - min_weight)


def accuracy_bin(accuracy: float, bins: int) -> int:
    """The bin k ∈ {0..bins−1} of ``accuracy`` ∈ [0, 1] on ``bins`` equal-width bins ([k/B, (k+1)/B))."""
    if bins < 1:
        raise ValueError(f"bins must be at least 1, got {bins}")
    return int(min(max(int(np.floor(float(accuracy) * bins)), 0), bins - 1))


def project_histogram(noisy: np.ndarray, total: float) -> np.ndarray:
    """The nonnegative histogram (B,) with sum ``total`` closest in L2 to the noisy one (B,).

    Euclidean projection onto the scaled simplex (Duchi et al. 2008, Fig. 1): subtract the
    one threshold τ that makes ``max(h − τ, 0)`` sum to ``total``. Post-processing of the
    released sum with the public number of agents N: the noise of empty bins mostly
    vanishes instead of piling up as phantom agents.
    """
    values = np.asarray(noisy, dtype=np.float64).reshape(-1)
    if not total > 0:
        raise ValueError(f"total must be > 0, got {total}")
    ordered = np.sort(values)[::-1]
    cumulative = np.cumsum(ordered) - total
    ranks = np.arange(1, values.shape[0] + 1)
    feasible = ordered - cumulative / ranks > 0
    last = int(np.flatnonzero(feasible)[-1])
    tau = cumulative[last] / (last + 1)
    return np.maximum(values - tau, 0.0)


def percentile_score(accuracy: float, histogram: np.ndarray) -> float:
    """Percentile of ``accuracy`` among the agents of ``histogram`` (B,), in [0, 1].

    The mass strictly below the agent's bin plus half its own bin, over the total: the
    "percentile p_i a model's accuracy belongs to" of Sec. 4.1.1, at the bins' resolution.
    """
    counts = np.asarray(histogram, dtype=np.float64)
    total = float(counts.sum())
    if total <= 0:
        return 0.5
    k = accuracy_bin(accuracy, counts.shape[0])
    return float((counts[:k].sum() + 0.5 * counts[k]) / total)


def rank_score(accuracy: float, histogram: np.ndarray) -> float:
    """Rank r_i ∈ 0..n−1 of ``accuracy`` over n − 1, in [0, 1]; ties (one bin) share the mid-rank.

    Sec. 4.1.1's "ordered ranking of n model's accuracies", brought to [0, 1] by n − 1
    (n = the histogram's total) so that it maps into [w_min, w_max] like the others. The
    summary only resolves accuracies to a bin, so the agents of one bin are tied and get
    the mean of their ranks, (below + (own − 1)/2); giving them all the lowest rank would
    send every agent of a crowded top bin to w_min.
    """
    counts = np.asarray(histogram, dtype=np.float64)
    total = float(counts.sum())
    if total <= 1:
        return 0.5
    k = accuracy_bin(accuracy, counts.shape[0])
    mid_rank = counts[:k].sum() + max(counts[k] - 1.0, 0.0) / 2.0
    return float(min(mid_rank / (total - 1.0), 1.0))


def zscore_score(accuracy: float, histogram: np.ndarray, span: float = 1.0) -> float:
    """The z-score of ``accuracy`` against ``histogram`` (B,), mapped to [0, 1].

    Mean and standard deviation are those of the bins' centres weighted by the counts;
    z ∈ [−span, span] maps linearly to [0, 1] (z = −span: w_min, z = +span: w_max) and
    beyond is clipped. A histogram with zero spread gives z = 0 (score 0.5).
    """
    if not span > 0:
        raise ValueError(f"span must be > 0, got {span}")
    counts = np.asarray(histogram, dtype=np.float64)
    total = float(counts.sum())
    if total <= 0:
        return 0.5
    centres = (np.arange(counts.shape[0]) + 0.5) / counts.shape[0]  # (B,)
    mean = float(np.sum(counts * centres) / total)
    std = float(np.sqrt(np.sum(counts * (centres - mean) ** 2) / total))
    z = 0.0 if std <= 0 else (float(accuracy) - mean) / std
    return float(min(max((z + span) / (2.0 * span), 0.0), 1.0))


def scheme_score(
    scheme: str, accuracy: float, histogram: np.ndarray | None = None, zscore_span: float = 1.0
) -> float:
    """The score v_i ∈ [0, 1] of Sec. 4.1.1 for ``scheme`` (1 for one-model-one-vote).

    ``accuracy`` uses only the agent's own validation accuracy (v = a); the relative
    schemes need ``histogram``, the released summary of every agent's accuracy.
    """
    if scheme not in WEIGHT_SCHEMES:
        raise ValueError(f"scheme must be one of {WEIGHT_SCHEMES}, got {scheme!r}")
    if scheme == "one-vote":
        return 1.0
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"accuracy must lie in [0, 1], got {accuracy}")
    if scheme == "accuracy":
        return float(accuracy)
    if histogram is None:
        raise ValueError(f"the {scheme} scheme needs the released accuracy histogram")
    if scheme == "percentile":
        return percentile_score(accuracy, histogram)
    if scheme == "rank":
        return rank_score(accuracy, histogram)
    return zscore_score(accuracy, histogram, zscore_span)


def integer_weight(weight: float, scale: int) -> int:
    """round(K·w) (halves up): a weight on the secure path's public grid of step 1/K; monotone in w."""
    return int(math.floor(float(weight) * int(scale) + 0.5))


@dataclass(frozen=True, eq=False)
class WeightRule:
    """How an agent turns its own validation accuracy into its vote weight (Sec. 4.1.1).

    Sent to every agent; each applies it *locally* to its own accuracy, so the server never
    sees a weight. ``histogram`` (B,) is the released, projected summary of all agents'
    accuracies (relative schemes only; None otherwise). ``one-vote`` gives w = 1.
    ``scale`` K (``--secure-noise`` only): each agent votes with the integer weight
    round(K·w) (:func:`fedvote.privacy.events.integer_weight`).
    """

    scheme: str
    min_weight: float = 0.1
    max_weight: float = 3.0
    zscore_span: float = 1.0
    histogram: np.ndarray | None = None
    scale: int | None = None

    def __post_init__(self) -> None:
        if self.scale is not None and (isinstance(self.scale, bool) or self.scale < 1):
            raise ValueError(f"scale must be an integer >= 1 or None, got {self.scale!r}")
        if self.scheme not in WEIGHT_SCHEMES:
            raise ValueError(f"scheme must be one of {WEIGHT_SCHEMES}, got {self.scheme!r}")
        _check_weight_range(self.min_weight, self.max_weight)
        if self.scheme in RELATIVE_SCHEMES and self.histogram is None:
            raise ValueError(f"the {self.scheme} scheme needs the released accuracy histogram")

    def weight(self, accuracy: float) -> float:
        """The weight in [min_weight, max_weight] of an agent of validation ``accuracy`` (one-vote: 1)."""
        if self.scheme == "one-vote":
            return 1.0
        score = scheme_score(self.scheme, accuracy, self.histogram, self.zscore_span)
        return weight_from_score(score, self.min_weight, self.max_weight)


def _check_weight_range(min_weight: float, max_weight: float) -> None:
    if not (0.0 <= min_weight <= max_weight and math.isfinite(max_weight) and max_weight > 0):
        raise ValueError(f"need 0 <= min_weight <= max_weight < inf, got [{min_weight}, {max_weight}]")


# --- kNN votes: how many neighbours (light: an options dataclass validates k with it) -------------

# The largest k accepted: more neighbours than any agent could hold (index arithmetic is int32).
MAX_K = 2**31 - 1


def resolve_k(num_records: int, k: int | None, k_fraction: float) -> int:
    """The k an agent with ``num_records`` records uses: ``k`` if given, else round(f·n), ≥ 1.

    The kNN votes themselves are :mod:`fedvote.aggregation.knn`'s.
    """
    if k is not None:
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= MAX_K:
            raise ConfigError("k", f"must be an integer in [1, {MAX_K}], got {k!r}")
        return int(k)
    if not 0.0 < k_fraction <= 1.0:
        raise ConfigError("k_fraction", f"must lie in (0, 1], got {k_fraction}")
    return max(1, math.floor(k_fraction * num_records + 0.5))
