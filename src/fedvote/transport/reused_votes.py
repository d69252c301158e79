"""A sweep's transport: teachers and clean vote sums kept across runs, fresh noise for each.

A privacy–accuracy sweep (:mod:`fedvote.sweep`) runs one voting method at many noise
levels and query counts. Everything upstream of the noise — the teachers (or kNN
indices) and the *clean* vote sums — is the same at every grid point, so
:class:`ReusedVotesTransport` computes it once and, per run, draws only the aggregate
noise. Simulation only: it holds every agent's clean votes.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from fedvote.agents.behaviour import Behaviour
from fedvote.aggregation.voting import WeightRule, confident_gnmax_step
from fedvote.data.federation import LabeledData
from fedvote.models.features import FeatureExtractor
from fedvote.models.training import TrainingConfig
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import ReleasedLabels, Transport, VoteSum
from fedvote.transport.capabilities import (
    AgentBehaviours,
    KnnVotes,
    LabelRelease,
    SimulationDiagnostics,
    TeacherVotes,
    WeightedVotes,
)
from fedvote.transport.local import LocalTransport

_T = TypeVar("_T")


class ReusedVotesTransport(
    Transport,
    TeacherVotes,
    LabelRelease,
    KnnVotes,
    WeightedVotes,
    AgentBehaviours,
    SimulationDiagnostics,
):
    """A :class:`LocalTransport` whose teachers and clean votes outlive one run.

    Teachers are trained (or kNN indices built) on the first request and kept; clean
    vote sums Σᵢ vᵢ(x) are computed once per query and cached. Each vote request then
    adds fresh noise: the sum of the t…N agents' shares N(0, s²) is drawn directly as
    N(0, responders·s²), which has exactly the distribution of the sum the agents would
    release. Reputation-weighted votes and the accuracy summary are summed clean by the
    inner agents each run (the weights follow each run's own noisy summary) and noised
    here the same way. Simulation only (it holds every agent's clean votes); it counts
    communication as if every round were sent.

    It serves the voting methods' capabilities only (teacher, kNN and weighted votes,
    label release, simulated behaviours) and the simulation diagnostics: a sweep runs
    every other method on a fresh :class:`LocalTransport` per point.
    """

    def __init__(self, inner: LocalTransport, *, noise_seed: int | None = None) -> None:
        super().__init__()
        self._inner = inner
        self._rng = self._noise_generator(noise_seed)
        self._trained: TrainingConfig | None = None
        self._knn_key: tuple[int, int | None, float] | None = None
        self._ks: np.ndarray | None = None
        self._clean: dict[int, np.ndarray] = {}  # query index -> clean vote sum (C,)
        self._accuracies: np.ndarray | None = None
        self._counts = {"teacher_trainings": 0, "knn_preparations": 0, "clean_votes_computed": 0}

    @staticmethod
    def _noise_generator(noise_seed: int | None) -> np.random.Generator:
        entropy = noise_seed if noise_seed is not None else secrets.randbits(128)
        return np.random.default_rng(np.random.SeedSequence([entropy, 0x5EE9]))

    def reseed(self, noise_seed: int | None) -> None:
        """Draw the next run's aggregate noise from ``noise_seed``'s stream (None: fresh OS entropy)."""
        self._rng = self._noise_generator(noise_seed)

    @property
    def num_agents(self) -> int:
        """Number of agents N."""
        return self._inner.num_agents

    def reuse_counts(self) -> dict[str, int]:
        """How often the expensive steps actually ran (the proof that work was reused)."""
        return dict(self._counts)

    def train_teachers(self, config: TrainingConfig, progress: Progress = NO_PROGRESS) -> None:
        """Train the teachers the first time (or when ``config`` changes); else keep them."""
        if self._trained != config:
            self._inner.train_teachers(config, progress)
            self._trained = config
            self._clean.clear()
            self._accuracies = None
            self._counts["teacher_trainings"] += 1

    def prepare_knn(
        self, extractor: FeatureExtractor, *, k: int | None = None, k_fraction: float = 0.05
    ) -> np.ndarray:
        """Build the agents' kNN indices once per extractor and k."""
        key = (id(extractor), k, k_fraction)
        if self._ks is None or self._knn_key is None or self._knn_key[1:] != key[1:]:
            self._ks = self._inner.prepare_knn(extractor, k=k, k_fraction=k_fraction)
            self._knn_key = key
            self._clean.clear()
            self._accuracies = None
            self._counts["knn_preparations"] += 1
        return self._ks.copy()

    def vote_sum(self, query_indices: np.ndarray, noise_std: float, min_responders: int) -> VoteSum | None:
        """Cached clean sums of these queries plus fresh aggregate noise."""
        return self._noisy_sum(query_indices, noise_std, min_responders)

    def knn_vote_sum(
        self, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """As :meth:`vote_sum`, for kNN votes (after :meth:`prepare_knn`)."""
        return self._noisy_sum(query_indices, noise_std, min_responders)

    def clean_vote_histograms(self, query_indices: np.ndarray) -> np.ndarray:
        """The cached clean vote sums of ``query_indices``, (Q, C) (simulation diagnostic)."""
        queries = np.asarray(query_indices, dtype=np.int64)
        missing = [int(q) for q in queries if int(q) not in self._clean]
        if missing:
            sums = self._inner.clean_vote_histograms(np.asarray(missing, dtype=np.int64))  # (M, C)
            self._clean.update(zip(missing, sums, strict=True))
            self._counts["clean_votes_computed"] += len(missing)
        return np.stack([self._clean[int(q)] for q in queries])

    def teacher_accuracies(self, test: LabeledData) -> np.ndarray:
        """Each teacher's accuracy on ``test`` (N,), computed once.

        Once per teachers: a sweep's runs share one seed, so the runner passes each of them
        the same diagnostic sample of the test set.
        """
        if self._accuracies is None:
            self._accuracies = self._inner.teacher_accuracies(test)
        return self._accuracies.copy()

    def record_counts(self) -> np.ndarray:
        """Each agent's number of records n_i, (N,) (public metadata)."""
        return self._inner.record_counts()

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
        """The inner transport's per-client accuracies of ``models`` (simulation diagnostic), (m,)."""
        return self._inner.client_accuracies(
            models, agent_ids, test, per_client=per_client, layer_sizes=layer_sizes, input_shift=input_shift
        )

    # --- Reputation-weighted voting: the teachers are reused; each run fixes the agents'
    # weights afresh (they depend on its own noisy accuracy summary). The inner agents
    # compute their clean shares (noise std 0 draws nothing); the aggregate noise of the
    # responders' shares, N(0, responders·s²), is drawn here from the run's stream.

    def simulate_behaviours(self, behaviours: Sequence[Behaviour]) -> None:
        """Make agent i behave as ``behaviours[i]``; cached clean votes are dropped (they change)."""
        self._inner.simulate_behaviours(behaviours)
        self._clean.clear()

    def accuracy_summary(
        self, validation: LabeledData, bins: int, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """The agents' clean accuracy bins summed in process, plus fresh aggregate noise; one round."""
        clean = self._forward(lambda: self._inner.accuracy_summary(validation, bins, 0.0, min_responders))
        return None if clean is None else self._noised(clean, noise_std)

    def assign_weights(self, validation: LabeledData | None, rule: WeightRule) -> None:
        """Every agent fixes its own weight from ``rule`` (in the inner transport's agents)."""
        self._forward(lambda: self._inner.assign_weights(validation, rule))

    def weighted_vote_sum(
        self, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """The agents' clean weighted votes summed in process, plus fresh aggregate noise; one round."""
        clean = self._forward(lambda: self._inner.weighted_vote_sum(query_indices, 0.0, min_responders))
        return None if clean is None else self._noised(clean, noise_std)

    def _noised(self, clean: VoteSum, noise_std: float) -> VoteSum:
        """``clean`` plus the sum of its responders' noise shares N(0, noise_std²), drawn as one."""
        sums = clean.sums
        if noise_std > 0:
            sums = sums + self._rng.normal(0.0, noise_std * np.sqrt(clean.responders), size=sums.shape)
        return VoteSum(sums=sums, responders=clean.responders)

    def _forward(self, action: Callable[[], _T]) -> _T:
        """Run ``action`` on the inner transport and count its communication as this one's."""
        before = self._inner.communication.as_dict()
        result = action()
        after = self._inner.communication.as_dict()
        self.communication.count(
            down=after["download_floats"] - before["download_floats"],
            up=after["upload_floats"] - before["upload_floats"],
            rounds=after["rounds"] - before["rounds"],
        )
        return result

    def confident_labels(
        self,
        query_indices: np.ndarray,
        *,
        threshold: float,
        threshold_noise_std: float,
        noise_std: float,
        min_responders: int,
    ) -> ReleasedLabels | None:
        """Confident-GNMax on the cached clean sums, two fresh aggregate noise draws; one round.

        Counts what :meth:`LocalTransport.confident_labels` sends: two (Q, C) copies up.
        """
        responders = self.num_agents  # in-process every agent responds
        q = query_indices.shape[0]
        self.communication.count(down=self.num_agents * q, up=responders * 2 * q * self._inner.num_classes)
        if responders < min_responders:
            return None
        clean = self.clean_vote_histograms(query_indices)  # (Q, C)
        scale = np.sqrt(responders)
        check = clean + self._rng.normal(0.0, threshold_noise_std * scale, size=clean.shape)
        argmax = clean + self._rng.normal(0.0, noise_std * scale, size=clean.shape)
        answered, labels = confident_gnmax_step(check, argmax, threshold)
        return ReleasedLabels(answered=answered, labels=labels, responders=responders)

    def _noisy_sum(self, query_indices: np.ndarray, noise_std: float, min_responders: int) -> VoteSum | None:
        responders = self.num_agents  # in-process every agent responds
        num_classes = self._inner.num_classes
        q = query_indices.shape[0]
        self.communication.count(down=self.num_agents * q, up=responders * q * num_classes)
        if responders < min_responders:
            return None
        sums = self.clean_vote_histograms(query_indices)  # (Q, C)
        if noise_std > 0:
            sums = sums + self._rng.normal(0.0, noise_std * np.sqrt(responders), size=sums.shape)
        return VoteSum(sums=sums, responders=responders)
