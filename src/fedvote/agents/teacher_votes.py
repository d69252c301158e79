"""Agent-side teacher votes (PATE-FL, Algorithm 1, line 5): a one-hot vote plus a noise share.

Each function ends in the agent's one exit (:meth:`fedvote.agents.agent.Agent.release`),
which checks the vote is one-hot of shape (Q, C) before the noise share is added.
"""

from __future__ import annotations

import math

import numpy as np

from fedvote.agents.agent import Agent, VoteOutput
from fedvote.aggregation.voting import one_hot_votes


def noisy_votes(agent: Agent, query_indices: np.ndarray, noise_std: float) -> np.ndarray:
    """The agent's release for these queries: one-hot votes + N(0, noise_std²), (Q, C).

    Algorithm 1, line 5, with noise_std = σ/√t (the agent's share of the noise); with
    ``noise_std`` 0 the clean votes, nothing drawn.
    """
    labels = agent.voted_labels(agent.public_features[query_indices])  # (Q,)
    return release_votes(agent, one_hot_votes(labels, agent.num_classes), noise_std, len(query_indices))


def release_votes(agent: Agent, votes: np.ndarray, noise_std: float, num_queries: int) -> np.ndarray:
    """Release one-hot votes the agent's teacher cast in a batch: ``votes`` + N(0, noise_std²), (Q, C).

    A transport that evaluates every teacher in one tensor operation (LocalTransport's
    ensemble) hands each agent its own clean votes (Q, C); the agent adds its noise share
    from its own generator, drawing exactly what :func:`noisy_votes` would. ``num_queries``
    is Q as the transport asked it: a vote of another shape is refused.
    """
    return agent.release(votes, noise_std, VoteOutput(num_queries=num_queries, one_hot=True))


def release_individual_votes(
    agent: Agent,
    votes: np.ndarray,
    *,
    weight: float,
    sampling_rate: float,
    noise_std: float,
    num_queries: int,
) -> np.ndarray:
    """The agent's weighted, subsampled release: w·b_j·votes_j + N(0, noise_std²), (Q, C) (issue 45).

    ``votes`` (Q, C) are its teacher's one-hot votes; ``weight`` w its public budget weight
    (Individualized PATE's weighting); b_j ~ Bernoulli(``sampling_rate``) for each query j,
    drawn from the agent's own privacy stream (:meth:`~fedvote.agents.agent.Agent.privacy_seed`)
    and never sent: an unsampled query gets the zero vote and still the noise share, so the
    sum's noise stays σ² and the sample stays hidden (Private-kNN's subsampling). Each row
    totals at most w (checked at the exit), so the agent's L2 sensitivity is w.
    """
    if not (math.isfinite(weight) and weight >= 0):
        raise ValueError(f"agent {agent.agent_id}: a vote weight must be finite and >= 0, got {weight}")
    rows = np.asarray(votes, dtype=np.float64)  # (Q, C)
    if sampling_rate < 1.0:
        draws = np.random.default_rng(agent.privacy_seed()).random(rows.shape[0])  # (Q,)
        sampled = np.asarray(draws < sampling_rate, dtype=np.float64)  # (Q,) b_j ∈ {0, 1}
        rows = rows * sampled[:, None]
    return agent.release(weight * rows, noise_std, VoteOutput(num_queries=num_queries, bound=weight))
