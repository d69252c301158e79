"""FedAvg+DA and DP-FedAvg+DA (``--local-da dann``): DANN in the clients' local updates."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedvote
from fedvote.agents.dann_teacher import dann_local_update
from fedvote.agents.local_updates import local_update
from fedvote.data.datasets import load_dataset
from fedvote.data.federation import build_federation
from fedvote.data.partition import PartitionSpec
from fedvote.errors import ConfigError
from fedvote.models.dann import DannConfig, DannNet
from fedvote.models.local_training import LocalTraining, flat_parameters
from fedvote.models.zoo import build_model
from fedvote.transport.local import LocalTransport

FAST = {"agents": 5, "rounds": 3, "sampling_rate": 1.0, "noise_seed": 0}


@pytest.fixture(scope="module")
def federation():
    return build_federation(load_dataset("digits"), num_agents=4, partition=PartitionSpec(), seed=0)


def _theta(federation, model="mlp"):
    shape = tuple(federation.example_shape)
    generator = torch.Generator().manual_seed(0)
    net = DannNet(build_model(model, shape, 10, generator=generator), shape, DannConfig().domain_hidden, generator)
    return flat_parameters(net), sum(p.numel() for p in net.classifier.parameters())


def test_with_no_reversal_the_classifier_part_is_the_plain_update(federation):
    # λ = 0: no gradient reaches the features from G_d, so the classifier's coordinates move
    # exactly as plain local SGD moves them (same mini-batches, same steps): an independent reference.
    theta, classifier_floats = _theta(federation)
    agent = LocalTransport(federation)._agents[0]  # noqa: SLF001
    plain = LocalTraining(model="mlp", steps=5, learning_rate=0.1, round_index=2)
    adapted = LocalTraining(model="mlp", steps=5, learning_rate=0.1, round_index=2, dann_scale=0.0)
    reference = local_update(agent, theta[:classifier_floats], plain)
    update = dann_local_update(agent, theta, adapted)
    assert update.shape == theta.shape
    np.testing.assert_allclose(update[:classifier_floats], reference, atol=1e-6)
    reversed_ = dann_local_update(agent, theta, LocalTraining(model="mlp", steps=5, learning_rate=0.1,
                                                              round_index=2, dann_scale=1.0))
    assert not np.allclose(reversed_[:classifier_floats], reference, atol=1e-6)


def test_a_clipped_update_is_clipped_as_a_whole_domain_classifier_included(federation):
    theta, _ = _theta(federation)
    agent = LocalTransport(federation, noise_seed=0)._agents[1]  # noqa: SLF001
    training = LocalTraining(model="mlp", steps=5, learning_rate=0.5, clip_norm=0.08, dann_scale=1.0)
    assert np.linalg.norm(dann_local_update(agent, theta, training)) <= 0.08 * (1 + 1e-5)


def test_fedavg_and_dp_fedavg_with_dann_run_and_dp_fedavg_is_charged_as_before():
    fedavg = fedvote.run("fedavg", local_da="dann", **FAST)
    plain = fedvote.run("fedavg", **FAST)
    assert fedavg.details["local_da"] == "dann" and fedavg.details["model_floats"] > plain.details["model_floats"]
    assert fedavg.accuracy > 0.5
    private = fedvote.run("dp-fedavg", local_da="dann", sigma=1.0, **FAST)
    reference = fedvote.run("dp-fedavg", sigma=1.0, **FAST)
    for level in ("agent", "instance"):
        assert getattr(private.privacy, level).epsilon == getattr(reference.privacy, level).epsilon


def test_dann_updates_need_public_access_a_hidden_layer_and_a_known_name(federation):
    closed = build_federation(load_dataset("digits"), num_agents=4, partition=PartitionSpec(), seed=0)
    closed = type(closed)(**{**closed.__dict__, "agent_public_access": False})
    theta, _ = _theta(closed)
    with pytest.raises(ConfigError, match="^local_da: .*agent_public_access is false"):
        LocalTransport(closed).local_updates(
            theta, np.array([0]), LocalTraining(model="mlp", steps=1, learning_rate=0.1, dann_scale=0.5)
        )
    with pytest.raises(ConfigError, match="^gradient_model: "):
        fedvote.run("fedavg", local_da="dann", gradient_model="logistic", **FAST)
    with pytest.raises(ConfigError, match="^local_da: "):
        fedvote.run("fedavg", local_da="coral", **FAST)
    with pytest.raises(ConfigError, match="^local_da: "):
        fedvote.run("dp-fedsgd", local_da="dann", **FAST)
