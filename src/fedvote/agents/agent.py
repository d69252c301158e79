"""An agent of the federation; its public surface is the privacy boundary.

Everything an :class:`Agent` returns through its public methods is already noised
(its share of the noise, :meth:`Agent.noisy_votes`) or is a simulation-only
diagnostic explicitly named so. The same class runs in-process (LocalTransport) and
on a node of its own (the Flower transport).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fedvote.aggregation.voting import one_hot_votes
from fedvote.data.federation import LabeledData
from fedvote.models.training import TrainingConfig, fit_classifier, predict_labels
from fedvote.models.zoo import build_model


class Agent:
    """One agent: its private labelled data, a copy of the public pool, its teacher.

    Parameters
    ----------
    agent_id : int
        Index of the agent in the federation.
    data : LabeledData
        The agent's private records; never leaves the agent.
    public_features : np.ndarray
        The public pool (P, *shape); queries arrive as indices into it.
    num_classes : int
        Number of classes C.
    noise_rng : np.random.Generator
        Source of this agent's privacy noise (seeded only for reproducible simulations).
    seed : int
        Seeds the teacher's initialisation and batch order.

    """

    def __init__(
        self,
        *,
        agent_id: int,
        data: LabeledData,
        public_features: np.ndarray,
        num_classes: int,
        noise_rng: np.random.Generator,
        seed: int,
    ) -> None:
        self.agent_id = agent_id
        self._data = data
        self._public_features = public_features
        self._num_classes = num_classes
        self._noise_rng = noise_rng
        self._seed = seed
        self._teacher: nn.Module | None = None

    @property
    def num_records(self) -> int:
        """Size of the private dataset (public metadata, as in the papers' settings)."""
        return len(self._data)

    def train_teacher(self, config: TrainingConfig) -> None:
        """Train the local teacher f_i on the private data (Algorithm 1, line 2)."""
        generator = torch.Generator().manual_seed(self._seed)
        model = build_model(
            config.model,
            tuple(self._data.features.shape[1:]),
            self._num_classes,
            generator=generator,
        )
        self._teacher = fit_classifier(
            model, self._data.features, self._data.labels, config, generator
        )

    def install_teacher(self, teacher: nn.Module) -> None:
        """Take ``teacher`` as f_i: a model trained for this agent on its own private data.

        For in-process transports that train every agent's teacher at once (the batched
        ensemble of :class:`fedvote.transport.LocalTransport`); the result is the teacher
        :meth:`train_teacher` would have produced, up to floating-point rounding.
        """
        self._teacher = teacher.eval()

    def noisy_votes(self, query_indices: np.ndarray, noise_std: float) -> np.ndarray:
        """The agent's release for these queries: one-hot votes + N(0, noise_std²), (Q, C).

        Algorithm 1, line 5, with noise_std = σ/√t (the agent's share of the noise).
        """
        votes = one_hot_votes(self._predict(query_indices), self._num_classes)  # (Q, C)
        return self.add_noise_share(votes, noise_std)

    def add_noise_share(self, votes: np.ndarray, noise_std: float) -> np.ndarray:
        """Release votes its teacher cast in a batch: ``votes`` + N(0, noise_std²), (Q, C).

        A transport that evaluates every teacher in one tensor operation (LocalTransport's
        ensemble) hands each agent its own clean votes (Q, C); the agent adds its noise
        share from its own generator, drawing exactly what :meth:`noisy_votes` would.
        Returns a new array; ``votes`` is left as it was.
        """
        noised = np.array(votes, dtype=np.float64)  # (Q, C), a copy
        if noise_std > 0:
            noised += self._noise_rng.normal(0.0, noise_std, size=noised.shape)
        return noised

    def teacher_accuracy(self, test: LabeledData) -> float:
        """Simulation-only diagnostic: the teacher's accuracy on the test set (not a release)."""
        teacher = self._require_teacher()
        return float(np.mean(predict_labels(teacher, test.features) == test.labels))

    def _predict(self, query_indices: np.ndarray) -> np.ndarray:
        return predict_labels(self._require_teacher(), self._public_features[query_indices])

    def _require_teacher(self) -> nn.Module:
        if self._teacher is None:
            raise RuntimeError(f"agent {self.agent_id} has no teacher yet; call train_teacher first")
        return self._teacher
