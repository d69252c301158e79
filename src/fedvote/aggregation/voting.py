"""Votes: one-hot histograms, each agent's noise share, and the noisy argmax (Algorithm 1)."""

from __future__ import annotations

import math

import numpy as np


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


def top_two_gap(vote_sums: np.ndarray) -> np.ndarray:
    """Gap (Q,) between the largest and second largest entry of each row of (Q, C) sums."""
    top_two = np.sort(vote_sums, axis=1)[:, -2:]
    return top_two[:, 1] - top_two[:, 0]
