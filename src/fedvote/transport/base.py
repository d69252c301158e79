"""The seam between *what* a method does and *where* its agents act.

A method talks to agents only through a :class:`Transport`: it asks them to train
their teachers and to vote on query indices into the public pool, and receives only
the *sum* of their noisy votes (as secure aggregation would reveal it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from fedvote.data.federation import LabeledData
from fedvote.models.features import FeatureExtractor
from fedvote.models.local_training import LocalTraining, LocalUpdates
from fedvote.models.training import TrainingConfig
from fedvote.progress import NO_PROGRESS, Progress


@dataclass(frozen=True, eq=False)
class VoteSum:
    """Sum over responders of their noisy votes, (Q, C), and how many responded."""

    sums: np.ndarray
    responders: int


@dataclass
class Communication:
    """Floats sent agent→server (up) and server→agent (down), and communication rounds."""

    upload_floats: int = 0
    download_floats: int = 0
    rounds: int = 0

    def as_dict(self) -> dict[str, int]:
        """JSON-ready counters."""
        return {
            "upload_floats": self.upload_floats,
            "download_floats": self.download_floats,
            "rounds": self.rounds,
        }


class Transport(ABC):
    """Agents' actions as seen by the server; implementations decide where agents run."""

    def __init__(self) -> None:
        self.communication = Communication()

    @property
    @abstractmethod
    def num_agents(self) -> int:
        """Number of agents N."""

    @abstractmethod
    def train_teachers(self, config: TrainingConfig, progress: Progress = NO_PROGRESS) -> None:
        """Every agent trains its local teacher on its private data."""

    @abstractmethod
    def vote_sum(
        self, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of the agents' noisy votes on ``query_indices`` (one communication round).

        Each agent adds N(0, noise_std²) to its own vote. Returns ``None`` — nothing is
        released — when fewer than ``min_responders`` agents answered.
        """

    @abstractmethod
    def teacher_accuracies(self, test: LabeledData) -> np.ndarray:
        """Simulation-only diagnostic: each teacher's test accuracy, (N,). Not a release."""

    # --- Private-kNN-FL (Algorithm 2) ---------------------------------------------------
    # Not abstract: transports that do not support kNN voting refuse it when asked.

    def prepare_knn(
        self, extractor: FeatureExtractor, *, k: int | None = None, k_fraction: float = 0.05
    ) -> np.ndarray:
        """Ship the public φ to every agent, which embeds its own records for kNN voting.

        Each agent uses ``k`` neighbours, or ``round(k_fraction · n_i)`` (at least 1) of its
        n_i records. Returns each agent's k, (N,) int64 — public metadata the server needs
        for accounting (the instance-level sensitivity is √2 / min k).
        """
        raise NotImplementedError(f"{type(self).__name__} does not support kNN voting")

    def knn_vote_sum(
        self, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of the agents' noisy kNN votes on ``query_indices``; as :meth:`vote_sum`.

        Each agent's vote is the mean one-hot label of the query's k nearest neighbours
        among its own records in φ-space (it sums to 1), plus N(0, noise_std²).
        Needs :meth:`prepare_knn` first.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support kNN voting")

    # --- Gradient-based baselines (FedAvg, DP-FedAvg, DP-FedSGD) ----------------------------
    # Not abstract: transports that do not support local training refuse it when asked.

    def record_counts(self) -> np.ndarray:
        """Each agent's number of private records n_i, (N,) — public metadata, as in the papers."""
        raise NotImplementedError(f"{type(self).__name__} does not support gradient-based methods")

    def local_updates(
        self, global_params: np.ndarray, agent_ids: np.ndarray, training: LocalTraining
    ) -> LocalUpdates:
        """One communication round: agents ``agent_ids`` train from θ and send their updates.

        θ (d,) goes down to each of the m listed agents; each trains on its own records as
        ``training`` says and sends back its update (clipped and noised agent-side when
        ``training`` asks). Counts d·m floats each way and one round, also when m = 0.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support gradient-based methods")
