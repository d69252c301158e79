"""Issue 46, item 4: the unsampled agents' noise shares drawn as one block per chunk, each agent from
its own generator: the block equals the per-agent loop, every agent's stream is its own and
reproducible, and each share keeps the std it is given (σS/√t, set by the method, unchanged)."""

from __future__ import annotations

import numpy as np
import pytest

from fedvote.agents.local_updates import noise_shares
from fedvote.models.local_training import LocalTraining
from fedvote.transport.local import LocalTransport


def _agents(federation, noise_seed=5):
    return LocalTransport(federation, noise_seed=noise_seed)._agents


def test_block_equals_the_per_agent_loop(small_federation):
    width, std = 4001, 0.37
    block = noise_shares(_agents(small_federation), width, std)  # (10, width): one computation
    loop = np.stack([agent.noise_share((width,), std) for agent in _agents(small_federation)])
    assert block.shape == (10, width) and block.dtype == np.float32
    assert loop.dtype == np.float64 and np.array_equal(block.astype(np.float64), loop)
    # Any split of the agents (as the sum's threads split a chunk) gives the same rows.
    agents = _agents(small_federation)
    buffer = np.empty((10, width), dtype=np.float32)
    noise_shares(agents[:4], width, std, out=buffer)
    noise_shares(agents[4:], width, std, out=buffer[4:])
    assert np.array_equal(buffer.astype(np.float64), loop)


def test_each_agent_has_its_own_reproducible_stream(small_federation):
    width = 20_000
    first = noise_shares(_agents(small_federation), width, 1.0).astype(np.float64)
    again = noise_shares(_agents(small_federation), width, 1.0).astype(np.float64)
    assert np.array_equal(first, again)  # the same seeds: the same shares, agent by agent
    other = noise_shares(_agents(small_federation, noise_seed=6), width, 1.0)
    assert not np.array_equal(first, other)
    correlations = np.corrcoef(first)[np.triu_indices(10, k=1)]
    assert np.max(np.abs(correlations)) < 5.0 / np.sqrt(width)  # independent streams
    agents = _agents(small_federation)
    assert np.array_equal(noise_shares(agents, width, 1.0).astype(np.float64), first)  # fresh agents
    assert not np.array_equal(noise_shares(agents, width, 1.0).astype(np.float64), first)  # next share: new seed


@pytest.mark.parametrize("std", [0.05, 2.5])
def test_each_share_has_the_std_it_is_given(small_federation, std):
    width = 200_000
    shares = noise_shares(_agents(small_federation), width, std).astype(np.float64)
    assert np.allclose(shares.mean(axis=1), 0.0, atol=5 * std / np.sqrt(width))
    assert np.allclose(shares.std(axis=1), std, rtol=0.01)
    assert np.array_equal(noise_shares(_agents(small_federation), 50, 0.0), np.zeros((10, 50)))


def test_the_sum_adds_every_agents_own_share(small_federation):
    """secure_update_sum with nobody sampled: the N shares of the per-agent loop, added (nothing else)."""
    training = LocalTraining(model="logistic", steps=1, learning_rate=0.1, clip_norm=0.5, noise_std=0.2)
    theta = np.zeros(64 * 10 + 10, dtype=np.float32)
    total = LocalTransport(small_federation, noise_seed=5).secure_update_sum(theta, np.array([], int), training)
    loop = sum(agent.noise_share((theta.size,), 0.2) for agent in _agents(small_federation))
    assert np.allclose(total, loop, rtol=0, atol=1e-6)
    assert np.any(total != 0)
