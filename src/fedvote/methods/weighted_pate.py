"""Reputation-weighted PATE-FL (reputation-weighted-pate.txt, Sec. 3.1, 3.2.1 and 4.1.1).

PATE-FL (Algorithm 1 of the voting paper) in which each agent's one-hot vote is scaled by
a weight w_i ∈ [w_min, w_max] earned on a labelled *public* validation set: one model one
vote (w = 1), accuracy, percentile, z-score or rank (Sec. 4.1.1), mapped into
[w_min, w_max] = [0.1, 3] by default (the paper's footnote 8).

Privacy (``docs/privacy.md``, "Reputation-weighted voting"): every agent computes its own
weight and sends w_i·vote + its noise share, so the server never sees a weight. The
accuracy scheme uses public constants only; the relative schemes first release a noisy
histogram of all agents' accuracies (one Gaussian release, charged) and each agent
derives its percentile / rank / z-score from it locally. The votes then have L2
sensitivity w_max (agent level) and √2·w_max (instance level) — the paper's Sec. 3.1.1
"sensitivity changes from 1 to max-weight" — so at equal ε the noise σ grows with w_max.

``--secure-noise``: each weight is rounded to the public grid W = round(K·w) (K =
``--weight-scale``, default 100), each agent releases the integer vote W·e_y with exact
discrete Gaussian shares N_Z(0, (Kσ)²/t), and the server divides the sum by K; the
accounting is in those integer units, Δ = round(K·w_max) a coordinate
(:func:`~fedvote.privacy.events.weighted_voting_discrete_events`); the accuracy summary's
one-hot bins take discrete noise too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from fedvote.agents.behaviour import assign_behaviours
from fedvote.aggregation.voting import (
    noise_share_std,
    project_histogram,
)
from fedvote.data.federation import ServerData
from fedvote.data.validation import ValidationNeed
from fedvote.errors import ConfigError
from fedvote.methods.base import MethodOutcome
from fedvote.methods.integer_votes import VoteSumFn, on_integer_scale
from fedvote.methods.options.voting import PateFLOptions, WeightedVotingOptions
from fedvote.methods.pate_fl import PateFL
from fedvote.methods.voting import check_voting_run, label_and_teach
from fedvote.privacy.events import (
    LevelEvents,
    accuracy_summary_discrete_events,
    accuracy_summary_events,
    weighted_pate_discrete_events,
    weighted_pate_events,
    weighted_voting_discrete_events,
    weighted_voting_events,
)
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import Transport
from fedvote.transport.capabilities import AgentBehaviours, TeacherVotes, WeightedVotes

if TYPE_CHECKING:
    from fedvote.config import RunConfig


# The default validation set: a fifth of the public pool, at most 500 points (the
# reputation paper's size; on digits' 270-point pool, 54).
DEFAULT_VALIDATION_SHARE = 0.2
DEFAULT_VALIDATION_MOST = 500


@dataclass(frozen=True)
class WeightedPate(PateFL):
    """Reputation-weighted PATE-FL with aggregate vote noise std ``sigma`` over ``queries`` queries.

    Parameters
    ----------
    sigma : float
        Std of the total noise on each weighted vote sum (σ); 0 runs the non-private
        reference (the accuracy summary keeps its own noise).
    queries, min_responders, teacher, student, query_batch_size, self_training_rounds,
    semi_supervised, query_selection, student_min_margin, seed
        As :class:`fedvote.methods.pate_fl.PateFL`.
    options : WeightedVotingOptions
        Scheme, weight range, validation set, accuracy summary and simulated bad teachers.

    """

    name = "weighted-pate"
    requires: ClassVar[tuple[type, ...]] = (TeacherVotes, WeightedVotes)
    options_type = WeightedVotingOptions
    audit_release = "weighted-votes"
    audit_secure_noise = False
    flower_support = False  # FlowerTransport serves no weighted votes

    # PATE-FL's fields and checks, plus the scheme's options.
    options: WeightedVotingOptions = WeightedVotingOptions()

    @classmethod
    def from_config(
        cls, config: RunConfig, *, sigma: float, queries: int, min_responders: int
    ) -> WeightedPate:
        """Weighted PATE-FL with the run's teacher/student settings, seed and options.

        Its votes are released as sums (Algorithm 1, weighted), so its student takes PATE-FL's
        ``--student-targets`` rule (resolved by :meth:`PateFL.with_public`).
        """
        options: WeightedVotingOptions = cls.options_from(config)
        return cls(
            sigma=sigma,
            queries=queries,
            min_responders=min_responders,
            options=options,
            release_options=PateFLOptions(student_targets=options.student_targets),
            teacher=config.teacher,
            student=config.student,
            self_training_rounds=config.self_training_rounds,
            semi_supervised=config.semi_supervised,
            query_selection=config.query_selection,
            seed=config.seed,
            secure_noise=config.privacy.secure_noise,
        )

    @classmethod
    def validation_need(cls, config: RunConfig) -> ValidationNeed | None:
        """The labelled public validation set the scheme scores teachers on (a file, or a pool slice).

        None when the scheme scores nothing (one-vote).
        """
        options: WeightedVotingOptions = cls.options_from(config)
        if not options.needs_validation:
            return None
        if options.validation_file is not None:
            return ValidationNeed(file=options.validation_file)
        if options.validation_size is None:  # chosen from the pool's size, a public quantity
            return ValidationNeed(share=DEFAULT_VALIDATION_SHARE, most=DEFAULT_VALIDATION_MOST)
        if options.validation_size < 1:
            raise ConfigError(
                "validation_size",
                f"the {options.scheme} scheme needs a validation set: give a size >= 1 or a file",
            )
        return ValidationNeed(size=options.validation_size)

    def planned_events(self) -> LevelEvents:
        """The accuracy summary (relative schemes) then ``queries`` weighted votes (s = w_max, √2·w_max).

        ``--secure-noise``: the discrete summary, then the integer votes on the scale K.
        """
        options = self.options
        summary = options.summary_sigma if options.relative else None
        if self.secure_noise:
            return weighted_pate_discrete_events(
                self.sigma,
                self.min_responders,
                self.queries,
                options.vote_max_weight,
                options.weight_scale,
                summary,
            )
        return weighted_pate_events(self.sigma, self.queries, options.vote_max_weight, summary)

    def vote_events(self, count: int) -> LevelEvents:
        """``count`` weighted votes: Gaussian, or (secure) integer votes round(K·w)·e_y, discrete shares."""
        options = self.options
        if self.secure_noise:
            return weighted_voting_discrete_events(
                self.sigma, self.min_responders, count, options.vote_max_weight, options.weight_scale
            )
        return weighted_voting_events(self.sigma, count, options.vote_max_weight)

    def summary_events(self) -> LevelEvents:
        """The accuracy summary's one release: Gaussian, or (secure) discrete shares on its one-hot bins."""
        if self.secure_noise:
            return accuracy_summary_discrete_events(self.options.summary_sigma, self.min_responders)
        return accuracy_summary_events(self.options.summary_sigma)

    def requirements(self) -> tuple[type, ...]:
        """Teacher and weighted votes; with simulated bad teachers (``bad_fraction`` > 0) their behaviours."""
        return (*self.requires, AgentBehaviours) if self.options.bad_fraction > 0 else self.requires

    def run(
        self,
        server: ServerData,
        transport: Transport,
        ledger: PrivacyLedger,
        progress: Progress = NO_PROGRESS,
    ) -> MethodOutcome:
        """Train teachers, weight them on the validation set, label by weighted noisy vote, teach."""
        assert isinstance(transport, TeacherVotes) and isinstance(transport, WeightedVotes)  # checked
        options = self.options
        pool_size = server.public_features.shape[0]
        check_voting_run(self.queries, pool_size, self.min_responders, transport.num_agents)
        validation = server.validation
        if options.needs_validation and validation is None:
            problem = f"the {options.scheme} scheme needs a labelled public validation set"
            raise ConfigError("validation_size", problem)
        if options.bad_fraction > 0:
            assert isinstance(transport, AgentBehaviours)  # required by requirements()
            transport.simulate_behaviours(
                assign_behaviours(
                    transport.num_agents,
                    fraction=options.bad_fraction,
                    kind=options.bad_kind,
                    num_classes=server.num_classes,
                    target_class=options.bad_target_class,
                    seed=self.seed,
                )
            )
        transport.train_teachers(self.teacher, progress)
        histogram = None
        if options.relative:
            assert validation is not None
            charge = ledger.charge(self.summary_events())
            release = transport.accuracy_summary(
                validation,
                options.summary_bins,
                noise_share_std(options.summary_sigma, self.min_responders),
                self.min_responders,
            )
            if release is None:
                ledger.void(charge)
                raise RuntimeError("the accuracy summary did not reach the minimum number of responders")
            histogram = project_histogram(release.sums[0], release.responders)  # (B,), post-processing
        rule = options.weight_rule(histogram, scale=options.weight_scale if self.secure_noise else None)
        transport.assign_weights(validation, rule)
        vote_sum: VoteSumFn = transport.weighted_vote_sum
        if self.secure_noise:  # integer votes round(K·w)·e_y, the sum divided by K
            vote_sum = on_integer_scale(vote_sum, options.weight_scale)
        outcome = label_and_teach(
            self,
            server,
            events=self.vote_events,
            vote_sum=vote_sum,
            ledger=ledger,
            progress=progress,
            student_targets=self.release_options.student_targets,  # "auto" resolved by PateFL.with_public
        )
        details = {
            **outcome.details,
            "scheme": options.scheme,
            "weight_range": [options.min_weight, options.max_weight],
            "validation_size": 0 if validation is None else len(validation),
            "summary_sigma": options.summary_sigma if options.relative else None,
            "accuracy_histogram": None if histogram is None else histogram.round(3).tolist(),
            "bad_fraction": options.bad_fraction,
            "bad_kind": options.bad_kind if options.bad_fraction > 0 else None,
            "weight_scale": options.weight_scale if self.secure_noise else None,
        }
        return dataclasses.replace(outcome, details=details)
