"""Tests on what the server receives: the most powerful statistic for a Gaussian release.

A release Y = b + Δ·1[D] + N(0, s²I) (b known to the auditor: the other agents' clean
votes are reused, so the auditor knows them, as the strongest adversary of Nasr et al.
2021 does) has log-likelihood ratio

    log p_D(Y)/p_D'(Y) = (⟨Y − b, Δ⟩ − ‖Δ‖²/2)/s²,

so by the Neyman–Pearson lemma every most powerful test thresholds ⟨Y − b, Δ⟩/‖Δ‖, which
is N(‖Δ‖, s²) under D and N(0, s²) under D'. For zero-out of a one-hot canary on Q queries
this is the sum over queries of the canary class's noisy count minus what the others
contribute: a one-dimensional Gaussian test with μ = √Q·s_vote/σ, the μ of the whole
Q-query release (Balle & Wang 2018; Dong, Roth & Su 2019), so the audit can be tight.
"""

from __future__ import annotations

import numpy as np


def projection_scores(received: np.ndarray, baseline: np.ndarray, difference: np.ndarray) -> np.ndarray:
    """⟨Y_i − b, Δ⟩/‖Δ‖ for each trial i: ``received`` (T, *shape), ``baseline`` and ``difference`` (*shape).

    Larger means "the canary is in" (D). ``baseline`` is what the server would receive
    without noise in D', ``difference`` what the canary adds in D.
    """
    difference = np.asarray(difference, dtype=np.float64)
    norm = float(np.linalg.norm(difference))
    if not norm > 0:
        raise ValueError("the canary changes nothing: its two contributions are equal")
    centred = np.asarray(received, dtype=np.float64) - baseline  # (T, *shape)
    trials = centred.shape[0]
    return centred.reshape(trials, -1) @ difference.reshape(-1) / norm  # (T,)


def subsampled_gaussian_scores(
    received: np.ndarray,
    *,
    shift: float,
    noise_std: float,
    rate: float,
    antipodal: bool,
    taking_part: np.ndarray | None = None,
) -> np.ndarray:
    """Per-canary log-likelihood ratio of R observed rounds of a Poisson-subsampled Gaussian, (m,).

    ``received`` (R, m): canary j's coordinate of round r's noisy sum. In D the canary adds
    ``shift`` with probability ``rate`` each round (its coin), in D' nothing (zero-out) or
    −``shift`` (``antipodal``, replace-one); the noise is N(0, ``noise_std``²). Per round the
    ratio of the two mixtures is (1 − q + q·e^(az − a²/2)) / (1 − q + q·e^(−az − a²/2)) with
    z = y/σ, a = shift/σ (the denominator is 1 for zero-out); summing their logs over the
    rounds is the most powerful test of one canary (Neyman–Pearson), where a plain sum
    of y wastes the rounds in which the canary was not drawn. ``taking_part`` (R, m) masks
    rounds in which the canary's client did not run (they carry no information).
    """
    z = np.asarray(received, dtype=np.float64) / noise_std  # (R, m)
    a = shift / noise_std
    log_stay = np.log1p(-rate) if rate < 1.0 else -np.inf
    log_rate = np.log(rate)
    ratio = np.logaddexp(log_stay, log_rate + a * z - a * a / 2)
    if antipodal:
        ratio = ratio - np.logaddexp(log_stay, log_rate - a * z - a * a / 2)
    if taking_part is not None:
        ratio = np.where(taking_part, ratio, 0.0)
    return ratio.sum(axis=0)


def visible_gaussian_scores(
    received: np.ndarray, sampled: np.ndarray, noise_stds: np.ndarray, *, shift: float, antipodal: bool
) -> np.ndarray:
    """Per-canary log-likelihood ratio of its own noisy updates, seen with who was sampled, (m,).

    DP-FedAvg's ``distributed-unmasked`` noise: the server sees canary j's update in every
    round r it was sampled (``sampled`` (R, m)), y = c + N(0, s_r²) with s_r =
    ``noise_stds[r]``; in D the canary adds c = ``shift``, in D' zeros (zero-out) or
    −``shift`` (``antipodal``). The exact log ratio of those Gaussians is a·z − a²/2 per
    round (z = y/s_r, a = shift/s_r), or 2a·z antipodal (Neyman–Pearson); rounds it was
    not sampled carry nothing.
    """
    stds = np.asarray(noise_stds, dtype=np.float64)[:, None]  # (R, 1)
    safe = np.where(stds > 0, stds, 1.0)
    z = np.asarray(received, dtype=np.float64) / safe  # (R, m)
    a = shift / safe
    ratio = 2.0 * a * z if antipodal else a * z - a * a / 2.0
    return np.where(np.asarray(sampled, dtype=bool), ratio, 0.0).sum(axis=0)
