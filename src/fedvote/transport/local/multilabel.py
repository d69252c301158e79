"""Multi-label votes and updates in process, for :class:`~fedvote.transport.local.LocalTransport`.

The capabilities (:class:`~fedvote.transport.capabilities.MultiLabelTeacherVotes`,
:class:`~fedvote.transport.capabilities.MultiLabelUpdates`) are declared in
:mod:`fedvote.transport.capabilities`; :class:`MultiLabelSkills` serves them for
LocalTransport, which inherits it: BCE teachers trained one agent after another (no batched
ensemble), τ-clipped votes out through each agent's exit
(:mod:`fedvote.agents.multilabel_votes`), and the simulation diagnostics of multi-label
teachers. The BCE local updates of multi-label DP-FedAvg's rounds are the local-update
skill's (:mod:`fedvote.transport.local.updates`).
"""

from __future__ import annotations

import numpy as np

from fedvote.agents import multilabel_votes
from fedvote.data.attributes import AttributeTask
from fedvote.data.federation import LabeledData
from fedvote.models.local_training import LocalTraining
from fedvote.models.multilabel import MultiLabelLocalTraining, attribute_probabilities
from fedvote.models.training import TrainingConfig
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import VoteSum
from fedvote.transport.capabilities import MultiLabelTeacherVotes, MultiLabelUpdates
from fedvote.transport.local.shared import LocalAgents


class MultiLabelSkills(LocalAgents, MultiLabelTeacherVotes, MultiLabelUpdates):
    """The multi-label capabilities, served in process over LocalTransport's agents.

    After :meth:`train_multilabel_teachers` (:attr:`multilabel_trained`) the simulation
    diagnostics describe the multi-label teachers: each teacher's accuracy is the task's
    (:meth:`~fedvote.data.attributes.AttributeTask.accuracy`: mean attribute accuracy), the
    clean vote sums are the τ-clipped ones of the τ last asked.
    """

    _multilabel_tau: int | None = None

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
        self.communication.count(down=len(self._agents) * q, up=len(responders) * q * a)
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
