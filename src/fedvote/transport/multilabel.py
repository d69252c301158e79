"""Multi-label skills of a transport, and the in-process transport that serves them.

Two capabilities (:mod:`fedvote.transport.capabilities`' pattern: a method lists them, a
transport inherits them, a mismatch is refused before anything runs):

* :class:`MultiLabelTeacherVotes` — agents train BCE teachers on A attributes and send
  τ-clipped votes (multi-label PATE-FL);
* :class:`MultiLabelUpdates` — agents train local updates with BCE on A attributes
  (multi-label DP-FedAvg).

:class:`MultiLabelTransport` is :class:`~fedvote.transport.local.LocalTransport` plus both,
built by the runner (:func:`fedvote.runner.transport_for`) for a method that requires one of
them. Agent-side code is :mod:`fedvote.agents.multilabel_votes`; every output leaves its
agent through the agent's one exit.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import numpy as np

from fedvote.agents import multilabel_votes
from fedvote.agents.agent import Agent
from fedvote.data.attributes import AttributeTask
from fedvote.data.federation import Federation, LabeledData
from fedvote.models.local_training import LocalTraining
from fedvote.models.multilabel import MultiLabelLocalTraining, attribute_probabilities
from fedvote.models.training import TrainingConfig
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import VoteSum
from fedvote.transport.capabilities import Capability
from fedvote.transport.local import LocalTransport


class MultiLabelTeacherVotes(Capability):
    """Agents train multi-label (BCE) teachers and send τ-clipped votes (multi-label PATE-FL)."""

    description: ClassVar[str] = "multi-label teacher votes"

    @abstractmethod
    def train_multilabel_teachers(
        self, config: TrainingConfig, task: AttributeTask, progress: Progress = NO_PROGRESS
    ) -> None:
        """Every agent trains a teacher of ``task``'s A attributes on its private records."""

    @abstractmethod
    def multilabel_vote_sum(
        self, query_indices: np.ndarray, tau: int, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of the agents' noisy τ-clipped votes on ``query_indices``, ``sums`` (Q, A); one round.

        Each agent sends the indicator of its teacher's top-τ attributes among those with
        probability > 1/2, plus N(0, noise_std²). ``None`` (nothing released) when fewer than
        ``min_responders`` answered.
        """


class MultiLabelUpdates(Capability):
    """Agents train local updates with BCE on A attributes (multi-label DP-FedAvg)."""

    description: ClassVar[str] = "multi-label (BCE) local updates"

    @abstractmethod
    def trains_multilabel(self, training: LocalTraining) -> bool:
        """Whether a round of ``training`` runs the BCE path (a :class:`MultiLabelLocalTraining`)."""


class MultiLabelTransport(LocalTransport, MultiLabelTeacherVotes, MultiLabelUpdates):
    """:class:`~fedvote.transport.local.LocalTransport` that also serves the multi-label skills.

    Takes LocalTransport's arguments. The multi-label teachers train one agent after
    another (no batched ensemble); after :meth:`train_multilabel_teachers` the simulation
    diagnostics describe them: each teacher's accuracy is the task's
    (:meth:`~fedvote.data.attributes.AttributeTask.accuracy`: mean attribute accuracy), the
    clean vote sums are the τ-clipped ones of the last τ asked.
    """

    def __init__(self, federation: Federation, **kwargs: Any) -> None:
        super().__init__(federation, **kwargs)
        self._task = AttributeTask.of(federation.attribute_names, federation.num_classes)
        self._multilabel_teachers = False
        self._tau: int | None = None

    @property
    def task(self) -> AttributeTask:
        """The federation's attribute task (its attributes, or its classes read one-hot)."""
        return self._task

    def train_multilabel_teachers(
        self, config: TrainingConfig, task: AttributeTask, progress: Progress = NO_PROGRESS
    ) -> None:
        """Train every agent's BCE teacher, one agent after another."""
        if task != self._task:
            raise ValueError(f"the method's task {task} is not this federation's {self._task}")
        self._ensemble = None
        with progress.step("training multi-label teachers", total=self.num_agents) as bar:
            for agent in self._agents:
                multilabel_votes.train_multilabel_teacher(agent, config, task)
                bar.advance()
        self._multilabel_teachers = True

    def multilabel_vote_sum(
        self, query_indices: np.ndarray, tau: int, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of all agents' noisy τ-clipped votes; in-process every agent responds."""
        if not self._multilabel_teachers:
            raise RuntimeError("call train_multilabel_teachers before multilabel_vote_sum")
        responders = self._agents
        a = self._task.num_attributes
        q = query_indices.shape[0]
        # Down: Q query indices to each agent; up: a (Q, A) noisy vote from each.
        self.communication.download_floats += len(self._agents) * q
        self.communication.upload_floats += len(responders) * q * a
        self.communication.rounds += 1
        if len(responders) < min_responders:
            return None
        self._tau = multilabel_votes.check_tau(tau)
        releases = [
            multilabel_votes.noisy_multilabel_votes(agent, query_indices, tau, noise_std, a)
            for agent in responders
        ]  # N × (Q, A)
        return self._released_sum(releases, min_responders)

    def trains_multilabel(self, training: LocalTraining) -> bool:
        """True for a :class:`MultiLabelLocalTraining` round (BCE on A attributes)."""
        return isinstance(training, MultiLabelLocalTraining)

    def _updates(self, theta: np.ndarray, agents: list[Agent], training: LocalTraining) -> list[np.ndarray]:
        """Multi-label rounds: each agent's BCE update through its exit, one after another.

        Every other round as :class:`~fedvote.transport.local.LocalTransport` trains it;
        both its update paths (``local_updates``, ``secure_update_sum``) come through here.
        """
        if isinstance(training, MultiLabelLocalTraining):
            return [multilabel_votes.multilabel_local_update(agent, theta, training) for agent in agents]
        return super()._updates(theta, agents, training)

    def teacher_accuracies(self, test: LabeledData) -> np.ndarray:
        """Simulation-only diagnostic: each multi-label teacher's task accuracy on ``test``, (N,)."""
        if not self._multilabel_teachers:
            return super().teacher_accuracies(test)
        task, labels = self._task, test.labels
        return np.array([task.accuracy(agent.voted_labels(test.features), labels) for agent in self._agents])

    def clean_vote_histograms(self, query_indices: np.ndarray) -> np.ndarray:
        """Simulation-only diagnostic: the noiseless τ-clipped vote sums, (Q, A). Not a release."""
        if not self._multilabel_teachers or self._tau is None:
            return super().clean_vote_histograms(query_indices)
        queries = np.asarray(query_indices, dtype=np.int64)
        return np.sum(
            [
                multilabel_votes.clipped_votes(
                    attribute_probabilities(agent.teacher, self._public_features[queries]), self._tau
                )
                for agent in self._agents
            ],
            axis=0,
        )
