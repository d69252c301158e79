"""FedAUXfdp's output-perturbed heads in process (fedaux-fdp.txt).

:class:`PrivateHeadSkills` serves :class:`~fedvote.transport.capabilities.PrivateHeads` for
:class:`~fedvote.transport.local.LocalTransport`: each agent fits and perturbs its own heads
(:func:`~fedvote.agents.private_heads.private_heads`), one agent after another, in one round.
"""

from __future__ import annotations

from fedvote.agents.private_heads import private_heads
from fedvote.models.logistic_heads import HeadFeatures, HeadRequest, ReleasedHeads
from fedvote.models.threads import single_threaded
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.capabilities import PrivateHeads
from fedvote.transport.local.shared import LocalAgents


class PrivateHeadSkills(LocalAgents, PrivateHeads):
    """Every agent's perturbed logistic heads."""

    def private_heads(
        self, features: HeadFeatures, request: HeadRequest, progress: Progress = NO_PROGRESS
    ) -> list[ReleasedHeads]:
        """Every agent's perturbed heads, one agent after another (one round)."""
        released = []
        # Small per-agent problems: intra-op threads only contend.
        with single_threaded(blas=False), progress.step(
            "fitting and perturbing the agents' heads", total=self.num_agents
        ) as bar:
            for agent in self._agents:
                released.append(private_heads(agent, features, request))
                bar.advance()
        negatives = 0 if request.negative_indices is None else int(request.negative_indices.shape[0])
        self.communication.count(
            down=self.num_agents * (features.num_floats + negatives),
            up=sum(
                heads.class_head.size + (0 if heads.score_head is None else heads.score_head.size) + 1
                for heads in released
            ),
        )
        return released
