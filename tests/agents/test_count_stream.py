"""Adaptive clipping's count coordinate at the agent's exit (issue 46): a release with
``count_coordinates=1`` gives its other coordinates exactly the draws of the release without the count and takes
the count's noise from the agent's own count stream, which touches nothing of the noise stream."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedvote.agents.agent import ArrayOutput
from fedvote.agents.local_updates import ClipCountTraining, count_coordinates, noise_shares, released_width
from fedvote.models.local_training import LocalTraining
from fedvote.transport.local import LocalTransport


def _agents(federation, noise_seed=5, **kwargs):
    return LocalTransport(federation, noise_seed=noise_seed, **kwargs)._agents


def test_only_adaptive_clipping_releases_a_count():
    training = ClipCountTraining(model="logistic", steps=1, learning_rate=0.1, clip_norm=1.0, noise_std=0.3)
    assert count_coordinates(training) == 1 and released_width(training, 10) == 11
    plain = LocalTraining(model="logistic", steps=1, learning_rate=0.1, clip_norm=1.0, noise_std=0.3)
    assert count_coordinates(plain) == 0 and released_width(plain, 10) == 10


def test_release_with_a_count_keeps_the_updates_draws(small_federation):
    d, std = 300, 0.4
    counted_agents, plain_agents = _agents(small_federation), _agents(small_federation)
    values = np.linspace(-0.01, 0.01, d + 1)
    for _ in range(3):  # rounds: the streams stay in step
        for counted, plain in zip(counted_agents, plain_agents, strict=True):
            out = counted.release(values, std, ArrayOutput("stacked", (d + 1,)), count_coordinates=1)
            ref = plain.release(values[:d], std, ArrayOutput("update", (d,)))
            assert np.array_equal(out[:d], ref)
            assert out[d] != values[d]  # the count got noise of its own
    for counted, plain in zip(counted_agents, plain_agents, strict=True):
        assert counted._noise_rng.bit_generator.state == plain._noise_rng.bit_generator.state


def test_shares_with_a_count_keep_the_updates_draws(small_federation):
    d, std = 1000, 0.7
    counted = noise_shares(_agents(small_federation), d + 1, std, count_coordinates=1)
    plain = noise_shares(_agents(small_federation), d, std)
    assert np.array_equal(counted[:, :d], plain)
    one = _agents(small_federation)[2].noise_share((d + 1,), std, count_coordinates=1)
    assert np.array_equal(one.astype(np.float32), counted[2])  # the block is the per-agent share
    # torch's own draw of d + 1 would not do: its tail is drawn again (why the count is apart).
    tail = torch.randn((d + 1,), generator=torch.Generator().manual_seed(1))[:d]
    assert not torch.equal(tail, torch.randn((d,), generator=torch.Generator().manual_seed(1)))


def test_count_streams_are_per_agent_reproducible_and_fresh_each_draw(small_federation):
    agents = _agents(small_federation)
    draws = np.array([[agent._count_noise(1.0, 1)[0] for agent in agents] for _ in range(200)])  # (200, N)
    fresh = _agents(small_federation)
    again = np.array([[agent._count_noise(1.0, 1)[0] for agent in fresh] for _ in range(200)])
    assert np.array_equal(draws, again)
    assert len(np.unique(draws)) == draws.size  # no draw repeated, across rounds or agents
    other = np.array([agent._count_noise(1.0, 1)[0] for agent in _agents(small_federation, noise_seed=6)])
    assert not np.array_equal(other, draws[0])
    assert np.max(np.abs(np.corrcoef(draws.T)[np.triu_indices(10, k=1)])) < 5 / np.sqrt(200)


def test_secure_noise_agents_keep_the_csprng(small_federation):
    agent = _agents(small_federation, noise_seed=None, secure_noise=True)[0]
    share = agent.noise_share((51,), 1.0, count_coordinates=1)
    assert share.shape == (51,) and np.all(np.isfinite(share)) and share[-1] != 0
    first = agent.count_generator()
    assert first is agent.count_generator()
    assert first.bit_generator.seed_seq.spawn_key == ()  # OS entropy, not derived from a seed


def test_a_count_needs_a_vector(small_federation):
    agent = _agents(small_federation)[0]
    with pytest.raises(ValueError):
        agent.release(np.zeros((2, 3)), 1.0, ArrayOutput("matrix", (2, 3)), count_coordinates=1)
    with pytest.raises(ValueError):
        agent.write_noise_share(torch.zeros((2, 3)), 1.0, count_coordinates=1)
    with pytest.raises(ValueError):
        agent.release(np.zeros(3), 1.0, ArrayOutput("vector", (3,)), count_coordinates=-1)
