"""Agent-side reputation-weighted voting (reputation-weighted-pate.txt, Sec. 3.2.1).

Two releases, each through the agent's one exit (:meth:`fedvote.agents.agent.Agent.release`):

* :func:`noisy_accuracy_bin` — the one-hot bin of the agent's accuracy on the *public*
  labelled validation set plus a noise share, (B,); the sum over agents is released once
  so that each agent can place itself relative to the others;
* :meth:`WeightedVoter.noisy_votes` — w_i·e_{f_i(x)} + N(0, noise_std²), (Q, C).

The weight w_i is a function of the agent's own validation accuracy and of public values
(the rule and the released summary); it lives in the :class:`WeightedVoter`, on the
agent's side, and never leaves it (Sec. 3.2.1, step 4, computed agent-side).
"""

from __future__ import annotations

import numpy as np

from fedvote.agents.agent import Agent, VoteOutput
from fedvote.aggregation.voting import WeightRule, accuracy_bin, integer_weight, one_hot_votes
from fedvote.data.federation import LabeledData
from fedvote.errors import ConfigError


def validation_accuracy(agent: Agent, validation: LabeledData) -> float:
    """Accuracy of the labels ``agent`` would vote on the public ``validation`` set (private)."""
    return float(np.mean(agent.voted_labels(validation.features) == validation.labels))


def noisy_accuracy_bin(agent: Agent, validation: LabeledData, bins: int, noise_std: float) -> np.ndarray:
    """The agent's share of the accuracy summary: one-hot bin of its accuracy + noise, (B,).

    Its validation accuracy a_i ∈ [0, 1] (on the *public* labelled ``validation`` set, but a
    function of its private teacher) falls in bin ⌊a_i·B⌋ of ``bins`` equal bins; the
    one-hot bin plus N(0, noise_std²) leaves the agent (L2 sensitivity 1 under zero-out, √2
    under replace-one).
    """
    share = np.zeros((1, bins), dtype=np.float64)  # one "query" of B "classes"
    share[0, accuracy_bin(validation_accuracy(agent, validation), bins)] = 1.0
    return agent.release(share, noise_std, VoteOutput(num_queries=1, one_hot=True, width=bins))[0]


class WeightedVoter:
    """An agent with its vote weight w_i ∈ [w_min, w_max]; it votes w_i · one-hot + noise.

    Build it with :meth:`from_rule`. The weight is agent-side state: nothing but noised
    weighted votes leaves.
    """

    def __init__(self, agent: Agent, weight: float) -> None:
        if not 0.0 <= weight < float("inf"):
            raise ValueError(f"agent {agent.agent_id}: a vote weight must be finite and >= 0, got {weight}")
        self.agent = agent
        self._weight = float(weight)

    @classmethod
    def from_rule(cls, agent: Agent, validation: LabeledData | None, rule: WeightRule) -> WeightedVoter:
        """Fix the agent's weight from ``rule`` and its own validation accuracy, clipped to the range.

        ``validation`` may be None for ``one-vote`` (every weight 1).
        With ``rule.scale`` K (``--secure-noise``) the weight is the integer round(K·w) and
        the vote W·e_y an integer vector (its sum is divided by K at the server).
        """
        if rule.scheme == "one-vote":
            weight = 1.0
        elif validation is None:
            raise ConfigError("validation_size", f"the {rule.scheme} scheme needs a labelled validation set")
        else:
            weight = rule.weight(validation_accuracy(agent, validation))
            weight = min(max(weight, rule.min_weight), rule.max_weight)
        if rule.scale is not None:
            return cls(agent, float(integer_weight(weight, rule.scale)))
        return cls(agent, weight)

    def noisy_votes(self, query_indices: np.ndarray, noise_std: float) -> np.ndarray:
        """The agent's weighted release: w_i · one-hot vote + N(0, noise_std²), (Q, C)."""
        agent = self.agent
        labels = agent.voted_labels(agent.public_features[query_indices])  # (Q,)
        return self.release_votes(one_hot_votes(labels, agent.num_classes), noise_std, len(query_indices))

    def release_votes(self, votes: np.ndarray, noise_std: float, num_queries: int) -> np.ndarray:
        """As :meth:`noisy_votes` for one-hot votes its teacher cast in a batch, scaled by w_i first."""
        weighted = self._weight * np.asarray(votes, dtype=np.float64)  # (Q, C)
        # A row is w_i·e_y: one non-zero entry of w_i ≤ w_max (none when w_i = 0).
        expected = VoteOutput(num_queries=num_queries, bound=self._weight, one_hot=self._weight > 0)
        return self.agent.release(weighted, noise_std, expected)
