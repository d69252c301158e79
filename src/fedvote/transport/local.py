"""In-process transport: agents are objects; the vote sum is computed in memory."""

from __future__ import annotations

import secrets

import numpy as np

from fedvote.agents.agent import Agent
from fedvote.data.federation import Federation, LabeledData
from fedvote.models.training import TrainingConfig
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import Transport, VoteSum


class LocalTransport(Transport):
    """Runs every agent of ``federation`` in this process.

    Parameters
    ----------
    federation : Federation
        Supplies each agent's private data and the public pool.
    seed : int
        Seeds the teachers' training (initialisation and batch order).
    noise_seed : int or None
        Seeds the privacy noise, for reproducible simulations only. ``None`` (default)
        draws it from OS entropy, so no seed printed anywhere predicts the noise.

    """

    def __init__(self, federation: Federation, *, seed: int = 0, noise_seed: int | None = None):
        super().__init__()
        entropy = noise_seed if noise_seed is not None else secrets.randbits(128)
        noise_streams = np.random.SeedSequence(entropy).spawn(federation.num_agents)
        training_seeds = np.random.SeedSequence([seed, 0xA6E]).generate_state(federation.num_agents)
        self._agents = [
            Agent(
                agent_id=i,
                data=data,
                public_features=federation.public.features,
                num_classes=federation.num_classes,
                noise_rng=np.random.default_rng(noise_streams[i]),
                seed=int(training_seeds[i]),
            )
            for i, data in enumerate(federation.agents)
        ]
        self._num_classes = federation.num_classes

    @property
    def num_agents(self) -> int:
        """Number of agents N."""
        return len(self._agents)

    def train_teachers(self, config: TrainingConfig, progress: Progress = NO_PROGRESS) -> None:
        """Train every agent's teacher, one after another."""
        with progress.step("training teachers", total=self.num_agents) as bar:
            for agent in self._agents:
                agent.train_teacher(config)
                bar.advance()

    def vote_sum(
        self, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of all agents' noisy votes; in-process every agent responds."""
        responders = self._agents
        # Down: Q query indices to each agent; up: a (Q, C) noisy histogram from each.
        self.communication.download_floats += len(self._agents) * query_indices.shape[0]
        self.communication.upload_floats += (
            len(responders) * query_indices.shape[0] * self._num_classes
        )
        self.communication.rounds += 1
        if len(responders) < min_responders:
            return None
        sums = np.zeros((query_indices.shape[0], self._num_classes), dtype=np.float64)
        for agent in responders:
            sums += agent.noisy_votes(query_indices, noise_std)
        return VoteSum(sums=sums, responders=len(responders))

    def teacher_accuracies(self, test: LabeledData) -> np.ndarray:
        """Each teacher's test accuracy, (N,) — a diagnostic the simulation can afford."""
        return np.array([agent.teacher_accuracy(test) for agent in self._agents])
