"""Plain majority vote: PATE-FL without noise ("non-private PATE"), a reference for sweeps.

Every agent trains its teacher as in PATE-FL (:mod:`fedvote.methods.pate_fl`); for each
query from the public pool the agents' clean one-hot votes are summed (σ = 0: no noise
share), the argmax of the sum is the pseudo-label, and the student is trained on the
pseudo-labelled queries — or, with ``--student-targets vote-sums`` (``auto`` on wide
vectors, as PATE-FL's), a linear student is fitted to every clean sum. The clean sums leave
the agents: the run is not private at either level
(:func:`~fedvote.privacy.events.majority_vote_events`, ε reported as None), and
``--epsilon`` is refused. It is the line PATE-FL approaches as ε grows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from fedvote.data.federation import PublicMetadata, ServerData
from fedvote.errors import ConfigError
from fedvote.methods.base import Method, MethodOutcome
from fedvote.methods.options.voting import MajorityVoteOptions, check_student_targets
from fedvote.methods.voting import check_voting_run, check_voting_settings, label_and_teach, vote_sum_queries
from fedvote.models.config import resolve_student_targets, teacher_training
from fedvote.models.training import TrainingConfig
from fedvote.privacy.events import LevelEvents, majority_vote_events
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import Transport
from fedvote.transport.capabilities import TeacherVotes

if TYPE_CHECKING:
    from fedvote.config import RunConfig


@dataclass(frozen=True)
class MajorityVote(Method):
    """The teachers' plain majority vote on ``queries`` public queries; no noise.

    Parameters
    ----------
    queries : int
        Number of public-pool queries Q to label.
    min_responders : int
        t, the minimum number of responders; a round with fewer releases nothing.
    teacher, student : TrainingConfig
        How teachers and the student are trained (as PATE-FL's).
    query_batch_size : int
        Queries per voting round.
    self_training_rounds : int
        Rounds of self-training of the student on the rest of the public pool (0: none).
    semi_supervised : str
        How the student learns from the rest of the pool
        (:data:`fedvote.models.student.STUDENT_TRAINING`; ``"auto"``: FixMatch for images of
        at least 16x16, else VAT).
    query_selection : str
        Which pool points are queried (as PATE-FL's).
    seed : int
        Seeds the choice of queries (the same as PATE-FL's under one seed) and the student.
    student_targets : str
        ``"labels"``, ``"vote-sums"`` or ``"auto"`` (resolved from the example shape by
        :meth:`with_public`), as PATE-FL's.

    """

    name = "majority-vote"
    calibration_level: ClassVar[str | None] = None  # nothing to calibrate: not private
    requires: ClassVar[tuple[type, ...]] = (TeacherVotes,)
    options_type: ClassVar[type | None] = MajorityVoteOptions

    queries: int
    min_responders: int
    teacher: TrainingConfig = TrainingConfig()
    student: TrainingConfig = TrainingConfig()
    query_batch_size: int = 1000
    self_training_rounds: int = 2
    semi_supervised: str = "auto"
    query_selection: str = "auto"
    seed: int = 0
    sigma: float = 0.0  # no noise, ever (the VotingSettings σ the shared voting steps read)
    student_min_margin: float = 0.0  # every labelled query teaches the student
    student_targets: str = "auto"

    def __post_init__(self) -> None:
        if self.sigma != 0.0:
            raise ConfigError("sigma", f"{self.name} adds no noise; σ must be 0, got {self.sigma}")
        check_voting_settings(self)
        check_student_targets(self.student_targets)

    @classmethod
    def from_config(
        cls, config: RunConfig, *, sigma: float, queries: int, min_responders: int
    ) -> MajorityVote:
        """The method with the run's teacher/student settings, Q, t and seed.

        ``sigma`` (the runner's default when none is given) is not used; an explicit
        ``--sigma`` other than 0 is refused by name, as the runner refuses ``--epsilon``.
        """
        given = config.privacy.sigma
        if given is not None and given != 0.0:
            raise ConfigError("sigma", f"{cls.name} adds no noise; drop --sigma (or give 0)")
        options: MajorityVoteOptions = cls.options_from(config)
        return cls(
            queries=queries,
            min_responders=min_responders,
            teacher=config.teacher,
            student=config.student,
            self_training_rounds=config.self_training_rounds,
            semi_supervised=config.semi_supervised,
            query_selection=config.query_selection,
            seed=config.seed,
            student_targets=options.student_targets,
        )

    def planned_details(self) -> dict[str, Any]:
        """The teachers' model and epochs and the student's targets as run (public choices)."""
        return {
            "teacher_model": self.teacher.model,
            "teacher_epochs": self.teacher.epochs,
            "student_targets": self.student_targets,
        }

    def default_queries(self, pool_size: int) -> int | None:
        """Vote-sum targets: the whole pool (:func:`~fedvote.methods.voting.vote_sum_queries`); else None."""
        return vote_sum_queries(self.student_targets, pool_size)

    def with_public(self, public: PublicMetadata) -> MajorityVote:
        """The teachers and the student's targets chosen from public metadata if not given (as PATE-FL's)."""
        return dataclasses.replace(
            self,
            teacher=teacher_training(self.teacher, public.example_shape, public.agent_records),
            student_targets=resolve_student_targets(self.student_targets, public.example_shape),
        )

    def with_sigma(self, sigma: float) -> MajorityVote:
        """Unchanged: there is no noise to set (``calibration_level`` None, never calibrated)."""
        return self

    def planned_events(self) -> LevelEvents:
        """Q non-private releases (the clean vote sums), at both levels."""
        return majority_vote_events(self.queries)

    def run(
        self,
        server: ServerData,
        transport: Transport,
        ledger: PrivacyLedger,
        progress: Progress = NO_PROGRESS,
    ) -> MethodOutcome:
        """Train teachers, label ``queries`` public points by clean majority vote, train the student."""
        assert isinstance(transport, TeacherVotes)  # check_capabilities refused any other
        pool_size = server.public_features.shape[0]
        check_voting_run(self.queries, pool_size, self.min_responders, transport.num_agents)
        transport.train_teachers(self.teacher, progress)
        return label_and_teach(
            self,
            server,
            events=majority_vote_events,
            vote_sum=transport.vote_sum,
            ledger=ledger,
            progress=progress,
            student_targets=self.student_targets,
        )
