"""Agent-side multi-label skills: a BCE teacher, τ-clipped votes, BCE local updates.

The multi-label setting of the voting paper (CelebA; appendix "Details of CelebA Datasets
Evaluation", clipping after Zhu et al. 2020): each agent's teacher scores A attributes,
and its vote on a query is the indicator of **its top-τ attributes among those with
probability > 1/2** (:func:`clipped_votes`): at most τ ones, so ‖v‖₂ ≤ √τ (zero-out,
agent level) and two such votes differ in at most 2τ coordinates, ‖v − v'‖₂ ≤ √(2τ)
(replace one record, instance level); ``docs/privacy.md``, "Multi-label votes".

Every vote leaves through the agent's one exit (:meth:`fedvote.agents.agent.Agent.release`)
as a :class:`MultiHotOutput`: checked to be (Q, A), entries 0 or 1, at most τ ones per row —
the very property the sensitivity bound rests on — before the noise share is added.
Updates leave as every update does (:func:`fedvote.agents.local_updates.release_update`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedvote.agents.agent import Agent, VoteOutput
from fedvote.agents.local_updates import local_generator, release_update
from fedvote.data.attributes import AttributeTask
from fedvote.errors import ConfigError, VoteRejected
from fedvote.models.local_training import flat_parameters, load_flat_parameters
from fedvote.models.multilabel import (
    AttributeHead,
    MultiLabelLocalTraining,
    attribute_probabilities,
    bce_sgd_steps,
    fit_attributes,
)
from fedvote.models.shifted_input import shift_features
from fedvote.models.training import TrainingConfig
from fedvote.models.zoo import build_model


@dataclass(frozen=True)
class MultiHotOutput(VoteOutput):
    """A τ-clipped multi-label vote: (Q, A), every entry 0 or 1, at most ``bound`` = τ ones a row."""

    def validate(self, values: np.ndarray, *, agent_id: int, num_classes: int) -> np.ndarray:
        """``values`` as a new float64 (Q, A) array, or :class:`~fedvote.errors.VoteRejected`."""
        checked = super().validate(values, agent_id=agent_id, num_classes=num_classes)
        if not np.isin(checked, (0.0, 1.0)).all():
            raise VoteRejected(agent_id, "multi-label vote holds entries other than 0 and 1")
        return checked


def check_tau(tau: int) -> int:
    """τ as an int >= 1, or a one-line :class:`~fedvote.errors.ConfigError` naming ``tau``."""
    if isinstance(tau, bool) or not isinstance(tau, int | np.integer) or tau < 1:
        raise ConfigError("tau", f"must be an integer >= 1, got {tau!r}")
    return int(tau)


def clipped_votes(probabilities: np.ndarray, tau: int) -> np.ndarray:
    """The τ-clipped votes (Q, A) float64 of attribute probabilities (Q, A).

    Row q is 1 at the attributes with probability > 1/2 that rank among the row's τ
    largest (ties broken towards the lower attribute index), 0 elsewhere: at most τ ones.
    """
    tau = check_tau(tau)
    p = np.asarray(probabilities, dtype=np.float64)
    if p.ndim != 2:
        raise ValueError(f"probabilities must be (Q, A), got shape {p.shape}")
    order = np.argsort(-p, axis=1, kind="stable")  # (Q, A): attributes by falling probability
    top = np.zeros(p.shape, dtype=bool)
    np.put_along_axis(top, order[:, :tau], True, axis=1)
    return (top & (p > 0.5)).astype(np.float64)


def train_multilabel_teacher(agent: Agent, config: TrainingConfig, task: AttributeTask) -> None:
    """Train the agent's teacher on its private records: A logits, BCE; install it as f_i."""
    data = agent.private_data
    generator = torch.Generator().manual_seed(agent.seed)
    shape = tuple(data.features.shape[1:])
    model = build_model(config.model, shape, task.num_attributes, generator=generator)
    fit_attributes(model, data.features, task.targets(data.labels), config, generator)
    agent.install_teacher(AttributeHead(model, task))


def teacher_probabilities(agent: Agent, query_indices: np.ndarray) -> np.ndarray:
    """The agent's teacher's attribute probabilities on the queried pool points, (Q, A)."""
    return attribute_probabilities(agent.teacher, agent.public_features[query_indices])


def noisy_multilabel_votes(
    agent: Agent, query_indices: np.ndarray, tau: int, noise_std: float, num_attributes: int
) -> np.ndarray:
    """The agent's release: its τ-clipped votes on the queries + N(0, noise_std²), (Q, A)."""
    votes = clipped_votes(teacher_probabilities(agent, query_indices), tau)  # (Q, A)
    expected = MultiHotOutput(num_queries=len(query_indices), bound=float(tau), width=num_attributes)
    return agent.release(votes, noise_std, expected)


def multilabel_local_update(
    agent: Agent, global_params: np.ndarray, training: MultiLabelLocalTraining
) -> np.ndarray:
    """:func:`fedvote.agents.local_updates.local_update` on A attributes with BCE, (d,) float32.

    θ is a model of A logits; ``training.steps`` plain SGD steps with BCE on the agent's
    (n, A) targets (its mini-batch order from the same generator), then the update leaves
    through :func:`~fedvote.agents.local_updates.release_update`: clipped to S, checked,
    plus the agent's noise share.
    """
    assert training.task is not None  # MultiLabelLocalTraining refuses None
    data = agent.private_data
    shape = tuple(data.features.shape[1:])
    features = shift_features(data.features, training.input_shift)
    model = build_model(
        training.model, shape, training.task.num_attributes, generator=torch.Generator().manual_seed(0)
    )
    start = np.asarray(global_params, dtype=np.float32)
    load_flat_parameters(model, start)
    bce_sgd_steps(
        model,
        features,
        training.task.targets(data.labels),
        steps=training.steps,
        learning_rate=training.learning_rate,
        batch_size=training.batch_size,
        generator=local_generator(agent, training),
    )
    return release_update(agent, flat_parameters(model) - start, training)
