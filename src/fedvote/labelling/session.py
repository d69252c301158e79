"""The labelling protocol: teachers trained once, then each query answered by a charged noisy argmax.

A querying party sends its own unlabelled examples; the federation's teachers vote on
each, every agent adding its share of N(0, σ²), and only the argmax of the noisy sum goes
back. Each answer is one Gaussian release (PATE-FL, Theorem 3: sensitivity 1 at agent
level, √2 at instance level), charged to the ledger *before* it is computed, so ε grows
with every answer; with a budget the session stops before the answer that would exceed it.

:func:`plan_labelling` builds the federation, reads the queries and plans σ (nothing
trained or charged); :func:`answer_queries` opens the ledger, trains the teachers and
answers, telling its caller of each answer as it is given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fedvote.aggregation.voting import noise_share_std, noisy_argmax
from fedvote.config import RunConfig
from fedvote.data.federation import Federation, LabeledData
from fedvote.errors import ConfigError
from fedvote.labelling.queries import check_query_range, load_queries
from fedvote.methods.pate_fl import PateFL
from fedvote.privacy.accountant import epsilon_bound
from fedvote.privacy.config import LEVELS
from fedvote.privacy.events import pate_fl_events
from fedvote.privacy.ledger import PersistentLedger, PrivacyBudgetExceeded, PrivacyLedger
from fedvote.privacy.run_ledger import check_budget, note_charge, open_ledger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.results import finite_or_none
from fedvote.runner import make_federation, plan
from fedvote.transport.capabilities import TeacherVotes, check_capabilities
from fedvote.transport.local import LocalTransport


@dataclasses.dataclass(frozen=True)
class Answer:
    """One query's answer: its noisy-argmax label and the session's cumulative ε after it.

    ``label`` (and both ε) None: not released, fewer than t agents responded (nothing
    charged for it).
    """

    query: int
    label: int | None
    epsilon_agent: float | None
    epsilon_instance: float | None

    def to_dict(self) -> dict[str, Any]:
        """The answer as ``fedvote label --json`` prints it."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Labelling:
    """A labelling session as planned: the federation, the queries in the public pool's place, PATE-FL's σ."""

    config: RunConfig
    federation: Federation  # the agents' records: the ledger's key
    asked: Federation  # the same agents, the queries in the public pool's place (voted on by index)
    method: PateFL

    @property
    def count(self) -> int:
        """How many queries were asked."""
        return len(self.asked.public)

    @property
    def sigma(self) -> float:
        """σ of the noisy sum of each answer's votes."""
        return float(self.method.sigma)

    @property
    def min_responders(self) -> int:
        """t: a query with fewer responders is not released (and not charged)."""
        return int(self.method.min_responders)


@dataclasses.dataclass(frozen=True)
class LabelOutcome:
    """What a session gave: every answer, why it stopped early (if it did), the persisted ledger's state."""

    answers: tuple[Answer, ...]
    stopped: str | None  # the budget's refusal of the next answer; None: every query answered
    ledger: dict[str, Any] | None  # None: an in-memory ledger

    @property
    def released(self) -> list[Answer]:
        """The answers given (those not released left out)."""
        return [answer for answer in self.answers if answer.label is not None]


def plan_labelling(config: RunConfig, queries_file: str | Path) -> Labelling:
    """The federation of ``config``, the queries of ``queries_file`` and σ; nothing trained or charged.

    Refused in one line naming the setting: a method other than PATE-FL (the answers are its
    teachers' votes), ``secure_noise`` (the answers use Gaussian noise), a queries file that is
    unreadable, of another shape or far outside the data's range.
    """
    if config.method != "pate-fl":
        raise ConfigError(
            "method", f"fedvote label answers with the teachers' votes (pate-fl), not {config.method}"
        )
    if config.privacy.secure_noise:
        raise ConfigError("secure_noise", "fedvote label answers with Gaussian noise, not on the secure path")
    federation = make_federation(config)
    queries = load_queries(queries_file, federation.example_shape)  # (Q, *shape)
    check_query_range(queries, federation.public.features, queries_file)
    count = queries.shape[0]
    # The queries take the public pool's place: agents vote on them by index.
    asked = dataclasses.replace(
        federation, public=LabeledData(features=queries, labels=np.full(count, -1, dtype=np.int64))
    )
    method = plan(dataclasses.replace(config, queries=count), asked.public_metadata())
    assert isinstance(method, PateFL)
    return Labelling(config=config, federation=federation, asked=asked, method=method)


def answer_queries(
    labelling: Labelling,
    progress: Progress = NO_PROGRESS,
    on_open: Callable[[], None] | None = None,
    on_answer: Callable[[Answer], None] | None = None,
) -> LabelOutcome:
    """Train the teachers once, then answer each query in order, each answer charged before it is computed.

    The ledger (``config.privacy.ledger``, else in memory) is keyed by the agents' records.
    ``on_open`` is told once the ledger is open, ``on_answer`` of each answer as it is given.
    No teacher is trained when not one answer fits the budget. An error or interrupt after
    the ledger opened carries a note of what was charged (:func:`fedvote.privacy.run_ledger.note_charge`).
    """
    config, method = labelling.config, labelling.method
    privacy = config.privacy
    sigma, min_responders = labelling.sigma, labelling.min_responders
    stopped: str | None = None
    answers: list[Answer] = []
    with open_ledger(config, labelling.federation) as ledger:
        try:
            if on_open is not None:
                on_open()
            transport = LocalTransport(
                labelling.asked,
                seed=config.seed,
                noise_seed=privacy.noise_seed,
                secure_sum=privacy.secure_sum,
            )
            check_capabilities(method, transport)
            try:
                check_budget(ledger, [pate_fl_events(sigma, 1)])  # no training when not one answer fits
            except PrivacyBudgetExceeded as error:
                stopped = error.detail
            if stopped is None:
                transport.train_teachers(method.teacher, progress)
                noise_std = noise_share_std(sigma, min_responders)
                for index in range(labelling.count):
                    try:
                        charge = ledger.charge(pate_fl_events(sigma, 1))  # before anything is computed
                    except PrivacyBudgetExceeded as error:
                        stopped = str(error.detail)
                        break
                    answer = _answer(transport, ledger, charge, index, noise_std, labelling)
                    answers.append(answer)
                    if on_answer is not None:
                        on_answer(answer)
            state = ledger_state(ledger)
        except BaseException as error:  # Ctrl-C or a failure between answers: say what was charged
            note_charge(error, config, ledger)
            raise
    return LabelOutcome(answers=tuple(answers), stopped=stopped, ledger=state)


def _answer(
    transport: TeacherVotes,
    ledger: PrivacyLedger,
    charge: int,
    index: int,
    noise_std: float,
    labelling: Labelling,
) -> Answer:
    """Query ``index``'s answer, its release already charged as ``charge`` (voided if not released)."""
    result = transport.vote_sum(np.array([index]), noise_std, labelling.min_responders)
    if result is None:  # fewer than t responders: nothing released, nothing spent
        ledger.void(charge)
        return Answer(query=index, label=None, epsilon_agent=None, epsilon_instance=None)
    privacy = labelling.config.privacy
    spent = {  # cumulative ε of this session's answers so far
        level: epsilon_bound(ledger.event(level), privacy.delta, privacy.accountant) for level in LEVELS
    }
    return Answer(
        query=index,
        label=int(noisy_argmax(result.sums)[0]),  # result.sums: (1, C)
        epsilon_agent=finite_or_none(spent["agent"]),
        epsilon_instance=finite_or_none(spent["instance"]),
    )


def ledger_state(ledger: PrivacyLedger) -> dict[str, Any] | None:
    """A persisted ledger's federation, its records' spend at both levels and the budget; None in memory."""
    if not isinstance(ledger, PersistentLedger):
        return None
    return {
        "path": str(ledger.path),
        "federation": ledger.federation,
        "spent_agent_epsilon": finite_or_none(ledger.spent("agent")),
        "spent_instance_epsilon": finite_or_none(ledger.spent("instance")),
        "budget_epsilon": ledger.budget_epsilon,
    }
