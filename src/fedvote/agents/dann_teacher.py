"""Agent-side DANN teacher (PATE-FL+DA): trained on the agent's records against the public pool.

The voting paper's PATE-FL+DA (Section 5.1) lets each agent adapt its teacher to the
public (target) domain by domain-adversarial training (:mod:`fedvote.models.dann`). The
agent reads its own records and its copy of the unlabelled public pool; nothing leaves
it here — its votes still leave through :mod:`fedvote.agents.teacher_votes` and the
agent's one exit, so the accounting of the votes is unchanged (``docs/privacy.md``).
"""

from __future__ import annotations

import torch

from fedvote.agents.agent import Agent
from fedvote.models.dann import DannConfig, fit_dann
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
