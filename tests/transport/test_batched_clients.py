"""The gradient baselines' batched clients (``fedvote.transport.batched_clients.BatchedUpdates``).

LocalTransport trains a round's sampled agents of FedAvg, DP-FedAvg and DP-FedSGD as one
vectorised computation by default, and must give the per-agent loop's updates — the same
mini-batches, the same DP-SGD batches and noise (Opacus's draws from each agent's privacy
seed), the same clipping and noise share through each agent's own exit — within float32
rounding (rtol 1e-4, atol 1e-6 on updates of norm ~0.01–10), over consecutive rounds (the
agents' noise streams advance alike), for agents of unequal sizes, one smaller than a
mini-batch and one with no records.
"""

import dataclasses

import numpy as np
import pytest
import torch

from fedvote.agents.agent import Agent
from fedvote.data.federation import LabeledData, build_federation
from fedvote.data.partition import PartitionSpec
from fedvote.models.local_training import DpSgdSpec, LocalTraining, flat_parameters
from fedvote.models.shifted_input import public_mean_shift
from fedvote.models.zoo import build_model
from fedvote.transport.base import agent_noise_seeds
from fedvote.transport.local import LocalTransport
from fedvote.transport.local import updates as local

RTOL, ATOL = 1e-4, 1e-6


@pytest.fixture(scope="module")
def uneven_federation(digits):
    """8 Dirichlet agents of unequal sizes, then agent 6 cut to 5 records (< a batch) and agent 7 to none."""
    federation = build_federation(digits, num_agents=8, partition=PartitionSpec("dirichlet", alpha=0.5), seed=3)
    agents = list(federation.agents)
    agents[6] = LabeledData(agents[6].features[:5], agents[6].labels[:5])
    agents[7] = LabeledData(agents[7].features[:0], agents[7].labels[:0])
    federation = dataclasses.replace(federation, agents=tuple(agents))
    assert len(set(federation.agent_sizes().tolist())) == 8
    return federation


def _trainings(shift):
    return {
        "fedavg": LocalTraining(model="mlp", steps=20, learning_rate=0.1, batch_size=32, round_index=4),
        "dp-fedavg": LocalTraining(model="mlp", steps=20, learning_rate=0.1, batch_size=32, round_index=4,
                                   clip_norm=0.08, noise_std=0.02),
        "dp-fedsgd": LocalTraining(model="mlp", steps=3, learning_rate=1.0, round_index=4, input_shift=shift,
                                   dp_sgd=DpSgdSpec(sampling_rate=0.25, noise_multiplier=1.1, max_grad_norm=1.0)),
        "dp-fedsgd logistic, empty batches": LocalTraining(
            model="logistic", steps=4, learning_rate=1.0, round_index=4,
            dp_sgd=DpSgdSpec(sampling_rate=0.05, noise_multiplier=0.8, max_grad_norm=0.5)),
    }


def _theta(federation, model):
    return flat_parameters(build_model(model, federation.example_shape, 10, generator=torch.Generator().manual_seed(0)))


def _pair(federation):
    return (LocalTransport(federation, seed=5, noise_seed=11),
            LocalTransport(federation, seed=5, noise_seed=11, batched=False))


@pytest.mark.parametrize("name", ["fedavg", "dp-fedavg", "dp-fedsgd", "dp-fedsgd logistic, empty batches"])
def test_batched_updates_equal_the_loops_round_after_round(uneven_federation, name):
    training = _trainings(public_mean_shift(uneven_federation.public.features))[name]
    theta = _theta(uneven_federation, training.model)
    batched, looped = _pair(uneven_federation)
    ids = np.array([0, 2, 5, 6, 7])
    for _ in range(2):  # the second round draws on from where the first left each agent's streams
        a = batched.local_updates(theta, ids, training)
        b = looped.local_updates(theta, ids, training)
        np.testing.assert_allclose(a.updates, b.updates, rtol=RTOL, atol=ATOL)
        np.testing.assert_array_equal(a.records, b.records)
        assert np.abs(b.updates[:3]).max() > 1e-3  # they trained (or carry noise)
        if training.noise_std == 0 and training.dp_sgd is None:
            assert not np.any(a.updates[4])  # no records, no noise: nothing moves
    assert batched.communication == looped.communication


@pytest.mark.parametrize("name", ["dp-fedavg", "dp-fedsgd"])
def test_the_secure_update_sum_equals_the_loops(uneven_federation, name):
    """DP-FedAvg's distributed noise: sampled agents' updates plus every other agent's share, summed."""
    training = _trainings(public_mean_shift(uneven_federation.public.features))[name]
    theta = _theta(uneven_federation, training.model)
    batched, looped = _pair(uneven_federation)
    for ids in (np.array([1, 3, 6]), np.array([], dtype=np.int64), np.arange(8)):
        np.testing.assert_allclose(batched.secure_update_sum(theta, ids, training),
                                   looped.secure_update_sum(theta, ids, training), rtol=RTOL, atol=ATOL)


def test_batched_is_the_default_and_every_update_leaves_through_its_agents_exit(uneven_federation, monkeypatch):
    """The default never runs the per-agent loop for a perceptron; each update passes Agent.release once."""
    def no_loop(*args, **kwargs):
        raise AssertionError("the per-agent loop ran")

    released = []
    release = Agent.release

    def counting(self, values, noise_std, expected):
        released.append((self.agent_id, noise_std, expected.norm_bound))
        return release(self, values, noise_std, expected)

    monkeypatch.setattr(local, "local_update", no_loop)
    monkeypatch.setattr(Agent, "release", counting)
    training = _trainings(None)["dp-fedavg"]
    transport = LocalTransport(uneven_federation, seed=5, noise_seed=11)
    updates = transport.local_updates(_theta(uneven_federation, "mlp"), np.array([4, 1, 6]), training).updates
    assert released == [(4, 0.02, 0.08), (1, 0.02, 0.08), (6, 0.02, 0.08)]
    for row, agent_id in enumerate([4, 1, 6]):  # plain SGD draws no privacy randomness: the share is the first draw
        share = np.random.default_rng(agent_noise_seeds(11, agent_id)).normal(0.0, 0.02, updates.shape[1])
        clean = updates[row] - share
        assert 0.01 < np.linalg.norm(clean) <= 0.08 * (1 + 1e-5)  # clipped to S, then the agent's own share


def test_a_cnn_round_stays_in_the_loop(uneven_federation, monkeypatch):
    calls = []
    loop = local.local_update
    monkeypatch.setattr(local, "local_update", lambda agent, theta, training: calls.append(agent.agent_id)
                        or loop(agent, theta, training))
    training = LocalTraining(model="cnn", steps=2, learning_rate=0.1, batch_size=8)
    transport = LocalTransport(uneven_federation, seed=5, noise_seed=11)
    transport.local_updates(_theta(uneven_federation, "cnn"), np.array([0, 3]), training)
    assert calls == [0, 3]


def test_size_groups_bound_the_padding():
    from fedvote.transport.batched_clients import size_groups

    expected = [19.0, 350.0, 40.0, 37.0, 150.0, 80.0, 20.0]
    groups = size_groups(expected, 2.0)
    assert sorted(j for group in groups for j in group) == list(range(7))  # every agent once
    for group in groups:
        sizes = [expected[j] for j in group]
        assert max(sizes) <= 2.0 * min(sizes)
    assert [[expected[j] for j in group] for group in groups] == [[19.0, 20.0, 37.0], [40.0, 80.0], [150.0], [350.0]]
    assert size_groups(expected, float("inf")) == [[0, 6, 3, 2, 5, 4, 1]]  # one padded computation
    assert size_groups([], 2.0) == []
