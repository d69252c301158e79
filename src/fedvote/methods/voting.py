"""What every voting method shares: query choice, charged vote rounds, the student.

PATE-FL and Private-kNN-FL differ only in how an agent votes (a trained teacher's
one-hot label, or the mean label of its k nearest records) and in the sensitivity of
that vote; the rest of Algorithms 1 and 2 is here:

* :func:`check_voting_run` — refuse impossible runs before anything happens;
* :func:`~fedvote.data.query_selection.choose_queries` — the Q public-pool points to label (public);
* :func:`vote_in_batches` — one round per batch: charge the ledger, ask the transport,
  void the charge when too few agents responded; noisy argmax of what was released;
* :func:`student_from_votes` — keep the queries whose noisy margin clears the bar and
  train the student (with self-training on the rest of the public pool), or fit a linear
  student to every released sum (``--student-targets vote-sums``);
* :func:`label_and_teach` — lines 3–9 of both algorithms, from the three above.

All of it after the vote sums is post-processing of released values.

PATE-FL can instead release labels only (``--release labels``): the aggregator runs
Confident-GNMax (Papernot et al. 2018, Algorithm 1) and lets out the pass bits of a noisy
threshold check and the noisy-argmax labels of the queries that pass
(:func:`label_in_batches`, :func:`label_and_teach_confident`); the method never holds a
noisy sum, and the student learns from the answered queries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np
from torch import nn

from fedvote.aggregation.voting import noise_share_std, noisy_argmax, top_two_gap
from fedvote.data.federation import ServerData
from fedvote.data.query_selection import choose_queries, resolve_query_selection
from fedvote.errors import ConfigError
from fedvote.methods.base import MethodOutcome
from fedvote.models.config import MAX_REGRESSION_QUERIES
from fedvote.models.precision import resolve_precision
from fedvote.models.student import train_student
from fedvote.models.training import TrainingConfig
from fedvote.models.vote_regression import vote_regression_student
from fedvote.privacy.events import LevelEvents
from fedvote.privacy.individual_budgets import BudgetPlan, GroupLedger, group_privacy
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import ReleasedLabels, VoteSum

Released = TypeVar("Released")  # what one round of the aggregator lets out (sums or labels)


@dataclass(frozen=True, eq=False)
class ReleasedVotes:
    """The released queries (R,), their noisy-argmax labels (R,), noisy top-two gaps (R,) and sums (R, C)."""

    query_indices: np.ndarray
    pseudo_labels: np.ndarray
    margins: np.ndarray
    sums: np.ndarray


@dataclass(frozen=True, eq=False)
class ConfidentRelease:
    """What Confident-GNMax let out over all rounds: every checked query and its pass bit.

    ``checked`` (K,) query indices in release order; ``answered`` (K,) the released pass
    bits; ``labels`` (A,) the labels of the answered queries, in order; ``responders`` (K,)
    the agents that noised each checked query (the noise actually added is σ·√(r/t)).
    """

    checked: np.ndarray
    answered: np.ndarray
    labels: np.ndarray
    responders: np.ndarray

    @property
    def answered_indices(self) -> np.ndarray:
        """The answered queries' indices into the public pool, (A,)."""
        return self.checked[self.answered]


class IndividualBudgets:
    """What a voting method with ``--agent-budgets`` tells the runner: its calibration target, its weights.

    Shared by the methods that weight each budget group's votes (Individualized PATE's
    weighting): they hold a ``budget_plan`` (None without budgets).
    """

    budget_plan: BudgetPlan | None

    def calibration_target(self, target: float | None) -> float | None:
        """With ``--agent-budgets``, the largest budget (the agent of weight 1 spends it); else ``target``."""
        return target if self.budget_plan is None else self.budget_plan.max_budget

    def group_weights(self) -> tuple[float, ...]:
        """The vote weight of each budget group (one group of weight 1 without budgets)."""
        return (1.0,) if self.budget_plan is None else self.budget_plan.weights


def vote_sum_queries(student_targets: str, pool_size: int) -> int | None:
    """Q for a student fitted to vote sums: the whole pool, :data:`MAX_REGRESSION_QUERIES` at most.

    At a fixed ε, Q/σ² is fixed, so the regression gains coverage of the pool at no loss of
    total signal (:mod:`fedvote.models.vote_regression`). None for label targets: the runner's
    own rule. Public quantities only (``student_targets`` resolved from the example shape).
    """
    if student_targets != "vote-sums":
        return None
    return min(pool_size, MAX_REGRESSION_QUERIES)


def check_voting_run(queries: int, pool_size: int, min_responders: int, num_agents: int) -> None:
    """Refuse more queries than the pool holds, or a threshold t above the number of agents."""
    if queries > pool_size:
        raise ConfigError("queries", f"{queries} queries asked but the public pool holds {pool_size}")
    if min_responders > num_agents:
        raise ConfigError("min_responders", f"t = {min_responders} exceeds the {num_agents} agents")


def charged_rounds(
    chosen: np.ndarray,
    *,
    batch_size: int,
    events: Callable[[int], LevelEvents],
    ask: Callable[[np.ndarray], Released | None],
    ledger: PrivacyLedger,
    progress: Progress,
    step: str,
) -> Iterator[tuple[np.ndarray, Released]]:
    """(batch, what the aggregator released) for each released round of ``chosen``, in order.

    Each round of ``batch_size`` queries is charged to ``ledger`` (``events(batch size)``)
    *before* ``ask(batch)`` runs; a round the transport refuses (``None``: fewer than t
    responders) released nothing and its charge is voided.
    """
    with progress.step(step, total=chosen.shape[0]) as bar:
        for start in range(0, chosen.shape[0], batch_size):
            batch = chosen[start : start + batch_size]
            charge = ledger.charge(events(batch.shape[0]))
            result = ask(batch)
            if result is None:  # fewer than t responders: nothing released, nothing spent
                ledger.void(charge)
            else:
                yield batch, result
            bar.advance(batch.shape[0])


def vote_in_batches(
    chosen: np.ndarray,
    *,
    batch_size: int,
    events: Callable[[int], LevelEvents],
    vote: Callable[[np.ndarray], VoteSum | None],
    ledger: PrivacyLedger,
    progress: Progress = NO_PROGRESS,
) -> ReleasedVotes:
    """Ask for noisy vote sums on ``chosen`` in rounds of ``batch_size`` queries.

    Each round is charged to ``ledger`` (``events(batch size)``) *before* ``vote(batch)``
    runs; a round the transport refuses (``None``: fewer than t responders) released
    nothing and its charge is voided. Raises ``RuntimeError`` when no round was released.
    """
    released: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    margins: list[np.ndarray] = []
    sums: list[np.ndarray] = []
    rounds = charged_rounds(
        chosen, batch_size=batch_size, events=events, ask=vote, ledger=ledger, progress=progress,
        step="voting on public queries",
    )
    for batch, result in rounds:
        released.append(batch)
        labels.append(noisy_argmax(result.sums))  # result.sums: (batch, C)
        margins.append(top_two_gap(result.sums))
        sums.append(result.sums)
    if not released:
        raise RuntimeError("no query batch reached the minimum number of responders")
    return ReleasedVotes(
        query_indices=np.concatenate(released),
        pseudo_labels=np.concatenate(labels),
        margins=np.concatenate(margins),
        sums=np.concatenate(sums),
    )


def student_from_votes(
    server: ServerData,
    votes: ReleasedVotes,
    *,
    sigma: float,
    min_margin: float,
    config: TrainingConfig,
    seed: int,
    self_training_rounds: int,
    semi_supervised: str = "auto",
    targets: str = "labels",
    progress: Progress = NO_PROGRESS,
) -> tuple[nn.Module, int]:
    """Train the student on the released queries; returns it and how many it used.

    ``targets`` "labels": a query is used when its *noisy* top-two gap is at least
    ``min_margin · sigma``, with its noisy-argmax label; the other pool points (the
    unconfident queries included) are the unlabelled set of self-training. "vote-sums": a
    linear student regresses every released query's noisy sums
    (:mod:`fedvote.models.vote_regression`), its class shares on the pool matched to the pool's
    documented prior where there is one (``server.pool_class_prior``).
    """
    if targets == "vote-sums":
        with progress.step("fitting the student to the vote sums", total=1) as bar:
            features = server.public_features[votes.query_indices]  # (R, ...)
            prior = None if server.pool_class_prior is None else np.asarray(server.pool_class_prior)
            student = vote_regression_student(
                features, votes.sums, class_prior=prior, pool_features=server.public_features
            )
            bar.advance()
        return student, int(votes.query_indices.shape[0])
    confident = votes.margins >= min_margin * sigma  # (R,)
    student = student_from_labels(
        server,
        votes.query_indices[confident],
        votes.pseudo_labels[confident],
        config=config,
        seed=seed,
        self_training_rounds=self_training_rounds,
        semi_supervised=semi_supervised,
        progress=progress,
    )
    return student, int(confident.sum())


def student_from_labels(
    server: ServerData,
    query_indices: np.ndarray,
    labels: np.ndarray,
    *,
    config: TrainingConfig,
    seed: int,
    self_training_rounds: int,
    semi_supervised: str = "auto",
    progress: Progress = NO_PROGRESS,
) -> nn.Module:
    """Train the student on ``labels`` (L,) of the pool points ``query_indices`` (L,).

    Every other pool point is the student's unlabelled set (``semi_supervised``:
    :data:`fedvote.models.student.STUDENT_TRAINING`).
    """
    pool_size = server.public_features.shape[0]
    unlabeled = np.setdiff1d(np.arange(pool_size), query_indices)
    return train_student(
        server.public_features[query_indices],
        labels,
        num_classes=server.num_classes,
        config=config,
        seed=seed,
        unlabeled=server.public_features[unlabeled],
        self_training_rounds=self_training_rounds,
        semi_supervised=semi_supervised,
        progress=progress,  # a tick a step for FixMatch and VAT
    )


def label_in_batches(
    chosen: np.ndarray,
    *,
    batch_size: int,
    events: Callable[[int], LevelEvents],
    ask: Callable[[np.ndarray], ReleasedLabels | None],
    ledger: PrivacyLedger,
    progress: Progress = NO_PROGRESS,
) -> ConfidentRelease:
    """Ask the aggregator for Confident-GNMax labels on ``chosen``, in charged rounds.

    As :func:`vote_in_batches`: each round is charged (``events(batch size)``, both the
    check and the argmax for every query) before ``ask(batch)`` runs, and a round the
    transport refuses (``None``) is voided. Only pass bits and labels come back.
    """
    checked: list[np.ndarray] = []
    answered: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    responders: list[np.ndarray] = []
    rounds = charged_rounds(
        chosen, batch_size=batch_size, events=events, ask=ask, ledger=ledger, progress=progress,
        step="labelling public queries (Confident-GNMax)",
    )
    for batch, result in rounds:
        checked.append(batch)
        answered.append(np.asarray(result.answered, dtype=bool))  # (batch,)
        labels.append(np.asarray(result.labels, dtype=np.int64))  # (answered in batch,)
        responders.append(np.full(batch.shape[0], result.responders, dtype=np.int64))
    if not checked:
        raise RuntimeError("no query batch reached the minimum number of responders")
    return ConfidentRelease(
        checked=np.concatenate(checked),
        answered=np.concatenate(answered),
        labels=np.concatenate(labels),
        responders=np.concatenate(responders),
    )


class VotingSettings(Protocol):
    """The settings every voting method carries (PateFL, PrivateKnnFL; read-only)."""

    @property
    def sigma(self) -> float: ...  # noqa: D102

    @property
    def queries(self) -> int: ...  # noqa: D102

    @property
    def min_responders(self) -> int: ...  # noqa: D102

    @property
    def student(self) -> TrainingConfig: ...  # noqa: D102

    @property
    def query_batch_size(self) -> int: ...  # noqa: D102

    @property
    def self_training_rounds(self) -> int: ...  # noqa: D102

    @property
    def semi_supervised(self) -> str: ...  # noqa: D102

    @property
    def query_selection(self) -> str: ...  # noqa: D102

    @property
    def student_min_margin(self) -> float: ...  # noqa: D102

    @property
    def seed(self) -> int: ...  # noqa: D102


def check_voting_settings(settings: VotingSettings) -> None:
    """Refuse a negative σ, or a query count, threshold t or batch size below 1 (by name)."""
    if settings.sigma < 0:
        raise ConfigError("sigma", f"must be >= 0, got {settings.sigma}")
    for name in ("queries", "min_responders", "query_batch_size"):
        value = getattr(settings, name)
        if value < 1:
            raise ConfigError(name, f"must be at least 1, got {value}")


def label_and_teach(
    settings: VotingSettings,
    server: ServerData,
    *,
    events: Callable[[int], LevelEvents],
    vote_sum: Callable[[np.ndarray, float, int], VoteSum | None],
    ledger: PrivacyLedger,
    progress: Progress = NO_PROGRESS,
    vote_scale: float = 1.0,
    student_targets: str = "labels",
) -> MethodOutcome:
    """Lines 3–9 of Algorithms 1 and 2: choose queries, vote in charged rounds, train the student.

    ``vote_sum(batch, noise_std, min_responders)`` is the transport's vote for the
    method (one-hot teacher votes or kNN votes); each agent adds N(0, σ²/t).
    ``vote_scale`` multiplies the released sums (post-processing): 1/q under
    ``--vote-sampling`` q makes them unbiased for the full sums; the noise then has std
    σ·``vote_scale``, which the student's margin bar follows.
    """
    chosen = choose_queries(
        server.public_features, settings.queries, settings.seed, settings.query_selection
    )  # (Q,)
    noise_std = noise_share_std(settings.sigma, settings.min_responders)
    votes = vote_in_batches(
        chosen,
        batch_size=settings.query_batch_size,
        events=events,
        vote=lambda batch: scaled(vote_sum(batch, noise_std, settings.min_responders), vote_scale),
        ledger=ledger,
        progress=progress,
    )
    student, used = student_from_votes(
        server,
        votes,
        sigma=settings.sigma * vote_scale,
        min_margin=settings.student_min_margin,
        config=settings.student,
        seed=settings.seed,
        self_training_rounds=settings.self_training_rounds,
        semi_supervised=settings.semi_supervised,
        targets=student_targets,
        progress=progress,
    )
    details = voting_details(settings, server=server, student_queries=used, release="sums")
    if student_targets == "vote-sums":  # the prior its predictions on the pool were matched to
        prior = server.pool_class_prior
        details["student_class_prior"] = None if prior is None else list(prior)
    return MethodOutcome(
        student=student,
        query_indices=votes.query_indices,
        pseudo_labels=votes.pseudo_labels,
        details=details,
    )


def label_and_teach_individual(
    settings: VotingSettings,
    server: ServerData,
    *,
    events: Callable[[int], LevelEvents],
    vote_sum: Callable[[np.ndarray, float, int], VoteSum | None],
    ledger: PrivacyLedger,
    plan: BudgetPlan | None,
    sampling_rate: float,
    delta: float,
    accountant: str,
    progress: Progress = NO_PROGRESS,
    student_targets: str = "labels",
) -> MethodOutcome:
    """:func:`label_and_teach` with budget weights and/or subsampled votes (issue 45).

    ``vote_sum`` is the transport's individual vote (weights and rate already bound); its
    sums are scaled by 1/q (unbiased for the full weighted sums). With a budget ``plan`` each
    round's :class:`~fedvote.privacy.individual_budgets.IndividualRelease` is charged to a
    :class:`~fedvote.privacy.individual_budgets.GroupLedger` over ``ledger``, and each
    group's ε (``delta``, ``accountant``) goes into the outcome's ``agent_groups``.
    """
    charged = ledger if plan is None else GroupLedger(ledger, len(plan.levels))
    outcome = label_and_teach(
        settings, server, events=events, vote_sum=vote_sum, ledger=charged, progress=progress,
        vote_scale=1.0 / sampling_rate, student_targets=student_targets,
    )
    details: dict[str, object] = {**outcome.details, "vote_sampling": sampling_rate}
    if plan is None:
        return dataclasses.replace(outcome, details=details)
    assert isinstance(charged, GroupLedger)
    details["agent_budgets"] = {
        "weights": dict(zip((f"{b:g}" for b in plan.levels), plan.weights, strict=True)),
        "unit_sigmas": dict(zip((f"{b:g}" for b in plan.levels), plan.unit_sigmas, strict=True)),
    }
    groups = group_privacy(charged, plan, delta, accountant)
    return dataclasses.replace(outcome, details=details, agent_groups=groups)


def scaled(result: VoteSum | None, scale: float) -> VoteSum | None:
    """``result`` with its sums multiplied by ``scale`` (post-processing of a released sum)."""
    if result is None or scale == 1.0:
        return result
    return VoteSum(sums=result.sums * scale, responders=result.responders)


def voting_details(
    settings: VotingSettings, *, server: ServerData, student_queries: int, release: str
) -> dict[str, object]:
    """The result keys every voting run records: t, Q asked and how, queries the student used, the release.

    ``student_precision`` is the arithmetic the student trained in, ``"auto"`` resolved on this machine.
    """
    pool_size = server.public_features.shape[0]
    return {
        "min_responders": settings.min_responders,
        "queries_requested": settings.queries,
        "query_selection": resolve_query_selection(settings.query_selection, pool_size, settings.queries),
        "student_queries": student_queries,
        "student_precision": resolve_precision(settings.student.precision, tuple(server.example_shape)),
        "release": release,
    }


def label_and_teach_confident(
    settings: VotingSettings,
    server: ServerData,
    *,
    threshold: float,
    threshold_sigma: float,
    events: Callable[[int], LevelEvents],
    confident_labels: Callable[..., ReleasedLabels | None],
    ledger: PrivacyLedger,
    progress: Progress = NO_PROGRESS,
) -> MethodOutcome:
    """Label-release PATE-FL: choose queries, Confident-GNMax in charged rounds, train the student.

    ``confident_labels`` is the transport's
    (:meth:`~fedvote.transport.capabilities.LabelRelease.confident_labels`); each agent
    adds N(0, σ₁²/t) to the check's copy and N(0, σ²/t) to the argmax's. The student
    learns from the answered queries (the check is the confidence filter); the outcome's
    ``details`` record the released pass bits, which the data-dependent analysis reads
    (:func:`fedvote.analysis.with_data_dependent_epsilon`), and the counts
    ``queries_checked`` (pass bits) and ``queries_answered`` (labels).
    """
    chosen = choose_queries(
        server.public_features, settings.queries, settings.seed, settings.query_selection
    )  # (Q,)
    release = label_in_batches(
        chosen,
        batch_size=settings.query_batch_size,
        events=events,
        ask=lambda batch: confident_labels(
            batch,
            threshold=threshold,
            threshold_noise_std=noise_share_std(threshold_sigma, settings.min_responders),
            noise_std=noise_share_std(settings.sigma, settings.min_responders),
            min_responders=settings.min_responders,
        ),
        ledger=ledger,
        progress=progress,
    )
    student = student_from_labels(
        server,
        release.answered_indices,
        release.labels,
        config=settings.student,
        seed=settings.seed,
        self_training_rounds=settings.self_training_rounds,
        semi_supervised=settings.semi_supervised,
        progress=progress,
    )
    return MethodOutcome(
        student=student,
        query_indices=release.answered_indices,
        pseudo_labels=release.labels,
        details={
            **voting_details(
                settings,
                server=server,
                student_queries=int(release.answered.sum()),
                release="labels",
            ),
            # What each count counts (result.json's ``queries`` is the labels released):
            "queries_checked": int(release.checked.shape[0]),  # pass bits released and charged
            "queries_answered": int(release.answered.sum()),  # labels released
            "confident_gnmax": confident_details(release, threshold, threshold_sigma, settings.sigma),
        },
    )


def confident_details(
    release: ConfidentRelease, threshold: float, threshold_sigma: float, sigma: float
) -> dict[str, object]:
    """result.json's record of a Confident-GNMax run: its settings and every released pass bit."""
    return {
        "threshold": float(threshold),
        "threshold_sigma": float(threshold_sigma),
        "sigma": float(sigma),
        "queries_checked": int(release.checked.shape[0]),
        "queries_answered": int(release.answered.sum()),
        "checked_query_indices": release.checked.tolist(),
        "answered": release.answered.tolist(),
        "responders": release.responders.tolist(),
    }
