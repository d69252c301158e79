"""Agent-side local training for the gradient-based baselines (FedAvg, DP-FedAvg, DP-FedSGD).

The agent loads the global θ, trains on its own records and releases its update
Δ = θ' − θ through its one exit (:meth:`fedvote.agents.agent.Agent.release`): checked to be
finite, of θ's shape and — when the round clips — within norm S, then noised with the
agent's share. An agent that was not sampled sends its noise share alone
(:meth:`fedvote.agents.agent.Agent.noise_share`).
"""

from __future__ import annotations

import numpy as np
import torch

from fedvote.agents.agent import Agent, ArrayOutput
from fedvote.models.local_training import (
    LocalTraining,
    clip_to_norm,
    dp_sgd_steps,
    flat_parameters,
    load_flat_parameters,
    sgd_steps,
)
from fedvote.models.shifted_input import shift_features
from fedvote.models.zoo import build_model


def local_update(agent: Agent, global_params: np.ndarray, training: LocalTraining) -> np.ndarray:
    """The agent's update Δ = θ' − θ from the global θ (d,) after local training, (d,) float32.

    Plain SGD for ``training.steps`` iterations (FedAvg, Algorithm 4), then — when the
    round asks — Δ clipped to norm S and noised with N(0, noise_std²) from this agent's
    own generator (DP-FedAvg, Algorithm 6). With ``training.dp_sgd`` the local steps are
    DP-SGD through Opacus instead, its Poisson batches and noise also drawn from this
    agent's privacy randomness (DP-FedSGD). With ``training.input_shift`` (a public
    constant) the agent trains on its records minus the shift — before anything is
    clipped, so every bound above is unchanged. Only the update leaves the agent.
    """
    data = agent.private_data
    shape = tuple(data.features.shape[1:])
    features = shift_features(data.features, training.input_shift)  # (n, ...): the agent's own copy
    model = build_model(training.model, shape, agent.num_classes, generator=torch.Generator().manual_seed(0))
    start = np.asarray(global_params, dtype=np.float32)
    load_flat_parameters(model, start)
    if training.dp_sgd is not None:
        dp_sgd_steps(
            model,
            features,
            data.labels,
            steps=training.steps,
            learning_rate=training.learning_rate,
            spec=training.dp_sgd,
            generator=torch.Generator().manual_seed(agent.privacy_seed()),
        )
    else:
        order_seed = np.random.SeedSequence([agent.seed, 0x56D0, training.round_index])
        sgd_steps(
            model,
            features,
            data.labels,
            steps=training.steps,
            learning_rate=training.learning_rate,
            batch_size=training.batch_size,
            generator=torch.Generator().manual_seed(int(order_seed.generate_state(1)[0])),
        )
    update = flat_parameters(model) - start  # (d,)
    if training.clip_norm is not None:
        update = clip_to_norm(update, training.clip_norm)
    expected = ArrayOutput("update", tuple(start.shape), norm_bound=training.clip_norm)
    return agent.release(update, training.noise_std, expected).astype(np.float32)
