"""PATE-FL: Algorithm 1 of the voting paper (../shared/papers/voting-based-dpfl.txt).

Each agent trains a teacher on its own data; for each query x_t from the public pool
every agent releases its one-hot vote plus N(0, σ²/t); the argmax of the sum is the
pseudo-label; a student is trained on the pseudo-labelled queries.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedvote.data.federation import ServerData
from fedvote.methods.base import Method, MethodOutcome
from fedvote.methods.voting import check_voting_run, check_voting_settings, label_and_teach
from fedvote.models.training import TrainingConfig
from fedvote.privacy.events import LevelEvents, pate_fl_events
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import Transport

if TYPE_CHECKING:
    from fedvote.config import RunConfig


@dataclass(frozen=True)
class PateFL(Method):
    """PATE-FL with aggregate noise std ``sigma`` over ``queries`` public queries.

    Parameters
    ----------
    sigma : float
        Std of the total noise on each vote sum (σ); 0 runs the non-private reference.
    queries : int
        Number of public-pool queries Q to label.
    min_responders : int
        t, the minimum number of honest responders; each agent adds N(0, σ²/t). A
        query batch with fewer responders is neither released nor charged.
    teacher, student : TrainingConfig
        How teachers and the student are trained.
    query_batch_size : int
        Queries per voting round (one round = one message each way per agent).
    self_training_rounds : int
        Rounds of self-training of the student on the rest of the public pool (0: none).
    student_min_margin : float
        The student learns only from queries whose *noisy* top-two gap is at least this
        many σ (post-processing of the released sums; the rest join the unlabelled pool).
    seed : int
        Seeds the choice of queries and the student's training.

    """

    name = "pate-fl"

    sigma: float
    queries: int
    min_responders: int
    teacher: TrainingConfig = TrainingConfig()
    student: TrainingConfig = TrainingConfig()
    query_batch_size: int = 1000
    self_training_rounds: int = 2
    student_min_margin: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        check_voting_settings(self)

    @classmethod
    def from_config(
        cls, config: RunConfig, *, sigma: float, queries: int, min_responders: int
    ) -> PateFL:
        """PATE-FL with the run's teacher/student settings and seed."""
        return cls(
            sigma=sigma,
            queries=queries,
            min_responders=min_responders,
            teacher=config.teacher,
            student=config.student,
            self_training_rounds=config.self_training_rounds,
            seed=config.seed,
        )

    def with_sigma(self, sigma: float) -> PateFL:
        """The same run with noise std ``sigma``."""
        return dataclasses.replace(self, sigma=sigma)

    def planned_events(self) -> LevelEvents:
        """All ``queries`` releases: Gaussian, s = 1 (agent) and √2 (instance); Theorem 3."""
        return pate_fl_events(self.sigma, self.queries)

    def run(
        self,
        server: ServerData,
        transport: Transport,
        ledger: PrivacyLedger,
        progress: Progress = NO_PROGRESS,
    ) -> MethodOutcome:
        """Train teachers, label ``queries`` public points by noisy vote, train the student."""
        pool_size = server.public_features.shape[0]
        check_voting_run(self.queries, pool_size, self.min_responders, transport.num_agents)
        transport.train_teachers(self.teacher, progress)
        return label_and_teach(
            self,
            server,
            events=lambda count: pate_fl_events(self.sigma, count),
            vote_sum=transport.vote_sum,
            ledger=ledger,
            progress=progress,
        )
