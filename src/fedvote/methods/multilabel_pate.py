"""Multi-label PATE-FL: τ-clipped attribute votes (the voting paper's CelebA setting).

The voting paper's multi-label evaluation (Sec. 5.1, Table 1 "CelebA"; appendix "Details
of CelebA Datasets Evaluation": τ = 4, clipping after Zhu et al. 2020):

1. each agent trains a multi-label teacher (A sigmoid outputs, BCE) on its records;
2. for each public query x_t, each agent votes the indicator of its teacher's **top-τ
   attributes among those with probability > 1/2** (at most τ ones; fewer when fewer
   attributes pass 1/2) and adds its noise share N(0, σ²/t);
3. the server receives the noisy sums n_a(x_t) + N(0, σ²) and labels attribute a of x_t
   1 iff n_a > ``vote_threshold``·r (r the voters; default 1/2: a noisy majority) —
   post-processing, no ε; a single-label dataset read one-hot takes the noisy argmax
   instead (:func:`pseudo_targets`);
4. a multi-label student (BCE) learns the labelled queries; on a single-label dataset the
   voting methods' single-label student does, semi-supervised on the pool.

**Accounting** (``docs/privacy.md``, "Multi-label votes"): a τ-clipped vote has
‖v‖₂ ≤ √τ, so zeroing an agent moves each query's sum by at most √τ (agent level); one
record changed moves at most one agent's vote, between two sets of at most τ ones each,
‖v − v'‖₂ ≤ √(2τ) (instance level). Q Gaussian releases of σ at those sensitivities:
:func:`fedvote.privacy.events.multilabel_events`. τ is capped at A (at most A ones); its
default is the paper's 4 on a multi-label dataset and 1 on a single-label one.

The runner scores the student by mean attribute accuracy on a multi-label dataset
(:mod:`fedvote.data.attributes`); on a single-label dataset the classes are read as A = C
one-hot attributes and the score is plain accuracy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from fedvote.aggregation.voting import noise_share_std
from fedvote.data.attributes import AttributeTask
from fedvote.data.federation import PublicMetadata, ServerData
from fedvote.data.query_selection import choose_queries, resolve_query_selection
from fedvote.errors import ConfigError
from fedvote.methods.base import Method, MethodOutcome
from fedvote.methods.options.multilabel import DEFAULT_TAU, MultiLabelOptions
from fedvote.methods.voting import charged_rounds, check_voting_run, student_from_labels
from fedvote.models.config import teacher_training
from fedvote.models.multilabel import AttributeHead, fit_attributes
from fedvote.models.precision import resolve_precision
from fedvote.models.training import TrainingConfig
from fedvote.models.zoo import build_model
from fedvote.privacy.events import LevelEvents, multilabel_events
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import Transport
from fedvote.transport.capabilities import MultiLabelTeacherVotes

if TYPE_CHECKING:
    from fedvote.config import RunConfig


def threshold_votes(sums: np.ndarray, responders: int, fraction: float) -> np.ndarray:
    """Pseudo-labels (Q, A) 0/1: attribute a of query q is 1 iff its noisy count > fraction·r.

    ``sums`` (Q, A) are released noisy vote sums of ``responders`` (r) voters.
    """
    return (np.asarray(sums, dtype=np.float64) > fraction * responders).astype(np.float32)


def pseudo_targets(sums: np.ndarray, responders: int, fraction: float, encoding: str) -> np.ndarray:
    """The student's targets (Q, A) from released noisy sums (Q, A): post-processing, no ε.

    A multi-label (bitmask) task thresholds each attribute (:func:`threshold_votes`). A
    single-label task read one-hot has exactly one true attribute per query, so its target
    is the noisy argmax, PATE's GNMax label (Papernot et al. 2018): a threshold at half the
    voters would leave most queries of weak teachers with no label at all.
    """
    if encoding == "one-hot":
        sums = np.asarray(sums, dtype=np.float64)
        targets = np.zeros(sums.shape, dtype=np.float32)
        targets[np.arange(sums.shape[0]), sums.argmax(axis=1)] = 1.0
        return targets
    return threshold_votes(sums, responders, fraction)


@dataclass(frozen=True)
class MultiLabelPateFL(Method):
    """Multi-label PATE-FL with noise std ``sigma`` on each attribute's count, ``queries`` queries.

    Parameters
    ----------
    sigma : float
        Std σ of the total noise on each attribute's vote count; 0: non-private reference.
    queries : int
        Q, the public-pool points labelled.
    min_responders : int
        t; each agent adds N(0, σ²/t). A round with fewer responders is neither released
        nor charged.
    teacher, student : TrainingConfig
        How the multi-label teachers and the student train (A logits, BCE).
    query_batch_size : int
        Queries per voting round.
    query_selection : str
        Which pool points are queried (:data:`fedvote.data.query_selection.QUERY_SELECTIONS`).
    seed : int
        Seeds the choice of queries and the student's training.
    options : MultiLabelOptions
        τ and the vote threshold.
    task : AttributeTask or None
        The federation's attributes (set from its public metadata by :meth:`with_public`).

    """

    name = "pate-fl-multilabel"
    requires: ClassVar[tuple[type, ...]] = (MultiLabelTeacherVotes,)
    options_type: ClassVar[type | None] = MultiLabelOptions

    sigma: float
    queries: int
    min_responders: int
    teacher: TrainingConfig = TrainingConfig()
    student: TrainingConfig = TrainingConfig()
    query_batch_size: int = 1000
    query_selection: str = "auto"
    seed: int = 0
    options: MultiLabelOptions = MultiLabelOptions()
    task: AttributeTask | None = None

    def __post_init__(self) -> None:
        if not self.sigma >= 0:
            raise ConfigError("sigma", f"must be >= 0, got {self.sigma}")
        for name in ("queries", "min_responders", "query_batch_size"):
            value = getattr(self, name)
            if value < 1:
                raise ConfigError(name, f"must be at least 1, got {value}")

    @classmethod
    def from_config(
        cls, config: RunConfig, *, sigma: float, queries: int, min_responders: int
    ) -> MultiLabelPateFL:
        """The method with the run's teacher/student settings, query selection, seed and options."""
        return cls(
            sigma=sigma,
            queries=queries,
            min_responders=min_responders,
            teacher=config.teacher,
            student=config.student,
            query_selection=config.query_selection,
            seed=config.seed,
            options=cls.options_from(config),
        )

    def planned_details(self) -> dict[str, Any]:
        """The teachers' model and epochs as trained (chosen from public metadata where not given)."""
        return {"teacher_model": self.teacher.model, "teacher_epochs": self.teacher.epochs}

    def with_public(self, public: PublicMetadata) -> MultiLabelPateFL:
        """The method knowing the federation's attributes (so τ is capped at A before calibration).

        And the teachers' model and epochs chosen from public metadata if not given (as PATE-FL's).
        """
        return dataclasses.replace(
            self,
            task=AttributeTask.of(public.attribute_names, public.num_classes),
            teacher=teacher_training(self.teacher, public.example_shape, public.agent_records),
        )

    def with_sigma(self, sigma: float) -> MultiLabelPateFL:
        """The same run with noise std ``sigma``."""
        return dataclasses.replace(self, sigma=sigma)

    @property
    def tau(self) -> int:
        """τ as run (:meth:`~fedvote.methods.options.multilabel.MultiLabelOptions.tau_for`).

        Before the attributes are known (:meth:`with_public`), the largest τ the option can
        come to (4 unless given), so planned events never understate.
        """
        if self.task is None:
            return self.options.tau if self.options.tau is not None else DEFAULT_TAU
        return self.options.tau_for(self.task.num_attributes, self.task.encoding)

    def planned_events(self) -> LevelEvents:
        """All Q releases: Gaussian of σ at sensitivity √τ (agent) and √(2τ) (instance)."""
        return multilabel_events(self.sigma, self.queries, self.tau)

    def run(
        self,
        server: ServerData,
        transport: Transport,
        ledger: PrivacyLedger,
        progress: Progress = NO_PROGRESS,
    ) -> MethodOutcome:
        """Train teachers, label Q queries by thresholded τ-clipped noisy votes, train the student."""
        assert isinstance(transport, MultiLabelTeacherVotes)  # check_capabilities refused any other
        task = AttributeTask.of(server.attribute_names, server.num_classes)
        if self.task is not None and self.task != task:
            raise ConfigError("dataset", "the method was planned for another federation's attributes")
        tau = self.options.tau_for(task.num_attributes, task.encoding)
        pool_size = server.public_features.shape[0]
        check_voting_run(self.queries, pool_size, self.min_responders, transport.num_agents)
        transport.train_multilabel_teachers(self.teacher, task, progress)
        chosen = choose_queries(server.public_features, self.queries, self.seed, self.query_selection)  # (Q,)
        noise_std = noise_share_std(self.sigma, self.min_responders)
        released: list[np.ndarray] = []
        labelled: list[np.ndarray] = []
        rounds = charged_rounds(
            chosen,
            batch_size=self.query_batch_size,
            events=lambda count: multilabel_events(self.sigma, count, tau),
            ask=lambda batch: transport.multilabel_vote_sum(batch, tau, noise_std, self.min_responders),
            ledger=ledger,
            progress=progress,
            step="multi-label voting on public queries",
        )
        for batch, result in rounds:
            released.append(batch)
            labelled.append(
                pseudo_targets(result.sums, result.responders, self.options.vote_threshold, task.encoding)
            )
        if not released:
            raise RuntimeError("no query batch reached the minimum number of responders")
        queries = np.concatenate(released)  # (R,)
        targets = np.concatenate(labelled)  # (R, A)
        if task.encoding == "one-hot":
            # One class per query: the single-label student, semi-supervised on the pool as
            # PATE-FL's (post-processing); AttributeHead argmaxes its C logits (one-hot task).
            model = student_from_labels(
                server, queries, task.labels(targets), config=self.student, seed=self.seed,
                self_training_rounds=0, progress=progress,
            )  # fmt: skip
        else:
            with progress.step("training the multi-label student", total=1) as bar:
                generator = torch.Generator().manual_seed(self.seed)
                model = build_model(
                    self.student.model, tuple(server.example_shape), task.num_attributes, generator=generator
                )
                fit_attributes(model, server.public_features[queries], targets, self.student, generator)
                bar.advance()
        return MethodOutcome(
            student=AttributeHead(model, task),
            query_indices=queries,
            pseudo_labels=task.labels(targets),
            details={
                "min_responders": self.min_responders,
                "queries_requested": self.queries,
                "query_selection": resolve_query_selection(self.query_selection, pool_size, self.queries),
                "student_queries": int(queries.shape[0]),
                "student_precision": resolve_precision(self.student.precision, tuple(server.example_shape)),
                "release": "sums",
                "tau": tau,
                "tau_requested": self.options.tau,
                "vote_threshold": self.options.vote_threshold,
                "attributes": list(task.attribute_names),
                "attribute_encoding": task.encoding,
                "pseudo_label_rate": [float(v) for v in targets.mean(axis=0)],
            },
        )
