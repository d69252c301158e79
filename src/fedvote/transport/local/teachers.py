"""Teacher votes in process: the teachers' training, their noisy votes and Confident-GNMax.

:class:`TeacherVoteSkills` serves :class:`~fedvote.transport.capabilities.TeacherVotes`,
:class:`~fedvote.transport.capabilities.DomainAdaptedTeachers` and
:class:`~fedvote.transport.capabilities.LabelRelease` for
:class:`~fedvote.transport.local.LocalTransport`: all teachers trained as one batched
ensemble (:func:`~fedvote.models.ensemble.fit_ensemble`) where that pays, else one agent
after another; every vote leaves through its agent's exit
(:mod:`fedvote.agents.teacher_votes`).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from fedvote.agents import teacher_votes
from fedvote.agents.dann_teacher import train_dann_teacher
from fedvote.aggregation.voting import confident_gnmax_step
from fedvote.errors import ConfigError
from fedvote.models.dann import DannConfig
from fedvote.models.ensemble import fit_ensemble
from fedvote.models.training import TrainingConfig
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import ReleasedLabels, VoteSum
from fedvote.transport.capabilities import (
    DomainAdaptedTeachers,
    IndividualTeacherVotes,
    LabelRelease,
    TeacherVotes,
)
from fedvote.transport.local.shared import LocalAgents


class TeacherVoteSkills(
    LocalAgents, TeacherVotes, DomainAdaptedTeachers, LabelRelease, IndividualTeacherVotes
):
    """Every agent's teacher, batched or looped, and its noisy votes (plain, weighted, or Confident-GNMax)."""

    def train_teachers(self, config: TrainingConfig, progress: Progress = NO_PROGRESS) -> None:
        """Train every agent's teacher: all at once (batched) or one after another."""
        self._ensemble = None
        self._multilabel_task = None  # single-label teachers from now on
        if not self._batch_pays_off(config):
            with progress.step("training teachers", total=self.num_agents) as bar:
                for agent in self._agents:
                    agent.train_teacher(config)
                    bar.advance()
            return
        with progress.step("training teachers (batched)", total=self.num_agents) as bar:
            ensemble = fit_ensemble(
                [data.features for data in self._private],
                [data.labels for data in self._private],
                config,
                self._training_seeds,
                num_classes=self._num_classes,
                device=self._device,
            )
            for i, agent in enumerate(self._agents):
                agent.install_teacher_builder(partial(ensemble.module, i, device="cpu"))
            bar.advance(self.num_agents)
        self._ensemble = ensemble

    def train_adapted_teachers(
        self, config: TrainingConfig, dann: DannConfig, progress: Progress = NO_PROGRESS
    ) -> None:
        """Every agent trains its teacher by DANN against the public pool, one after another.

        Not batched: the ensemble trainer (:mod:`fedvote.models.ensemble`) has no domain
        branch, so the agents are looped (each agent's DANN is seeded by its training seed).
        Refused, before any training, when the agents may not read the pool.
        """
        if not self._agent_public_access:
            raise ConfigError(
                "teacher_da",
                "DANN reads the public pool beyond the queries, and this federation's agents may not "
                "(agent_public_access is false): use --teacher-da none",
            )
        self._ensemble = None
        with progress.step("training DANN teachers", total=self.num_agents) as bar:
            for agent in self._agents:
                train_dann_teacher(agent, config, dann)
                bar.advance()

    def _batch_pays_off(self, config: TrainingConfig) -> bool:
        """Batch when allowed and the teachers do not augment (the ensemble does not).

        CNNs too, on a CPU: the stacked channels-last network
        (:mod:`fedvote.models.stacked_conv`) trains 100 MNIST-sized CNNs for 5 epochs in
        20.2 s against the per-agent loop's 35.9 s on 2 cores (benchmarks/bench_teachers.py,
        docs/performance.md).
        """
        return self.batched and not config.augment_shift

    def vote_sum(self, query_indices: np.ndarray, noise_std: float, min_responders: int) -> VoteSum | None:
        """Sum of all agents' noisy votes; in-process every agent responds."""
        responders = self._agents
        # Down: Q query indices to each agent; up: a (Q, C) noisy histogram from each.
        self.communication.count(
            down=len(self._agents) * query_indices.shape[0],
            up=len(responders) * query_indices.shape[0] * self._num_classes,
        )
        if len(responders) < min_responders:
            return None
        if self._ensemble is None:
            releases = [
                teacher_votes.noisy_votes(agent, query_indices, noise_std) for agent in responders
            ]  # N × (Q, C)
            return self._released_sum(releases, min_responders)
        # Every teacher's vote in one tensor op; each agent then adds its own noise share.
        labels = self._voted_labels(query_indices)  # (N, Q)
        votes = np.eye(self._num_classes, dtype=np.float64)[labels]  # (N, Q, C) one-hot
        q = query_indices.shape[0]
        releases = [
            teacher_votes.release_votes(agent, vote, noise_std, q)
            for agent, vote in zip(responders, votes, strict=True)
        ]
        return self._released_sum(releases, min_responders)

    def individual_vote_sum(
        self,
        query_indices: np.ndarray,
        noise_std: float,
        min_responders: int,
        *,
        weights: np.ndarray,
        sampling_rate: float,
    ) -> VoteSum | None:
        """Sum of every agent's weighted, subsampled noisy votes (issue 45); in-process all respond.

        Every agent sends a (Q, C) release whether or not its coins sampled it, so the
        communication is that of :meth:`vote_sum`.
        """
        weights = np.asarray(weights, dtype=np.float64)  # (N,)
        if weights.shape != (self.num_agents,):
            raise ValueError(f"weights of shape {weights.shape} for {self.num_agents} agents")
        responders = self._agents
        q = query_indices.shape[0]
        # Down: Q query indices to each agent; up: a (Q, C) noisy histogram from each.
        self.communication.count(down=len(self._agents) * q, up=len(responders) * q * self._num_classes)
        if len(responders) < min_responders:
            return None
        if self._ensemble is None:
            votes = np.stack(
                [teacher_votes.noisy_votes(agent, query_indices, 0.0) for agent in responders]
            )  # (N, Q, C) clean one-hot, nothing drawn
        else:
            labels = self._voted_labels(query_indices)  # (N, Q)
            votes = np.eye(self._num_classes, dtype=np.float64)[labels]  # (N, Q, C)
        releases = [
            teacher_votes.release_individual_votes(
                agent, vote, weight=float(weight), sampling_rate=sampling_rate, noise_std=noise_std,
                num_queries=q,
            )
            for agent, vote, weight in zip(responders, votes, weights, strict=True)
        ]
        return self._released_sum(releases, min_responders)

    def confident_labels(
        self,
        query_indices: np.ndarray,
        *,
        threshold: float,
        threshold_noise_std: float,
        noise_std: float,
        min_responders: int,
    ) -> ReleasedLabels | None:
        """Confident-GNMax: each agent sends two noised copies of its votes; only labels come back.

        The two copies go through one (secure) sum; the aggregator's step
        (:func:`~fedvote.aggregation.voting.confident_gnmax_step`) runs here, inside the
        transport, and the noisy sums are dropped: the method receives the pass bits and
        the labels of the answered queries only.
        """
        responders = self._agents
        q = query_indices.shape[0]
        # Down: Q query indices to each agent; up: two (Q, C) noisy copies from each.
        self.communication.count(down=len(self._agents) * q, up=len(responders) * 2 * q * self._num_classes)
        if len(responders) < min_responders:
            return None
        if self._ensemble is None:  # noise_std 0: the clean one-hot votes, no noise drawn
            votes = np.stack(
                [teacher_votes.noisy_votes(agent, query_indices, 0.0) for agent in responders]
            )  # (N, Q, C)
        else:
            labels = self._voted_labels(query_indices)  # (N, Q)
            votes = np.eye(self._num_classes, dtype=np.float64)[labels]  # (N, Q, C)
        releases = [
            np.concatenate(
                [
                    teacher_votes.release_votes(agent, vote, std, q)
                    for std in (threshold_noise_std, noise_std)
                ]
            )  # (2Q, C): the check's copy, then the argmax's copy
            for agent, vote in zip(responders, votes, strict=True)
        ]
        total = self._released_sum(releases, min_responders)
        if total is None:
            return None
        answered, labels = confident_gnmax_step(total.sums[:q], total.sums[q:], threshold)
        return ReleasedLabels(answered=answered, labels=labels, responders=total.responders)
