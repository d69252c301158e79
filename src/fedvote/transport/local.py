"""In-process transport: agents are objects; the vote sum is computed in memory."""

from __future__ import annotations

import secrets

import numpy as np
import torch

from fedvote.agents.agent import Agent
from fedvote.data.federation import Federation, LabeledData
from fedvote.models.ensemble import ModelEnsemble, fit_ensemble
from fedvote.models.training import TrainingConfig
from fedvote.models.zoo import resolve_model_name
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
    batched : bool
        Train all teachers as one vectorised ensemble and compute all agents' votes in
        one tensor operation (default), when the agents share an architecture; else
        (or with ``False``) loop over agents one model at a time. Both give the same
        teachers up to floating-point rounding, and the same noise: each agent still
        adds its own noise share from its own generator.
    device : str or torch.device
        Where the batched ensemble trains and votes (default ``"cpu"``; e.g. ``"cuda"``).

    """

    def __init__(
        self,
        federation: Federation,
        *,
        seed: int = 0,
        noise_seed: int | None = None,
        batched: bool = True,
        device: str | torch.device = "cpu",
    ):
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
        # The in-process simulator holds every agent's data anyway; the batched path
        # trains from it directly and installs each trained teacher in its agent.
        self._private = federation.agents
        self._public_features = federation.public.features
        self._training_seeds = [int(s) for s in training_seeds]
        self._batched = batched
        self._device = torch.device(device)
        self._ensemble: ModelEnsemble | None = None

    @property
    def num_agents(self) -> int:
        """Number of agents N."""
        return len(self._agents)

    @property
    def batched(self) -> bool:
        """Whether teachers are trained and queried as one vectorised ensemble."""
        return self._batched and self._shares_architecture()

    def train_teachers(self, config: TrainingConfig, progress: Progress = NO_PROGRESS) -> None:
        """Train every agent's teacher: all at once (batched) or one after another."""
        self._ensemble = None
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
                agent.install_teacher(ensemble.module(i, device="cpu"))
            bar.advance(self.num_agents)
        self._ensemble = ensemble

    def _batch_pays_off(self, config: TrainingConfig) -> bool:
        """Batch when allowed, except CNNs on the CPU.

        There vmap over convolutions is slower than the per-agent loop
        (benchmarks/bench_teachers.py measured 0.2-0.5x).
        """
        if not self.batched:
            return False
        shape = tuple(self._private[0].features.shape[1:])
        return self._device.type != "cpu" or resolve_model_name(config.model, shape) != "cnn"

    def vote_sum(self, query_indices: np.ndarray, noise_std: float, min_responders: int) -> VoteSum | None:
        """Sum of all agents' noisy votes; in-process every agent responds."""
        responders = self._agents
        # Down: Q query indices to each agent; up: a (Q, C) noisy histogram from each.
        self.communication.download_floats += len(self._agents) * query_indices.shape[0]
        self.communication.upload_floats += len(responders) * query_indices.shape[0] * self._num_classes
        self.communication.rounds += 1
        if len(responders) < min_responders:
            return None
        sums = np.zeros((query_indices.shape[0], self._num_classes), dtype=np.float64)
        if self._ensemble is None:
            for agent in responders:
                sums += agent.noisy_votes(query_indices, noise_std)
            return VoteSum(sums=sums, responders=len(responders))
        # Every teacher's vote in one tensor op; each agent then adds its own noise share.
        labels = self._ensemble.predict(self._public_features[query_indices]).cpu().numpy()  # (N, Q)
        votes = np.eye(self._num_classes, dtype=np.float64)[labels]  # (N, Q, C) one-hot
        for agent, vote in zip(responders, votes, strict=True):
            sums += agent.add_noise_share(vote, noise_std)
        return VoteSum(sums=sums, responders=len(responders))

    def teacher_accuracies(self, test: LabeledData) -> np.ndarray:
        """Each teacher's test accuracy, (N,) — a diagnostic the simulation can afford."""
        if self._ensemble is None:
            return np.array([agent.teacher_accuracy(test) for agent in self._agents])
        predictions = self._ensemble.predict(test.features).cpu().numpy()  # (N, T)
        return np.mean(predictions == test.labels[None, :], axis=1)

    def _shares_architecture(self) -> bool:
        """All agents' examples have one shape (so their teachers one architecture)."""
        return len({tuple(data.features.shape[1:]) for data in self._private}) <= 1
