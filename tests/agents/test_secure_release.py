"""The agent's exit with ``secure_noise``: integer votes get exact discrete Gaussian shares, sums stay integers."""

from __future__ import annotations

import numpy as np
import pytest

from fedvote.agents.agent import Agent, ArrayOutput, VoteOutput
from fedvote.aggregation.secure_noise import csprng_seeded_generator
from fedvote.aggregation.voting import one_hot_votes
from fedvote.data.federation import LabeledData
from fedvote.errors import ConfigError, VoteRejected
from fedvote.transport.local import LocalTransport


def _agent(secure: bool, rng_seed: int = 0) -> Agent:
    data = LabeledData(features=np.zeros((4, 3)), labels=np.array([0, 1, 2, 1]))
    return Agent(
        agent_id=2,
        data=data,
        public_features=np.zeros((50, 3)),
        num_classes=3,
        noise_rng=np.random.default_rng(rng_seed) if not secure else csprng_seeded_generator(),
        seed=1,
        secure_noise=secure,
    )


def test_a_secure_vote_release_is_an_integer_vote_plus_integer_noise() -> None:
    agent = _agent(secure=True)
    votes = one_hot_votes(np.arange(2000) % 3, 3)  # (Q, C)
    released = agent.release(votes, 2.5, VoteOutput(num_queries=2000, one_hot=True))
    assert np.array_equal(released, np.round(released))  # integers, exactly
    noise = released - votes
    assert noise.std() > 1.5  # noise was added (N_Z(0, 2.5²): std just below 2.5)
    assert abs(float(noise.mean())) < 6 * 2.5 / np.sqrt(noise.size)
    # sums of such releases stay exact integers: no rounding anywhere downstream
    total = sum(agent.release(votes, 2.5, VoteOutput(num_queries=2000, one_hot=True)) for _ in range(5))
    assert np.array_equal(total, np.round(total))


def test_a_secure_release_refuses_non_integer_votes() -> None:
    agent = _agent(secure=True)
    with pytest.raises(VoteRejected, match="non-integer"):
        agent.release(np.full((2, 3), 1.0 / 3.0), 1.0, VoteOutput(num_queries=2))


def test_a_secure_array_release_is_real_gaussian_and_seeds_come_from_the_os() -> None:
    agent = _agent(secure=True)
    released = agent.release(np.zeros(5000), 1.0, ArrayOutput("update", (5000,)))
    assert not np.array_equal(released, np.round(released))
    assert 0.9 < released.std() < 1.1
    # two agents built on identically seeded generators: the plain ones repeat their seeds, secure ones do not
    assert _agent(secure=False).privacy_seed() == _agent(secure=False).privacy_seed()
    assert _agent(secure=True).privacy_seed() != _agent(secure=True).privacy_seed()


def test_the_local_transport_refuses_secure_noise_with_a_noise_seed(small_federation) -> None:
    with pytest.raises(ConfigError, match="noise-seed"):
        LocalTransport(small_federation, noise_seed=3, secure_noise=True)
