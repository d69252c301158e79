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
