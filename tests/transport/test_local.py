"""LocalTransport: the batched ensemble and the per-agent loop give the same teachers and votes."""

import numpy as np
import pytest
import torch

from fedvote.agents.agent import Agent
from fedvote.analysis import diagnostic_test_indices, diagnostic_test_sample
from fedvote.data.federation import build_federation
from fedvote.data.partition import PartitionSpec
from fedvote.models.training import TrainingConfig
from fedvote.transport.base import agent_training_seeds
from fedvote.transport.local import LocalTransport

CONFIG = TrainingConfig(model="mlp", epochs=3, batch_size=16)


@pytest.fixture(scope="module")
def skewed_federation(digits):
    """8 agents of unequal sizes (Dirichlet), so the ensemble has to mask padded steps."""
    federation = build_federation(digits, num_agents=8, partition=PartitionSpec("dirichlet", alpha=0.5), seed=3)
    assert len(set(federation.agent_sizes().tolist())) > 1
    return federation


@pytest.fixture(scope="module")
def trained_pair(skewed_federation):
    """The same federation, seeds and noise seed: batched and looped."""
    batched = LocalTransport(skewed_federation, seed=5, noise_seed=11)
    looped = LocalTransport(skewed_federation, seed=5, noise_seed=11, batched=False)
    batched.train_teachers(CONFIG)
    looped.train_teachers(CONFIG)
    return batched, looped


def test_batched_is_the_default_and_the_loop_remains(trained_pair):
    batched, looped = trained_pair
    assert batched.batched and not looped.batched


def test_batched_and_looped_give_the_same_votes_with_the_same_noise_seed(trained_pair, skewed_federation):
    batched, looped = trained_pair
    queries = np.arange(0, skewed_federation.public.features.shape[0], 3)[:120]
    for noise_std in (0.0, 2.5):  # noise drawn from each agent's own generator, in the same order
        a = batched.vote_sum(queries, noise_std, min_responders=8)
        b = looped.vote_sum(queries, noise_std, min_responders=8)
        assert a is not None and b is not None
        assert a.sums.shape == (queries.shape[0], skewed_federation.num_classes)
        assert a.responders == b.responders == 8
        np.testing.assert_allclose(a.sums, b.sums, rtol=0, atol=1e-9)


def test_batched_teachers_are_each_agents_own_module_built_on_first_use(trained_pair, skewed_federation):
    batched, looped = trained_pair
    agents = batched._agents  # noqa: SLF001 - the agents the transport holds
    assert all(agent._teacher is None for agent in agents)  # noqa: SLF001 - votes need no module
    features = skewed_federation.public.features[:50]
    for i, (agent, loop_agent) in enumerate(zip(agents, looped._agents, strict=True)):  # noqa: SLF001
        teacher = agent.teacher
        assert agent.teacher is teacher and not teacher.training  # built once, in eval mode
        with torch.no_grad():
            got = teacher(torch.as_tensor(features, dtype=torch.float32))
            want = loop_agent.teacher(torch.as_tensor(features, dtype=torch.float32))
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=1e-4, err_msg=f"agent {i}")


def test_a_teacher_installed_or_trained_later_replaces_a_pending_builder(skewed_federation):
    agent = LocalTransport(skewed_federation, seed=5)._agents[0]  # noqa: SLF001 - an untrained agent
    calls = []
    agent.install_teacher_builder(lambda: calls.append(1) or torch.nn.Linear(64, 10))
    installed = torch.nn.Linear(64, 10)
    agent.install_teacher(installed)
    assert agent.teacher is installed and calls == []
    agent.install_teacher_builder(lambda: calls.append(1) or torch.nn.Linear(64, 10))
    agent.train_teacher(TrainingConfig(model="logistic", epochs=1, batch_size=64))
    assert isinstance(agent.teacher, torch.nn.Module) and calls == []


def test_clean_vote_sums_count_every_agent_once(trained_pair):
    batched, _ = trained_pair
    queries = np.arange(25)
    vote = batched.vote_sum(queries, 0.0, min_responders=1)
    assert vote is not None
    np.testing.assert_array_equal(vote.sums.sum(axis=1), np.full(25, 8.0))
    assert np.all(vote.sums == np.round(vote.sums))


def test_each_agent_adds_its_own_noise_share(skewed_federation):
    # Noisy sum minus clean sum is the sum of 8 independent N(0, s^2) shares per cell:
    # its sample std over 10 x 300 cells is within 10% of s*sqrt(8) with overwhelming probability.
    transport = LocalTransport(skewed_federation, seed=5, noise_seed=4)
    transport.train_teachers(TrainingConfig(model="logistic", epochs=1, batch_size=64))
    queries = np.arange(300)
    clean = transport.vote_sum(queries, 0.0, min_responders=8)
    noisy = transport.vote_sum(queries, 3.0, min_responders=8)
    assert clean is not None and noisy is not None
    noise = noisy.sums - clean.sums
    assert abs(noise.std() / (3.0 * np.sqrt(8)) - 1) < 0.1
    again = LocalTransport(skewed_federation, seed=5, noise_seed=5)
    again.train_teachers(TrainingConfig(model="logistic", epochs=1, batch_size=64))
    again.vote_sum(queries, 0.0, min_responders=8)
    other = again.vote_sum(queries, 3.0, min_responders=8)
    assert other is not None and not np.allclose(other.sums, noisy.sums)


def test_teacher_accuracies_agree(trained_pair, skewed_federation):
    batched, looped = trained_pair
    accuracies = batched.teacher_accuracies(skewed_federation.test)
    assert accuracies.shape == (8,)
    np.testing.assert_allclose(accuracies, looped.teacher_accuracies(skewed_federation.test), atol=1e-9)
    # On the CPU both loop over the agents' teachers; the ensemble's one batched forward
    # (what an accelerator uses) gives the same accuracies.
    test = skewed_federation.test
    predictions = batched._ensemble.predict(test.features).numpy()  # (N, T)
    np.testing.assert_allclose(accuracies, np.mean(predictions == test.labels[None, :], axis=1), atol=1e-9)


def _direct_accuracies(federation, seed, indices):
    """Reference: each agent's teacher trained alone, its argmax read off the logits on ``indices``."""
    seeds = agent_training_seeds(seed, federation.num_agents)
    x = torch.as_tensor(federation.test.features[indices], dtype=torch.float32)
    y = torch.as_tensor(federation.test.labels[indices])
    accuracies = []
    for i, data in enumerate(federation.agents):
        agent = Agent(agent_id=i, data=data, public_features=federation.public.features,
                      num_classes=federation.num_classes, noise_rng=np.random.default_rng(0), seed=seeds[i])
        agent.train_teacher(CONFIG)
        with torch.no_grad():
            accuracies.append((agent.teacher.eval()(x).argmax(dim=1) == y).double().mean().item())
    return np.array(accuracies)


def test_teacher_accuracies_on_the_diagnostic_sample_equal_a_direct_computation(trained_pair, skewed_federation):
    # A sample smaller than the test set (digits' is below DIAGNOSTIC_TEST_SAMPLE, so a smaller limit).
    test = skewed_federation.test
    indices = diagnostic_test_indices(len(test), seed=5, limit=100)
    sample = diagnostic_test_sample(test, seed=5, limit=100)
    assert len(sample) == 100 < len(test)
    np.testing.assert_array_equal(sample.labels, test.labels[indices])
    reference = _direct_accuracies(skewed_federation, 5, indices)
    for transport in trained_pair:
        np.testing.assert_allclose(transport.teacher_accuracies(sample), reference, atol=1e-9)


def test_teacher_accuracies_draw_no_noise_and_send_nothing(skewed_federation):
    config = TrainingConfig(model="logistic", epochs=1, batch_size=64)
    transports = [LocalTransport(skewed_federation, seed=5, noise_seed=4) for _ in range(2)]
    for transport in transports:
        transport.train_teachers(config)
    transports[0].teacher_accuracies(diagnostic_test_sample(skewed_federation.test, seed=5, limit=50))
    queries = np.arange(20)
    sums = [transport.vote_sum(queries, 3.0, min_responders=8).sums for transport in transports]
    np.testing.assert_array_equal(sums[0], sums[1])  # the same noise drawn afterwards
    assert transports[0].communication.as_dict() == transports[1].communication.as_dict()


def test_too_few_responders_release_nothing(trained_pair):
    batched, _ = trained_pair
    rounds = batched.communication.rounds
    assert batched.vote_sum(np.arange(5), 1.0, min_responders=9) is None
    assert batched.communication.rounds == rounds + 1


def test_communication_is_counted_the_same_way(skewed_federation):
    counters = []
    for batched in (True, False):
        transport = LocalTransport(skewed_federation, seed=1, noise_seed=2, batched=batched)
        transport.train_teachers(TrainingConfig(model="logistic", epochs=1, batch_size=64))
        transport.vote_sum(np.arange(30), 1.0, min_responders=8)
        counters.append(transport.communication.as_dict())
    assert counters[0] == counters[1]
    assert counters[0]["upload_floats"] == 8 * 30 * skewed_federation.num_classes


def test_cnn_teachers_are_batched_on_cpu_and_augmenting_ones_loop(skewed_federation):
    """The stacked CNN beats the loop on a CPU (benchmarks), so CNNs train as one ensemble;
    teachers that augment their data loop (the ensemble does not augment)."""
    transport = LocalTransport(skewed_federation, seed=0, noise_seed=0)
    transport.train_teachers(TrainingConfig(model="cnn", epochs=1))
    assert transport._ensemble is not None
    sums = transport.vote_sum(np.arange(10), 0.0, skewed_federation.num_agents).sums
    assert np.array_equal(sums.sum(axis=1), np.full(10, skewed_federation.num_agents))
    transport.train_teachers(TrainingConfig(model="cnn", epochs=1, augment_shift=1))
    assert transport._ensemble is None
    sums = transport.vote_sum(np.arange(10), 0.0, skewed_federation.num_agents).sums
    assert np.array_equal(sums.sum(axis=1), np.full(10, skewed_federation.num_agents))


def test_auto_computes_on_cuda_when_pytorch_sees_it_and_a_named_device_is_kept(skewed_federation, monkeypatch):
    """``"auto"`` (the default) follows ``torch.cuda.is_available()``; a named device holds for the
    teachers and for the gradient clients' stacked records alike."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert LocalTransport(skewed_federation, noise_seed=0).device == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert LocalTransport(skewed_federation, noise_seed=0).device == torch.device("cuda")
    on_cpu = LocalTransport(skewed_federation, noise_seed=0, device="cpu")
    assert on_cpu.device == torch.device("cpu")
    assert on_cpu._stacked_records().features.device == torch.device("cpu")
