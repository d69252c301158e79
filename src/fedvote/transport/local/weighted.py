"""Reputation-weighted votes in process (reputation-weighted-pate.txt).

:class:`WeightedVoteSkills` serves :class:`~fedvote.transport.capabilities.WeightedVotes`
and :class:`~fedvote.transport.capabilities.AgentBehaviours` for
:class:`~fedvote.transport.local.LocalTransport`: the agents' noisy accuracy bins, their own
weights (:class:`~fedvote.agents.weighted_votes.WeightedVoter`) and weighted noisy votes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedvote.agents.behaviour import Behaviour
from fedvote.agents.weighted_votes import WeightedVoter, noisy_accuracy_bin
from fedvote.aggregation.voting import WeightRule
from fedvote.data.federation import LabeledData
from fedvote.transport.base import VoteSum
from fedvote.transport.capabilities import AgentBehaviours, WeightedVotes
from fedvote.transport.local.shared import LocalAgents


class WeightedVoteSkills(LocalAgents, WeightedVotes, AgentBehaviours):
    """Agents that fix their own weights and release weighted noisy votes."""

    _weighted: list[WeightedVoter] | None = None  # agent-side weights (assign_weights)

    def simulate_behaviours(self, behaviours: Sequence[Behaviour]) -> None:
        """Make agent i behave as ``behaviours[i]`` (honest, random, constant, adversarial)."""
        if len(behaviours) != self.num_agents:
            raise ValueError(f"{len(behaviours)} behaviours for {self.num_agents} agents")
        for agent, behaviour in zip(self._agents, behaviours, strict=True):
            agent.set_behaviour(behaviour)

    def accuracy_summary(
        self, validation: LabeledData, bins: int, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of every agent's noisy one-hot accuracy bin, (1, B); in-process all respond."""
        responders = self._agents
        # Down: the validation set (features and labels) to each agent; up: B floats each.
        self.communication.count(
            down=len(self._agents) * validation.features.size + len(validation),
            up=len(responders) * bins,
        )
        if len(responders) < min_responders:
            return None
        releases = [noisy_accuracy_bin(agent, validation, bins, noise_std)[None, :] for agent in responders]
        return self._released_sum(releases, min_responders)  # sums: (1, B)

    def assign_weights(self, validation: LabeledData | None, rule: WeightRule) -> None:
        """Every agent fixes its own weight from ``rule``; nothing comes back."""
        # Down: the rule (scheme, range, span and the B-bin summary); the validation set was
        # already sent with the summary round, or is sent now.
        summary = 0 if rule.histogram is None else rule.histogram.size
        down = len(self._agents) * (4 + summary)
        if validation is not None and rule.histogram is None:
            validation_floats = validation.features.size + len(validation)
            down += len(self._agents) * validation_floats
        self.communication.count(down=down, rounds=0)  # down only: no round of its own
        self._weighted = [WeightedVoter.from_rule(agent, validation, rule) for agent in self._agents]

    def weighted_vote_sum(
        self, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of all agents' weighted noisy votes; in-process every agent responds."""
        if self._weighted is None:
            raise RuntimeError("call assign_weights before weighted_vote_sum")
        responders = self._weighted
        self.communication.count(
            down=len(self._agents) * query_indices.shape[0],
            up=len(responders) * query_indices.shape[0] * self._num_classes,
        )
        if len(responders) < min_responders:
            return None
        if self._ensemble is None:
            releases = [voter.noisy_votes(query_indices, noise_std) for voter in responders]
            return self._released_sum(releases, min_responders)  # sums: (Q, C)
        votes = np.eye(self._num_classes, dtype=np.float64)[self._voted_labels(query_indices)]  # (N, Q, C)
        q = query_indices.shape[0]
        releases = [
            voter.release_votes(vote, noise_std, q) for voter, vote in zip(responders, votes, strict=True)
        ]
        return self._released_sum(releases, min_responders)
