"""In-process transport: agents are objects; the vote sum is computed in memory."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from fedvote.agents import teacher_votes
from fedvote.agents.agent import Agent
from fedvote.agents.behaviour import Behaviour
from fedvote.agents.dann_teacher import dann_local_update, train_dann_teacher
from fedvote.agents.knn_votes import KnnVoter
from fedvote.agents.local_updates import local_update
from fedvote.agents.private_heads import private_heads
from fedvote.agents.weighted_votes import WeightedVoter, noisy_accuracy_bin
from fedvote.aggregation.knn import KnnIndex
from fedvote.aggregation.secure_noise import csprng_seeded_generator
from fedvote.aggregation.secure_sum import FixedPoint, SecureSumAborted, secure_sum
from fedvote.aggregation.voting import WeightRule, confident_gnmax_step
from fedvote.data.federation import Federation, LabeledData
from fedvote.errors import ConfigError
from fedvote.models import local_training
from fedvote.models.batched_dp_sgd import NoisyTraining
from fedvote.models.dann import DannConfig
from fedvote.models.ensemble import ModelEnsemble, fit_ensemble
from fedvote.models.features import FeatureExtractor
from fedvote.models.local_training import LocalTraining
from fedvote.models.logistic_heads import HeadFeatures, HeadRequest, ReleasedHeads
from fedvote.models.precision import compute_device
from fedvote.models.threads import outer_threads, single_threaded
from fedvote.models.training import TrainingConfig
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import (
    ReleasedLabels,
    Transport,
    VoteSum,
    agent_noise_seeds,
    agent_training_seeds,
)
from fedvote.transport.batched_clients import BatchedClients, BatchedUpdates, StackedRecords
from fedvote.transport.capabilities import (
    AgentBehaviours,
    DomainAdaptedTeachers,
    KnnVotes,
    LabelRelease,
    LocalUpdates,
    PersonalisedModels,
    PrivateHeads,
    SecureUpdateSum,
    SimulationDiagnostics,
    TeacherVotes,
    WeightedVotes,
)
from fedvote.transport.multilabel import MultiLabelSkills


class LocalTransport(
    Transport,
    TeacherVotes,
    DomainAdaptedTeachers,
    LabelRelease,
    KnnVotes,
    WeightedVotes,
    AgentBehaviours,
    LocalUpdates,
    SecureUpdateSum,
    PrivateHeads,
    PersonalisedModels,
    MultiLabelSkills,
    SimulationDiagnostics,
):
    """Runs every agent of ``federation`` in this process; it serves every capability.

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
        Where the batched ensemble trains and votes, and the batched clients of the gradient
        methods train: ``"auto"`` (default) is CUDA when PyTorch sees a GPU, else the CPU;
        or name one, e.g. ``"cpu"``. Only where the arithmetic runs: every noise draw is
        still made on the CPU from its agent's own generator and every release leaves
        through its agent. A GPU rounds differently (cuDNN's TF32
        convolutions), so its teachers differ slightly from the CPU's
        (``benchmarks/bench_cnn_gpu.py`` measures how much).
    secure_sum : bool
        Sum the agents' noisy releases through the pairwise-mask secure-sum protocol
        (:mod:`fedvote.aggregation.secure_sum`, fresh OS-random seeds every round), so the
        server-side view is masked vectors and their total; the decoded sum equals the
        plain sum up to the fixed-point resolution 2^-24 per agent. Default ``False``.
    secure_noise : bool
        Every agent draws its noise as ``--secure-noise`` says
        (:class:`~fedvote.agents.agent.Agent`): integer votes + exact discrete Gaussian
        shares from the OS CSPRNG (their sums are then exact integers), other releases from
        a generator seeded by ``os.urandom``. Refused with ``noise_seed``. Default ``False``.

    """

    def __init__(
        self,
        federation: Federation,
        *,
        seed: int = 0,
        noise_seed: int | None = None,
        batched: bool = True,
        device: str | torch.device = "auto",
        secure_sum: bool = False,
        secure_noise: bool = False,
    ):
        super().__init__()
        if secure_noise and noise_seed is not None:
            raise ConfigError("secure_noise", "draws from the OS CSPRNG, unseedable: drop --noise-seed")
        self._secure_codec = FixedPoint() if secure_sum else None
        if self._secure_codec is not None:
            self._secure_codec.check_capacity(federation.num_agents)
        entropy = noise_seed if noise_seed is not None else secrets.randbits(128)
        self._noise_entropy = entropy  # PriFedSync's batched clients draw from it too
        training_seeds = agent_training_seeds(seed, federation.num_agents)
        self._agents = [
            Agent(
                agent_id=i,
                data=data,
                public_features=federation.public.features,
                num_classes=federation.num_classes,
                noise_rng=(
                    csprng_seeded_generator()
                    if secure_noise
                    else np.random.default_rng(agent_noise_seeds(entropy, i))
                ),
                seed=training_seeds[i],
                secure_noise=secure_noise,
            )
            for i, data in enumerate(federation.agents)
        ]
        self._num_classes = federation.num_classes
        self._agent_public_access = federation.agent_public_access
        # The in-process simulator holds every agent's data anyway; the batched path
        # trains from it directly and installs each trained teacher in its agent.
        self._private = federation.agents
        self._public_features = federation.public.features
        self._training_seeds = training_seeds
        self._batched = batched
        self._device = compute_device(device)  # float32: the batched teachers and clients
        self._ensemble: ModelEnsemble | None = None
        self._knn: _LocalKnn | None = None
        self._weighted: list[WeightedVoter] | None = None  # agent-side weights (assign_weights)
        self._records: StackedRecords | None = None  # every agent's records stacked, built on first use
        self._batched_clients: BatchedClients | None = None  # PriFedSync's, built on first use
        self._batched_updates: BatchedUpdates | None = None  # the gradient baselines', built on first use

    @property
    def num_agents(self) -> int:
        """Number of agents N."""
        return len(self._agents)

    @property
    def num_classes(self) -> int:
        """Number of classes C (the width of a vote)."""
        return self._num_classes

    @property
    def device(self) -> torch.device:
        """Where the batched teachers and the gradient methods' batched clients compute."""
        return self._device

    @property
    def batched(self) -> bool:
        """Whether teachers are trained and queried as one vectorised ensemble."""
        return self._batched and self._shares_architecture()

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

    @property
    def agent_public_access(self) -> bool:
        """Whether the federation lets agents read the public pool beyond the queries."""
        return self._agent_public_access

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
        self.communication.download_floats += len(self._agents) * query_indices.shape[0]
        self.communication.upload_floats += len(responders) * query_indices.shape[0] * self._num_classes
        self.communication.rounds += 1
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
        self.communication.download_floats += len(self._agents) * q
        self.communication.upload_floats += len(responders) * 2 * q * self._num_classes
        self.communication.rounds += 1
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

    def _released_sum(self, releases: list[np.ndarray], min_responders: int) -> VoteSum | None:
        """The sum of the responders' releases (all one shape): in memory, or by secure sum.

        With ``secure_sum`` the releases go through one fresh
        :class:`~fedvote.aggregation.secure_sum.SecureSumRound` with dropout threshold
        t = max(min_responders, ⌊N/2⌋ + 1); a round that cannot be unmasked releases
        nothing (``None``, so the caller voids its charge).
        """
        if self._secure_codec is None:
            sums = np.zeros_like(releases[0])
            for release in releases:  # in the agents' order, as they arrive
                sums += release
            return VoteSum(sums=sums, responders=len(releases))
        threshold = min(self.num_agents, max(min_responders, self.num_agents // 2 + 1))
        try:
            total = secure_sum(releases, threshold=threshold, codec=self._secure_codec)
        except SecureSumAborted:
            return None
        return VoteSum(sums=total, responders=len(releases))

    def _voted_labels(self, query_indices: np.ndarray) -> np.ndarray:
        """Batched path: every teacher's prediction, passed through its agent's behaviour, (N, Q)."""
        assert self._ensemble is not None
        labels = self._ensemble.predict(self._public_features[query_indices]).cpu().numpy()  # (N, Q)
        return np.stack([agent.behave(row) for agent, row in zip(self._agents, labels, strict=True)])

    # --- Reputation-weighted voting (reputation-weighted-pate.txt) -------------------------

    def simulate_behaviours(self, behaviours: Sequence[Behaviour]) -> None:
        """Make agent i behave as ``behaviours[i]`` (honest, random, constant, adversarial)."""
        if len(behaviours) != self.num_agents:
            raise ValueError(f"{len(behaviours)} behaviours for {self.num_agents} agents")
        for agent, behaviour in zip(self._agents, behaviours, strict=True):
            agent.set_behaviour(behaviour)

    def accuracy_summary(
        self, validation: LabeledData, bins: int, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of every agent's noisy one-hot accuracy bin, (1, B); in-process all respond."""
        responders = self._agents
        # Down: the validation set (features and labels) to each agent; up: B floats each.
        self.communication.download_floats += len(self._agents) * validation.features.size + len(validation)
        self.communication.upload_floats += len(responders) * bins
        self.communication.rounds += 1
        if len(responders) < min_responders:
            return None
        releases = [noisy_accuracy_bin(agent, validation, bins, noise_std)[None, :] for agent in responders]
        return self._released_sum(releases, min_responders)  # sums: (1, B)

    def assign_weights(self, validation: LabeledData | None, rule: WeightRule) -> None:
        """Every agent fixes its own weight from ``rule``; nothing comes back."""
        # Down: the rule (scheme, range, span and the B-bin summary); the validation set was
        # already sent with the summary round, or is sent now.
        summary = 0 if rule.histogram is None else rule.histogram.size
        self.communication.download_floats += len(self._agents) * (4 + summary)
        if validation is not None and rule.histogram is None:
            validation_floats = validation.features.size + len(validation)
            self.communication.download_floats += len(self._agents) * validation_floats
        self._weighted = [WeightedVoter.from_rule(agent, validation, rule) for agent in self._agents]

    def weighted_vote_sum(
        self, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of all agents' weighted noisy votes; in-process every agent responds."""
        if self._weighted is None:
            raise RuntimeError("call assign_weights before weighted_vote_sum")
        responders = self._weighted
        self.communication.download_floats += len(self._agents) * query_indices.shape[0]
        self.communication.upload_floats += len(responders) * query_indices.shape[0] * self._num_classes
        self.communication.rounds += 1
        if len(responders) < min_responders:
            return None
        if self._ensemble is None:
            releases = [voter.noisy_votes(query_indices, noise_std) for voter in responders]
            return self._released_sum(releases, min_responders)  # sums: (Q, C)
        votes = np.eye(self._num_classes, dtype=np.float64)[self._voted_labels(query_indices)]  # (N, Q, C)
        q = query_indices.shape[0]
        releases = [
            voter.release_votes(vote, noise_std, q) for voter, vote in zip(responders, votes, strict=True)
        ]
        return self._released_sum(releases, min_responders)

    def teacher_accuracies(self, test: LabeledData) -> np.ndarray:
        """Each teacher's accuracy on ``test``, (N,) — a simulation diagnostic, not a release.

        The runner passes a sample of at most
        :data:`~fedvote.analysis.DIAGNOSTIC_TEST_SAMPLE` test points. Batched teachers are
        evaluated by the ensemble's one forward, the one their votes come from
        (``ModelEnsemble.predict``): 100 random MNIST CNNs on 1,000 images, 2 threads, 2-core
        AMD EPYC, 1.8-2.0 s against 7.7-9.4 s one installed teacher after another, the same
        labels. Teachers trained one by one are looped. Nothing is sent, counted or drawn
        from any noise stream.
        """
        if self._knn is not None and self._ensemble is None:  # kNN agents (prepare_knn)
            return self._knn_accuracies(test)
        if self.multilabel_trained:  # multi-label teachers: the task's accuracy
            return self._multilabel_teacher_accuracies(test)
        if self._ensemble is None:
            return np.array([agent.teacher_accuracy(test) for agent in self._agents])
        predictions = self._ensemble.predict(test.features).cpu().numpy()  # (N, T)
        return np.mean(predictions == test.labels[None, :], axis=1)

    def clean_vote_histograms(self, query_indices: np.ndarray) -> np.ndarray:
        """Simulation-only diagnostic: the noiseless vote sums Σᵢ fᵢ(x) of ``query_indices``, (Q, C).

        The teachers' one-hot votes, or the kNN votes after :meth:`prepare_knn`. Not a
        release and not communication: in a deployment these sums exist nowhere. They
        feed the data-dependent analysis (:mod:`fedvote.privacy.data_dependent`).
        """
        queries = np.asarray(query_indices, dtype=np.int64)
        if self.multilabel_trained:  # the τ-clipped votes, (Q, A)
            return self._clean_multilabel_votes(queries)
        if self._knn is not None and self._ensemble is None:  # kNN agents (prepare_knn)
            if self._knn.index is not None:
                return self._knn.index.votes(self._knn.public[queries]).sum(axis=0)  # (Q, C)
            return np.sum([voter.noisy_votes(queries, 0.0) for voter in self._knn.voters], axis=0)
        if self._ensemble is None:  # noise_std 0 adds no noise and draws nothing
            return np.sum([teacher_votes.noisy_votes(agent, queries, 0.0) for agent in self._agents], axis=0)
        labels = self._ensemble.predict(self._public_features[queries]).cpu().numpy()  # (N, Q)
        return np.eye(self._num_classes, dtype=np.float64)[labels].sum(axis=0)  # (Q, C)

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
        voters = [
            KnnVoter.prepare(
                agent,
                extractor,
                k=k,
                k_fraction=k_fraction,
                public_embedding=public_embedding,
                record_embedding=None if embedded is None else embedded[i],
            )
            for i, agent in enumerate(self._agents)
        ]
        ks = np.array([voter.k for voter in voters], dtype=np.int64)
        index = None
        if embedded is not None:
            index = KnnIndex(
                embedded,
                [data.labels for data in self._private],
                ks.tolist(),
                self._num_classes,
                device=self._device,
            )
        self._knn = _LocalKnn(extractor=extractor, public=public_embedding, ks=ks, index=index, voters=voters)
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
        responders = self._knn.voters
        self.communication.download_floats += len(self._agents) * query_indices.shape[0]
        self.communication.upload_floats += len(responders) * query_indices.shape[0] * self._num_classes
        self.communication.rounds += 1
        if len(responders) < min_responders:
            return None
        if self._knn.index is None:
            releases = [voter.noisy_votes(query_indices, noise_std) for voter in responders]
            return self._released_sum(releases, min_responders)  # sums: (Q, C)
        # Every agent's clean kNN vote in one batched pass; each agent adds its noise share.
        votes = self._knn.index.votes(self._knn.public[query_indices])  # (N, Q, C)
        q = query_indices.shape[0]
        releases = [
            voter.release_votes(vote, noise_std, q) for voter, vote in zip(responders, votes, strict=True)
        ]
        return self._released_sum(releases, min_responders)

    def _knn_accuracies(self, test: LabeledData) -> np.ndarray:
        """Each agent's noiseless kNN classifier's test accuracy, (N,) — a diagnostic."""
        assert self._knn is not None
        if self._knn.index is None:
            return np.array([voter.accuracy(test) for voter in self._knn.voters])
        votes = self._knn.index.votes(self._knn.extractor.transform(test.features))  # (N, T, C)
        return np.mean(np.argmax(votes, axis=2) == test.labels[None, :], axis=1)

    # --- FedAUXfdp: output-perturbed heads -------------------------------------------------

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
        self.communication.download_floats += self.num_agents * (features.num_floats + negatives)
        self.communication.upload_floats += sum(
            heads.class_head.size + (0 if heads.score_head is None else heads.score_head.size) + 1
            for heads in released
        )
        self.communication.rounds += 1
        return released

    # --- Gradient-based baselines (FedAvg, DP-FedAvg, DP-FedSGD) ----------------------------

    def record_counts(self) -> np.ndarray:
        """Each agent's number of private records n_i, (N,)."""
        return np.array([agent.num_records for agent in self._agents], dtype=np.int64)

    def local_updates(
        self, global_params: np.ndarray, agent_ids: np.ndarray, training: LocalTraining
    ) -> local_training.LocalUpdates:
        """The listed agents' updates from θ (m, d): trained together, or one agent after another.

        Batched (:meth:`_updates`) when the transport is and the model is a perceptron; the
        per-agent loop otherwise. The input shift, when the round has one, goes down with θ
        (counted).
        """
        theta = np.asarray(global_params, dtype=np.float32)
        ids = np.asarray(agent_ids, dtype=np.int64).reshape(-1)
        d = theta.shape[0]
        self.communication.download_floats += (d + training.shift_floats) * ids.shape[0]
        self.communication.upload_floats += d * ids.shape[0]
        self.communication.rounds += 1
        updates = np.zeros((ids.shape[0], d), dtype=np.float32)
        with single_threaded():
            released = self._updates(theta, [self._agents[int(i)] for i in ids], training)
        for row, update in enumerate(released):
            updates[row] = update
        records = np.array([self._agents[int(i)].num_records for i in ids], dtype=np.int64)
        return local_training.LocalUpdates(agent_ids=ids, updates=updates, records=records)

    def _updates(self, theta: np.ndarray, agents: list[Agent], training: LocalTraining) -> list[np.ndarray]:
        """The ``agents``' released updates (d,) from θ, each through its agent's exit, in order.

        Batched clients (:class:`~fedvote.transport.batched_clients.BatchedUpdates`) when
        :attr:`batched` and the model is a perceptron; else one agent after another
        (:func:`~fedvote.agents.local_updates.local_update`). Either way every agent draws
        its batches, DP-SGD noise and noise share from its own generators, so both give the
        same updates up to floating-point rounding.
        """
        if training.dann_scale is not None and self.trains_multilabel(training):
            raise ConfigError("local_da", "DANN local updates are single-label; not for multi-label ones")
        if self.trains_multilabel(training):  # BCE on the attributes, one agent after another
            return self._multilabel_updates(theta, agents, training)
        if training.dann_scale is not None:  # FedAvg+DA: DANN local steps, one agent after another
            if not self._agent_public_access:
                raise ConfigError(
                    "local_da",
                    "DANN reads the public pool beyond the queries, and this federation's agents may not "
                    "(agent_public_access is false): use --local-da none",
                )
            return [dann_local_update(agent, theta, training) for agent in agents]
        batched = self._gradient_clients() if self._batched and agents else None
        if batched is not None and batched.supports(training):
            return batched.updates(agents, theta, training)
        return [local_update(agent, theta, training) for agent in agents]

    def secure_update_sum(
        self, global_params: np.ndarray, agent_ids: np.ndarray, training: LocalTraining
    ) -> np.ndarray:
        """Σ over *every* agent of its release, (d,) float64: the only thing the server gets.

        θ goes to all N agents. An agent in ``agent_ids`` (its own coin said it takes part)
        sends its update, clipped and noised as ``training`` says (trained as
        :meth:`local_updates` trains them); every other agent sends its noise share
        N(0, training.noise_std²) alone, from its own generator. The server learns the
        total, not an update, nor who took part (DP-FedAvg with distributed noise). As for
        votes, the in-process sum stands for secure aggregation; with ``secure_sum`` the N
        vectors really go through :func:`~fedvote.aggregation.secure_sum.secure_sum`
        (pairwise masks, every agent responds). Counts N·d floats each way (and the input
        shift down with θ), one round.
        """
        theta = np.asarray(global_params, dtype=np.float32)
        chosen = sorted({int(i) for i in np.asarray(agent_ids).reshape(-1)})
        d, n = theta.shape[0], self.num_agents
        codec = self._secure_codec
        if codec is not None:
            codec.check_smoothing(training.noise_std, n)  # rounding after the noise must be free
        self.communication.download_floats += (d + training.shift_floats) * n
        self.communication.upload_floats += d * n
        self.communication.rounds += 1
        with single_threaded():
            updates = self._updates(theta, [self._agents[i] for i in chosen], training)
            trained = dict(zip(chosen, updates, strict=True))

            def release_of(index: int) -> np.ndarray:
                """Agent ``index``'s own release: its update, or its noise share alone (its generator)."""
                if index in trained:
                    return trained[index].astype(np.float64)
                return self._agents[index].noise_share((d,), training.noise_std)

            # The N - m noise shares are most of a round (N·d Gaussians: 10⁷ on MNIST). Each
            # agent draws from its own generator, so the agents may draw at once, one thread a
            # core (numpy draws without the GIL); the releases are the same arrays in the same order.
            with ThreadPoolExecutor(max_workers=outer_threads()) as pool:
                releases = list(pool.map(release_of, range(n)))
        if codec is None:
            total = np.zeros(d, dtype=np.float64)
            for release in releases:  # in the agents' order, as they arrive
                total += release
            return total
        floor = training.min_responders or 0  # t: as for votes (_released_sum), max(t, ⌊N/2⌋ + 1)
        return secure_sum(releases, threshold=min(n, max(floor, n // 2 + 1)), codec=codec)

    def _stacked_records(self) -> StackedRecords:
        """Every agent's records, stacked on the batched device (PriFedSync's and the gradient baselines')."""
        if self._records is None:
            self._records = StackedRecords(self._private, self._device)
        return self._records

    def _gradient_clients(self) -> BatchedUpdates:
        if self._batched_updates is None:
            shape = tuple(self._private[0].features.shape[1:])
            self._batched_updates = BatchedUpdates(self._stacked_records(), shape, self._num_classes)
        return self._batched_updates

    # --- PriFedSync (federated-f-dp-prifedsync.txt) -------------------------------------------

    def private_local_models(
        self, helpers: np.ndarray, agent_ids: np.ndarray, training: NoisyTraining
    ) -> np.ndarray:
        """The listed clients' private models (m, d), trained together (:class:`BatchedClients`).

        On CUDA when available. The batch draws and the noise come from one privacy
        generator seeded from the transport's noise entropy (a batched simulation; each
        client's draws are still independent of every other client's data).
        """
        ids = np.asarray(agent_ids, dtype=np.int64).reshape(-1)
        d = int(np.asarray(helpers).shape[1]) if np.asarray(helpers).ndim == 2 else 0
        shift = 0 if training.input_shift is None else len(training.input_shift)  # sent with the helper
        self.communication.download_floats += (d + shift) * ids.shape[0]
        self.communication.upload_floats += d * ids.shape[0]
        self.communication.rounds += 1
        return self._prifedsync_clients().train(helpers, ids, training)

    def client_accuracies(
        self,
        models: np.ndarray,
        agent_ids: np.ndarray,
        test: LabeledData,
        *,
        per_client: int,
        layer_sizes: tuple[int, ...],
        input_shift: tuple[float, ...] | None = None,
    ) -> np.ndarray:
        """Each model's accuracy on its client's own test set (simulation-only), (m,)."""
        return self._prifedsync_clients().accuracies(
            models, agent_ids, test, per_client=per_client, layer_sizes=layer_sizes, input_shift=input_shift
        )

    def _prifedsync_clients(self) -> BatchedClients:
        clients = self._batched_clients
        if clients is None:
            records = self._stacked_records()
            clients = BatchedClients(
                self._private,
                noise_entropy=self._noise_entropy,
                test_seeds=self._training_seeds,
                device=records.device,
                records=records,
            )
            self._batched_clients = clients
        return clients


@dataclass(frozen=True, eq=False)
class _LocalKnn:
    """LocalTransport's kNN state: φ, φ(pool) (P, d), each agent's k (N,), the batched index.

    ``voters`` are the agents' own kNN state (:class:`~fedvote.agents.knn_votes.KnnVoter`),
    through which every kNN vote leaves its agent.
    """

    extractor: FeatureExtractor
    public: np.ndarray
    ks: np.ndarray
    index: KnnIndex | None
    voters: list[KnnVoter]
