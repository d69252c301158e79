"""The in-process multi-label skills of :class:`~fedvote.transport.local.LocalTransport`.

The capabilities (:class:`~fedvote.transport.capabilities.MultiLabelTeacherVotes`,
:class:`~fedvote.transport.capabilities.MultiLabelUpdates`) are declared in
:mod:`fedvote.transport.capabilities`; :class:`MultiLabelSkills` serves them for
LocalTransport, which inherits it: BCE teachers trained one agent after another (no batched
ensemble), τ-clipped votes out through each agent's exit
(:mod:`fedvote.agents.multilabel_votes`), BCE local updates for the rounds of multi-label
DP-FedAvg, and the simulation diagnostics of multi-label teachers.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np

from fedvote.agents import multilabel_votes
from fedvote.agents.agent import Agent
from fedvote.data.attributes import AttributeTask
from fedvote.data.federation import LabeledData
from fedvote.models.local_training import LocalTraining
from fedvote.models.multilabel import MultiLabelLocalTraining, attribute_probabilities
from fedvote.models.training import TrainingConfig
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import Communication, VoteSum
from fedvote.transport.capabilities import MultiLabelTeacherVotes, MultiLabelUpdates

# Re-exported: the capabilities a multi-label method requires.
__all__ = ["MultiLabelSkills", "MultiLabelTeacherVotes", "MultiLabelUpdates"]


class MultiLabelSkills(MultiLabelTeacherVotes, MultiLabelUpdates):
    """The multi-label capabilities, served in process over LocalTransport's agents.

    Uses LocalTransport's agents (``_agents``), its copy of the pool (``_public_features``),
    its counters and its (secure) sum of releases (``_released_sum``). After
    :meth:`train_multilabel_teachers` (:attr:`multilabel_trained`) the simulation
    diagnostics describe the multi-label teachers: each teacher's accuracy is the task's
    (:meth:`~fedvote.data.attributes.AttributeTask.accuracy`: mean attribute accuracy), the
    clean vote sums are the τ-clipped ones of the τ last asked.
    """

    _agents: list[Agent]
    _ensemble: Any  # LocalTransport's batched single-label ensemble (ModelEnsemble | None)
    _public_features: np.ndarray
    communication: Communication
    _multilabel_task: AttributeTask | None = None
    _multilabel_tau: int | None = None

    @abstractmethod
    def _released_sum(self, releases: list[np.ndarray], min_responders: int) -> VoteSum | None:
        """The (secure) sum of the responders' releases (LocalTransport's)."""

    @property
    def multilabel_trained(self) -> bool:
        """Whether the agents' teachers are multi-label ones (:meth:`train_multilabel_teachers`)."""
        return self._multilabel_task is not None

    def train_multilabel_teachers(
        self, config: TrainingConfig, task: AttributeTask, progress: Progress = NO_PROGRESS
    ) -> None:
        """Train every agent's BCE teacher of ``task``, one agent after another."""
        self._ensemble = None  # LocalTransport's batched single-label ensemble, if any, is stale
        with progress.step("training multi-label teachers", total=len(self._agents)) as bar:
            for agent in self._agents:
                multilabel_votes.train_multilabel_teacher(agent, config, task)
                bar.advance()
        self._multilabel_task = task
        self._multilabel_tau = None

    def multilabel_vote_sum(
        self, query_indices: np.ndarray, tau: int, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of all agents' noisy τ-clipped votes; in process every agent responds."""
        task = self._multilabel_task
        if task is None:
            raise RuntimeError("call train_multilabel_teachers before multilabel_vote_sum")
        responders = self._agents
        q, a = query_indices.shape[0], task.num_attributes
        # Down: Q query indices to each agent; up: a (Q, A) noisy vote from each.
        self.communication.download_floats += len(self._agents) * q
        self.communication.upload_floats += len(responders) * q * a
        self.communication.rounds += 1
        if len(responders) < min_responders:
            return None
        self._multilabel_tau = multilabel_votes.check_tau(tau)
        releases = [
            multilabel_votes.noisy_multilabel_votes(agent, query_indices, tau, noise_std, a)
            for agent in responders
        ]  # N × (Q, A)
        return self._released_sum(releases, min_responders)

    def trains_multilabel(self, training: LocalTraining) -> bool:
        """True for a :class:`~fedvote.models.multilabel.MultiLabelLocalTraining` round (BCE)."""
        return isinstance(training, MultiLabelLocalTraining)

    def _multilabel_updates(
        self, theta: np.ndarray, agents: list[Agent], training: LocalTraining
    ) -> list[np.ndarray]:
        """Each agent's BCE update from θ, through its exit, one agent after another."""
        assert isinstance(training, MultiLabelLocalTraining)
        return [multilabel_votes.multilabel_local_update(agent, theta, training) for agent in agents]

    def _multilabel_teacher_accuracies(self, test: LabeledData) -> np.ndarray:
        """Simulation-only diagnostic: each multi-label teacher's task accuracy on ``test``, (N,)."""
        task = self._multilabel_task
        assert task is not None
        labels = test.labels
        return np.array([task.accuracy(agent.voted_labels(test.features), labels) for agent in self._agents])

    def _clean_multilabel_votes(self, query_indices: np.ndarray) -> np.ndarray:
        """Simulation-only diagnostic: the noiseless τ-clipped vote sums, (Q, A). Not a release."""
        tau = self._multilabel_tau if self._multilabel_tau is not None else 1
        features = self._public_features[query_indices]
        votes = [
            multilabel_votes.clipped_votes(attribute_probabilities(agent.teacher, features), tau)
            for agent in self._agents
        ]  # N × (Q, A)
        return np.sum(votes, axis=0)
