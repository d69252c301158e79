"""An agent of the federation; its public surface is the privacy boundary.

Everything an :class:`Agent` returns through its public methods is already noised
(its share of the noise, :meth:`Agent.noisy_votes`) or is a simulation-only
diagnostic explicitly named so. The same class runs in-process (LocalTransport) and
on a node of its own (the Flower transport).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedvote.aggregation.knn import knn_votes, resolve_k
from fedvote.aggregation.voting import one_hot_votes
from fedvote.data.federation import LabeledData
from fedvote.errors import ConfigError
from fedvote.models.features import FeatureExtractor
from fedvote.models.local_training import (
    LocalTraining,
    clip_to_norm,
    dp_sgd_steps,
    flat_parameters,
    load_flat_parameters,
    sgd_steps,
)
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
        self._knn: _KnnState | None = None

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

    # --- Private-kNN-FL (Algorithm 2): the agent's "teacher" is a kNN vote in φ-space ---

    def prepare_knn(
        self,
        extractor: FeatureExtractor,
        *,
        k: int | None = None,
        k_fraction: float = 0.05,
        public_embedding: np.ndarray | None = None,
        record_embedding: np.ndarray | None = None,
    ) -> int:
        """Embed the private records with the public φ; returns the k this agent uses.

        ``k`` fixed, or ``round(k_fraction · n)`` (at least 1) of this agent's n records
        (:func:`fedvote.aggregation.knn.resolve_k`). The returned k is public metadata (it
        is a function of the public record count) that the server needs for accounting.
        ``public_embedding`` is φ(public pool), (P, d), when the transport computed it once
        for every agent (it is public); otherwise the agent computes it itself.
        ``record_embedding`` is φ(own records), (n, d), for in-process transports that
        embed every agent's data at once (as :meth:`install_teacher` takes a teacher).
        """
        agent_k = resolve_k(self.num_records, k, k_fraction)
        pool = public_embedding
        if pool is None:
            pool = extractor.transform(self._public_features)
        if pool.shape != (self._public_features.shape[0], extractor.dim):
            raise ConfigError(
                "public_embedding",
                f"expected ({self._public_features.shape[0]}, {extractor.dim}), got {tuple(pool.shape)}",
            )
        records = record_embedding
        if records is None:
            records = extractor.transform(self._data.features)
        if records.shape != (self.num_records, extractor.dim):
            raise ConfigError(
                "record_embedding",
                f"expected ({self.num_records}, {extractor.dim}), got {tuple(records.shape)}",
            )
        self._knn = _KnnState(
            extractor=extractor,
            k=agent_k,
            records=np.asarray(records, dtype=np.float32),
            public=np.asarray(pool, dtype=np.float32),
        )
        return agent_k

    def knn_noisy_votes(self, query_indices: np.ndarray, noise_std: float) -> np.ndarray:
        """The agent's kNN release: mean one-hot label of each query's k nearest own records.

        Algorithm 2, line 5: (1/k) Σ_j e_{y_j} + N(0, noise_std²), (Q, C), noise_std = σ/√t.
        Ties at the k-th distance go to the lower record index.
        """
        knn = self._require_knn()
        votes = knn_votes(
            knn.public[query_indices], knn.records, self._data.labels, knn.k, self._num_classes
        )  # (Q, C)
        return self.add_noise_share(votes, noise_std)

    def knn_accuracy(self, test: LabeledData) -> float:
        """Simulation-only diagnostic: accuracy of the noiseless kNN vote's argmax on ``test``."""
        knn = self._require_knn()
        votes = knn_votes(
            knn.extractor.transform(test.features), knn.records, self._data.labels, knn.k, self._num_classes
        )
        return float(np.mean(np.argmax(votes, axis=1) == test.labels))

    def _require_knn(self) -> _KnnState:
        if self._knn is None:
            raise RuntimeError(f"agent {self.agent_id} has no kNN index yet; call prepare_knn first")
        return self._knn

    # --- Gradient-based baselines (FedAvg, DP-FedAvg, DP-FedSGD) --------------------------

    def local_update(self, global_params: np.ndarray, training: LocalTraining) -> np.ndarray:
        """The agent's update Δ = θ' − θ from the global θ (d,) after local training, (d,) float32.

        Plain SGD for ``training.steps`` iterations (FedAvg, Algorithm 4), then — when the
        round asks — Δ clipped to norm S and noised with N(0, noise_std²) from this agent's
        own generator (DP-FedAvg, Algorithm 6). With ``training.dp_sgd`` the local steps are
        DP-SGD through Opacus instead, its Poisson batches and noise also drawn from this
        agent's privacy randomness (DP-FedSGD). Only the update leaves the agent.
        """
        shape = tuple(self._data.features.shape[1:])
        model = build_model(
            training.model, shape, self._num_classes, generator=torch.Generator().manual_seed(0)
        )
        start = np.asarray(global_params, dtype=np.float32)
        load_flat_parameters(model, start)
        if training.dp_sgd is not None:
            privacy_generator = torch.Generator().manual_seed(int(self._noise_rng.integers(2**62)))
            dp_sgd_steps(
                model,
                self._data.features,
                self._data.labels,
                steps=training.steps,
                learning_rate=training.learning_rate,
                spec=training.dp_sgd,
                generator=privacy_generator,
            )
        else:
            order_seed = np.random.SeedSequence([self._seed, 0x56D0, training.round_index])
            sgd_steps(
                model,
                self._data.features,
                self._data.labels,
                steps=training.steps,
                learning_rate=training.learning_rate,
                batch_size=training.batch_size,
                generator=torch.Generator().manual_seed(int(order_seed.generate_state(1)[0])),
            )
        update = flat_parameters(model) - start  # (d,)
        if training.clip_norm is not None:
            update = clip_to_norm(update, training.clip_norm)
        if training.noise_std > 0:
            noise = self._noise_rng.normal(0.0, training.noise_std, size=update.shape)
            update = (update.astype(np.float64) + noise).astype(np.float32)
        return update


@dataclass(frozen=True, eq=False)
class _KnnState:
    """What an agent keeps for kNN voting: φ, its k, φ(own records) (n, d), φ(pool) (P, d)."""

    extractor: FeatureExtractor
    k: int
    records: np.ndarray
    public: np.ndarray
