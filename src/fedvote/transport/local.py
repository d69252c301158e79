"""In-process transport: agents are objects; the vote sum is computed in memory."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np
import torch

from fedvote.agents.agent import Agent
from fedvote.aggregation.knn import KnnIndex
from fedvote.data.federation import Federation, LabeledData
from fedvote.models.ensemble import ModelEnsemble, fit_ensemble
from fedvote.models.features import FeatureExtractor
from fedvote.models.local_training import LocalTraining, LocalUpdates
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
        self._knn: _LocalKnn | None = None

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
        if not self.batched or config.augment_shift:  # the ensemble does not augment
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
        if self._knn is not None and self._ensemble is None:  # kNN agents (prepare_knn)
            return self._knn_accuracies(test)
        if self._ensemble is None:
            return np.array([agent.teacher_accuracy(test) for agent in self._agents])
        predictions = self._ensemble.predict(test.features).cpu().numpy()  # (N, T)
        return np.mean(predictions == test.labels[None, :], axis=1)

    def _shares_architecture(self) -> bool:
        """All agents' examples have one shape (so their teachers one architecture)."""
        return len({tuple(data.features.shape[1:]) for data in self._private}) <= 1

    # --- Private-kNN-FL (Algorithm 2) ---------------------------------------------------

    def prepare_knn(
        self, extractor: FeatureExtractor, *, k: int | None = None, k_fraction: float = 0.05
    ) -> np.ndarray:
        """Give every agent φ; each embeds its records and fixes its k. Returns the ks, (N,).

        φ(public pool) is computed once and shared (it is public). In batched mode the
        agents' records are embedded here in one pass and stacked into one
        :class:`~fedvote.aggregation.knn.KnnIndex`; the agents get their own slices, so
        both paths vote on identical embeddings. After this call
        :meth:`teacher_accuracies` describes the agents' kNN classifiers.
        """
        public_embedding = extractor.transform(self._public_features)  # (P, d)
        embedded: list[np.ndarray] | None = None
        if self.batched:
            sizes = np.array([len(data) for data in self._private], dtype=np.int64)
            union = np.concatenate([data.features for data in self._private])  # (sum n_i, *shape)
            embedded = np.split(extractor.transform(union), np.cumsum(sizes)[:-1])  # agent i: (n_i, d)
        ks = np.array(
            [
                agent.prepare_knn(
                    extractor,
                    k=k,
                    k_fraction=k_fraction,
                    public_embedding=public_embedding,
                    record_embedding=None if embedded is None else embedded[i],
                )
                for i, agent in enumerate(self._agents)
            ],
            dtype=np.int64,
        )
        index = None
        if embedded is not None:
            index = KnnIndex(
                embedded,
                [data.labels for data in self._private],
                ks.tolist(),
                self._num_classes,
                device=self._device,
            )
        self._knn = _LocalKnn(extractor=extractor, public=public_embedding, ks=ks, index=index)
        # Down: φ to every agent; up: each agent's k (a function of its public size).
        self.communication.download_floats += self.num_agents * extractor.num_floats
        self.communication.upload_floats += self.num_agents
        self.communication.rounds += 1
        return ks.copy()

    def knn_vote_sum(
        self, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of all agents' noisy kNN votes; in-process every agent responds."""
        if self._knn is None:
            raise RuntimeError("call prepare_knn before knn_vote_sum")
        responders = self._agents
        self.communication.download_floats += len(self._agents) * query_indices.shape[0]
        self.communication.upload_floats += len(responders) * query_indices.shape[0] * self._num_classes
        self.communication.rounds += 1
        if len(responders) < min_responders:
            return None
        sums = np.zeros((query_indices.shape[0], self._num_classes), dtype=np.float64)
        if self._knn.index is None:
            for agent in responders:
                sums += agent.knn_noisy_votes(query_indices, noise_std)
            return VoteSum(sums=sums, responders=len(responders))
        # Every agent's clean kNN vote in one batched pass; each agent adds its noise share.
        votes = self._knn.index.votes(self._knn.public[query_indices])  # (N, Q, C)
        for agent, vote in zip(responders, votes, strict=True):
            sums += agent.add_noise_share(vote, noise_std)
        return VoteSum(sums=sums, responders=len(responders))

    def _knn_accuracies(self, test: LabeledData) -> np.ndarray:
        """Each agent's noiseless kNN classifier's test accuracy, (N,) — a diagnostic."""
        assert self._knn is not None
        if self._knn.index is None:
            return np.array([agent.knn_accuracy(test) for agent in self._agents])
        votes = self._knn.index.votes(self._knn.extractor.transform(test.features))  # (N, T, C)
        return np.mean(np.argmax(votes, axis=2) == test.labels[None, :], axis=1)


    # --- Gradient-based baselines (FedAvg, DP-FedAvg, DP-FedSGD) ----------------------------

    def record_counts(self) -> np.ndarray:
        """Each agent's number of private records n_i, (N,)."""
        return np.array([agent.num_records for agent in self._agents], dtype=np.int64)

    def local_updates(
        self, global_params: np.ndarray, agent_ids: np.ndarray, training: LocalTraining
    ) -> LocalUpdates:
        """The listed agents' updates from θ, one agent after another (m, d).

        A loop, not the batched ensemble: a round samples few agents (q·N, 2-3 with the
        paper's q = 0.05 and 50 agents), each for a few local steps from the same θ.
        """
        theta = np.asarray(global_params, dtype=np.float32)
        ids = np.asarray(agent_ids, dtype=np.int64).reshape(-1)
        d = theta.shape[0]
        self.communication.download_floats += d * ids.shape[0]
        self.communication.upload_floats += d * ids.shape[0]
        self.communication.rounds += 1
        updates = np.zeros((ids.shape[0], d), dtype=np.float32)
        # One agent's step is a few tiny matrix products: intra-op threads only add
        # synchronisation (10-30x slower on a busy 2-core machine), so use one.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            for row, agent_id in enumerate(ids):
                updates[row] = self._agents[int(agent_id)].local_update(theta, training)
        finally:
            torch.set_num_threads(threads)
        records = np.array([self._agents[int(i)].num_records for i in ids], dtype=np.int64)
        return LocalUpdates(agent_ids=ids, updates=updates, records=records)

@dataclass(frozen=True, eq=False)
class _LocalKnn:
    """LocalTransport's kNN state: φ, φ(pool) (P, d), each agent's k (N,), the batched index."""

    extractor: FeatureExtractor
    public: np.ndarray
    ks: np.ndarray
    index: KnnIndex | None
