"""Agent-side DANN: PATE-FL+DA's teacher and FedAvg+DA's local update, against the public pool.

The voting paper's PATE-FL+DA (Section 5.1) lets each agent adapt its teacher to the
public (target) domain by domain-adversarial training (:mod:`fedvote.models.dann`). The
agent reads its own records and its copy of the unlabelled public pool; nothing leaves
it here — its votes still leave through :mod:`fedvote.agents.teacher_votes` and the
agent's one exit, so the accounting of the votes is unchanged (``docs/privacy.md``).
"""

from __future__ import annotations

import numpy as np
import torch

from fedvote.agents.agent import Agent
from fedvote.agents.local_updates import local_generator, release_update
from fedvote.models.dann import DannConfig, DannNet, dann_sgd_steps, fit_dann
from fedvote.models.local_training import LocalTraining, flat_parameters, load_flat_parameters, minibatch_rows
from fedvote.models.shifted_input import shift_features
from fedvote.models.training import TrainingConfig
from fedvote.models.zoo import build_model


def train_dann_teacher(agent: Agent, config: TrainingConfig, dann: DannConfig) -> None:
    """Train and install ``agent``'s teacher by DANN: its private records as source, its pool copy as target.

    Seeded by the agent's training seed, as :meth:`Agent.train_teacher` is (the same
    initial weights as its plain teacher).
    """
    generator = torch.Generator().manual_seed(agent.seed)
    data = agent.private_data
    model = build_model(config.model, tuple(data.features.shape[1:]), agent.num_classes, generator=generator)
    agent.install_teacher(
        fit_dann(model, data.features, data.labels, agent.public_features, config, generator, dann)
    )


def dann_local_update(agent: Agent, global_params: np.ndarray, training: LocalTraining) -> np.ndarray:
    """FedAvg+DA: the agent's update Δ (d,) of the whole DANN model after E DANN SGD steps.

    θ is a :class:`~fedvote.models.dann.DannNet` (classifier and domain classifier); the
    agent trains it on its records (source) and its copy of the public pool (target) with
    the round's reversal scale, on the mini-batches plain SGD would draw, then releases Δ
    through :func:`~fedvote.agents.local_updates.release_update` — clipped and noised as
    a DP-FedAvg round says, the domain classifier's coordinates included.
    """
    assert training.dann_scale is not None
    data = agent.private_data
    shape = tuple(data.features.shape[1:])
    net = DannNet(
        build_model(training.model, shape, agent.num_classes, generator=torch.Generator().manual_seed(0)),
        shape,
        DannConfig().domain_hidden,
        torch.Generator().manual_seed(0),
    )
    start = np.asarray(global_params, dtype=np.float32)
    load_flat_parameters(net, start)
    generator = local_generator(agent, training)
    rows = minibatch_rows(
        len(data), steps=training.steps, batch_size=training.batch_size, generator=generator
    )
    dann_sgd_steps(
        net,
        shift_features(data.features, training.input_shift),
        data.labels,
        shift_features(agent.public_features, training.input_shift),
        rows=rows,
        scale=training.dann_scale,
        learning_rate=training.learning_rate,
        generator=generator,
    )
    return release_update(agent, flat_parameters(net) - start, training)
