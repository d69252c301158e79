"""Integer vote sums on a public scale: ``--secure-noise`` for Private-kNN-FL and weighted PATE.

The secure path adds exact discrete Gaussian noise, which needs integer votes
(:mod:`fedvote.aggregation.secure_noise`). A kNN vote (the mean of k labels) and a
weighted vote (w·e_y) are not integers, so on that path each agent releases them on a
public integer scale K — the counts of its k neighbours' labels (K = the run's largest k),
or round(K·w)·e_y (K = ``--weight-scale``) — and its share of N_Z(0, (Kσ)²/t); the
server divides the integer sum by K, which is post-processing and brings the sums back to
the units (and the noise std σ) of the plain release (``docs/privacy.md``, "Secure noise
for kNN and weighted votes").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fedvote.transport.base import VoteSum

VoteSumFn = Callable[[np.ndarray, float, int], VoteSum | None]


def on_integer_scale(vote_sum: VoteSumFn, scale: int) -> VoteSumFn:
    """``vote_sum`` asked with noise share std K·s, its integer sum then divided by K = ``scale``.

    ``vote_sum(batch, s, t)`` is the transport's release of plain votes with share std s;
    the returned function asks for K·s (the agents vote on the scale K) and returns the
    released integer sums over K, (Q, C).
    """
    if scale < 1:
        raise ValueError(f"scale must be >= 1, got {scale}")

    def scaled(batch: np.ndarray, noise_std: float, min_responders: int) -> VoteSum | None:
        released = vote_sum(batch, noise_std * scale, min_responders)
        if released is None:
            return None
        return VoteSum(sums=released.sums / scale, responders=released.responders)

    return scaled
