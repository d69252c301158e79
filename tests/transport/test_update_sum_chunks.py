"""DP-FedAvg's plain sum of every agent's release, added chunk by chunk (memory bounded in N):
the same total, whatever the chunk (to float64 rounding: the
chunk decides the order in which float32 shares are added)."""

from __future__ import annotations

import numpy as np
import pytest

import fedvote.transport.local.updates as updates
from fedvote.models.local_training import LocalTraining
from fedvote.transport.local import LocalTransport


@pytest.mark.parametrize("chunk", [1, 3, 7])
def test_chunked_sum_equals_the_whole_sum(small_federation, monkeypatch, chunk):
    training = LocalTraining(model="logistic", steps=1, learning_rate=0.1, clip_norm=0.5, noise_std=0.2)
    theta = np.zeros(64 * 10 + 10, dtype=np.float32)
    chosen = np.array([1, 4, 8])
    whole = LocalTransport(small_federation, noise_seed=5).secure_update_sum(theta, chosen, training)
    monkeypatch.setattr(updates, "_SUM_CHUNK", chunk)
    chunked = LocalTransport(small_federation, noise_seed=5).secure_update_sum(theta, chosen, training)
    assert np.allclose(whole, chunked, rtol=0, atol=1e-9)
    assert np.any(whole != 0)
