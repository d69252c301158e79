"""PATE-FL: Algorithm 1 of the voting paper (../shared/papers/voting-based-dpfl.txt).

Each agent trains a teacher on its own data; for each query x_t from the public pool
every agent releases its one-hot vote plus N(0, σ²/t); the argmax of the sum is the
pseudo-label; a student is trained on the pseudo-labelled queries.

``--release labels`` runs the same teachers through Confident-GNMax (Papernot et al.
2018, *Scalable private learning with PATE*, Algorithm 1) instead: the aggregator checks
max_j(n_j + N(0, σ₁²)) ≥ T on one noisy copy of the sums and, for the queries that pass,
releases the argmax of a second copy with N(0, σ²); only those labels and the pass bits
leave it. Accounting charges both Gaussians on every query (data-independent) and the
release of the data-dependent figure by smooth sensitivity (Papernot et al. 2018, §4;
:mod:`fedvote.privacy.smooth_sensitivity`), which is published in its place
(``docs/privacy.md``, "Confident-GNMax (label release)"). With
``--no-data-dependent-release`` that release is neither planned nor charged: the
queries alone are charged (PLD accountant) and no data-dependent ε is published.

``--agent-budgets`` (issue 45; Individualized PATE's weighting, Boenisch et al. 2023)
gives each agent its own agent-level ε: its vote counts with a public weight w_i calibrated
so that its group spends at most its budget (:mod:`fedvote.privacy.individual_budgets`);
``--vote-sampling q`` lets each agent's vote enter each query's sum with probability q
(its own coin; Private-kNN's subsampling, Zhu et al. 2020), accounted as Poisson-subsampled
Gaussians (:mod:`fedvote.privacy.subsampled_votes`). ``docs/privacy.md``, "Individual
budgets and subsampled voting".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fedvote.data.federation import PublicMetadata, ServerData
from fedvote.errors import ConfigError
from fedvote.methods.base import Method, MethodOutcome
from fedvote.methods.options.voting import PateFLOptions
from fedvote.methods.voting import (
    IndividualBudgets,
    check_voting_run,
    check_voting_settings,
    label_and_teach,
    label_and_teach_confident,
    label_and_teach_individual,
    vote_sum_queries,
)
from fedvote.models.config import resolve_student_targets, teacher_training
from fedvote.models.training import TrainingConfig
from fedvote.privacy.calibrate import calibrate_sigma
from fedvote.privacy.events import (
    PATE_FL_AGENT_SENSITIVITY,
    PATE_FL_INSTANCE_SENSITIVITY,
    LevelEvents,
    confident_gnmax_events,
    pate_fl_discrete_events,
    pate_fl_events,
)
from fedvote.privacy.individual_budgets import (
    BudgetPlan,
    IndividualRelease,
    check_group_budgets,
    individual_release,
    plan_budget_spec,
    refuse_fixed_noise_with_budgets,
)
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.privacy.smooth_sensitivity import ReleasePlan, plan_release, release_events, with_release
from fedvote.privacy.subsampled_votes import individual_vote_events
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import Transport
from fedvote.transport.capabilities import (
    DomainAdaptedTeachers,
    IndividualTeacherVotes,
    LabelRelease,
    TeacherVotes,
)

if TYPE_CHECKING:
    from fedvote.config import RunConfig


# Defaults of Confident-GNMax when --threshold / --threshold-sigma are not given. The
# paper (Table 2) uses T ≈ 0.7-0.8·N and σ₁ ≈ 4-5·σ₂ for 250+ accurate teachers; fedvote's
# federations have fewer, weaker teachers, so a lower bar and a noisier-but-not-dominant
# check (it is charged on every query) keep most queries answered.
DEFAULT_THRESHOLD_FRACTION = 0.6  # T = 0.6·N votes
DEFAULT_THRESHOLD_SIGMA_RATIO = 2.0  # σ₁ = 2·σ


@dataclass(frozen=True)
class PateFL(IndividualBudgets, Method):
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
    semi_supervised : str
        How the student learns from the rest of the pool
        (:data:`fedvote.models.student.STUDENT_TRAINING`; ``"auto"``: FixMatch for images of
        at least 16x16, else VAT).
    query_selection : str
        Which pool points are queried (:data:`fedvote.data.query_selection.QUERY_SELECTIONS`;
        ``"auto"``: TypiClust's most typical point per k-means cluster when the pool holds at
        least 10 points per query, else random; public, costs no ε).
    student_min_margin : float
        The student learns only from queries whose *noisy* top-two gap is at least this
        many σ (post-processing of the released sums; the rest join the unlabelled pool).
    seed : int
        Seeds the choice of queries and the student's training.
    delta : float
        The run's δ; with label release it fixes the order λ at which the data-dependent
        figure is released by smooth sensitivity (:meth:`release_plans`, public).
    release_options : PateFLOptions
        Sums (default) or labels only (Confident-GNMax: ``--threshold``, ``--threshold-sigma``,
        ``--no-data-dependent-release``);
        ``--teacher-da dann``: teachers trained by DANN against the public pool (PATE-FL+DA);
        ``--agent-budgets`` and ``--vote-sampling`` (issue 45).
    accountant : str
        The run's accountant: calibrates the budget groups' weights and states their ε.
    budget_plan : BudgetPlan or None
        ``--agent-budgets``: each agent's budget and each group's vote weight, planned from
        public metadata in :meth:`with_public`; None without budgets.

    """

    name = "pate-fl"
    requires: ClassVar[tuple[type, ...]] = (TeacherVotes,)
    votes_with_unit_mass: ClassVar[bool] = True
    options_type: ClassVar[type | None] = PateFLOptions
    audit_release = "teacher-votes"
    audit_secure_noise = True
    flower_support = True

    sigma: float
    queries: int
    min_responders: int
    teacher: TrainingConfig = TrainingConfig()
    student: TrainingConfig = TrainingConfig()
    query_batch_size: int = 1000
    self_training_rounds: int = 2
    semi_supervised: str = "auto"
    query_selection: str = "auto"
    student_min_margin: float = 0.5
    seed: int = 0
    delta: float = 1e-3
    release_options: PateFLOptions = PateFLOptions()
    secure_noise: bool = False
    accountant: str = "pld"
    budget_plan: BudgetPlan | None = None

    def __post_init__(self) -> None:
        check_voting_settings(self)
        if self.release_options.individual and self.secure_noise:
            flag = "agent_budgets" if self.release_options.agent_budgets is not None else "vote_sampling"
            raise ConfigError(flag, "needs real-valued weighted votes: drop --secure-noise")
        if self.release_options.teacher_da == "dann":
            from fedvote.models.dann import check_dann_training

            check_dann_training(self.teacher)

    @classmethod
    def from_config(
        cls, config: RunConfig, *, sigma: float, queries: int, min_responders: int
    ) -> PateFL:
        """PATE-FL with the run's teacher/student settings and seed.

        ``--agent-budgets`` fixes σ from the largest budget: an explicit ``--epsilon`` or
        ``--sigma``, or an instance-level calibration, is refused by name.
        """
        options: PateFLOptions = cls.options_from(config)
        if options.agent_budgets is not None:
            refuse_fixed_noise_with_budgets(config.privacy)
        return cls(
            sigma=sigma,
            queries=queries,
            min_responders=min_responders,
            teacher=config.teacher,
            student=config.student,
            self_training_rounds=config.self_training_rounds,
            semi_supervised=config.semi_supervised,
            query_selection=config.query_selection,
            seed=config.seed,
            delta=config.privacy.delta,
            release_options=options,
            secure_noise=config.privacy.secure_noise,
            accountant=config.privacy.accountant,
        )

    @property
    def threshold_sigma(self) -> float:
        """σ₁, the std of the threshold check's noise (label release): given, or 2σ."""
        given = self.release_options.threshold_sigma
        return DEFAULT_THRESHOLD_SIGMA_RATIO * self.sigma if given is None else given

    def threshold_for(self, num_agents: int) -> float:
        """T in votes (label release): given, or 0.6·N."""
        given = self.release_options.threshold
        return DEFAULT_THRESHOLD_FRACTION * num_agents if given is None else given

    def planned_details(self) -> dict[str, Any]:
        """The teachers' model and epochs and the student's targets as run (public choices)."""
        return {
            "teacher_model": self.teacher.model,
            "teacher_epochs": self.teacher.epochs,
            "student_targets": self.release_options.student_targets,
        }

    def default_queries(self, pool_size: int) -> int | None:
        """Vote-sum targets: the whole pool (:func:`~fedvote.methods.voting.vote_sum_queries`); else None."""
        return vote_sum_queries(self.release_options.student_targets, pool_size)

    def with_public(self, public: PublicMetadata) -> PateFL:
        """Teachers' model and epochs and the student's targets chosen from public metadata if not given.

        :func:`~fedvote.models.config.teacher_training`: public metadata only, so it costs no ε.
        """
        options = self.release_options
        # Confident-GNMax releases no sums: its student learns from the answered labels.
        targets = (
            "labels"
            if options.labels_only
            else resolve_student_targets(options.student_targets, public.example_shape)
        )
        method = dataclasses.replace(
            self,
            teacher=teacher_training(self.teacher, public.example_shape, public.agent_records),
            release_options=dataclasses.replace(options, student_targets=targets),
        )
        spec = self.release_options.agent_budgets
        if spec is None:
            return method
        plan = plan_budget_spec(spec, public.num_agents, self.seed, self.unit_sigma)
        return dataclasses.replace(method, budget_plan=plan)

    def unit_sigma(self, budget: float) -> float:
        """σ_b: the smallest noise at which an agent of weight 1 spends at most ``budget`` (agent level).

        Over this run's ``queries`` vote sums at its sampling rate, by its accountant and δ
        (:func:`~fedvote.privacy.calibrate.calibrate_sigma`, which never overshoots).
        """
        rate = self.release_options.sampling_rate
        return calibrate_sigma(
            lambda sigma: individual_vote_events(sigma, self.queries, sampling_rate=rate).agent,
            budget,
            self.delta,
            self.accountant,
        )

    def with_sigma(self, sigma: float) -> PateFL:
        """The same run with noise std ``sigma``."""
        return dataclasses.replace(self, sigma=sigma)

    def planned_events(self) -> LevelEvents:
        """All ``queries`` releases: Gaussian, s = 1 (agent) and √2 (instance); Theorem 3.

        With label release, each query is charged for the threshold check (σ₁) and the
        argmax (σ): :func:`~fedvote.privacy.events.confident_gnmax_events`, and the run once
        for publishing its data-dependent ε by smooth sensitivity (:meth:`release_charge`),
        unless ``--no-data-dependent-release`` (then the queries' events alone).
        """
        if self.release_options.releases_data_dependent:
            return with_release(self.events(self.queries), self.release_charge())
        return self.events(self.queries)

    def release_plans(self) -> dict[str, ReleasePlan]:
        """λ, β, σ_SS of the smooth-sensitivity release at each level (label release; public values only)."""
        return {
            level: plan_release(
                sigma=self.sigma, threshold_sigma=self.threshold_sigma, queries=self.queries,
                delta=self.delta, sensitivity=sensitivity,
            )
            for level, sensitivity in (
                ("agent", PATE_FL_AGENT_SENSITIVITY),
                ("instance", PATE_FL_INSTANCE_SENSITIVITY),
            )
        }

    def release_charge(self) -> LevelEvents:
        """The charge of publishing both levels' data-dependent ε.

        :func:`~fedvote.privacy.smooth_sensitivity.release_events` of :meth:`release_plans`.
        """
        plans = self.release_plans()
        return release_events(plans["agent"], plans["instance"])

    def events(self, count: int) -> LevelEvents:
        """The events of ``count`` queries as this run releases them (sums, or check + argmax)."""
        if self.release_options.labels_only:
            return confident_gnmax_events(self.sigma, self.threshold_sigma, count)
        return self.sum_events(count)

    def sum_events(self, count: int) -> LevelEvents:
        """``count`` vote sums: Gaussian (Theorem 3), or with secure noise t discrete Gaussian shares.

        ``--secure-noise``: integer sums with N_Z(0, σ²/t) from each of t agents,
        :func:`~fedvote.privacy.events.pate_fl_discrete_events` (CKS20 for t = 1, KLS21 else).
        """
        if self.secure_noise:
            return pate_fl_discrete_events(self.sigma, self.min_responders, count)
        if self.release_options.individual:
            return self.individual_events(count)
        return pate_fl_events(self.sigma, count)

    def individual_events(self, count: int) -> IndividualRelease:
        """``count`` weighted, subsampled vote sums: as the agent of largest weight sees them, and each group.

        :func:`~fedvote.privacy.subsampled_votes.individual_vote_events` at each group's
        weight; the ledger is charged with the largest weight's (the headline ε is the
        maximum over agents).
        """
        rate = self.release_options.sampling_rate
        weights = self.group_weights()
        sampled_instance = self.accountant == "pld"  # the only one with the sampled replace-one pair
        groups = [
            individual_vote_events(
                self.sigma, count, weight=w, sampling_rate=rate, sampled_instance=sampled_instance
            )
            for w in weights
        ]
        return individual_release(groups, weights)

    def requirements(self) -> tuple[type, ...]:
        """Teacher votes; with ``--release labels`` an aggregator that lets out labels only; DANN teachers."""
        needs = (*self.requires, LabelRelease) if self.release_options.labels_only else self.requires
        if self.release_options.individual:
            needs = (*needs, IndividualTeacherVotes)
        return (*needs, DomainAdaptedTeachers) if self.release_options.teacher_da == "dann" else needs

    def run(
        self,
        server: ServerData,
        transport: Transport,
        ledger: PrivacyLedger,
        progress: Progress = NO_PROGRESS,
    ) -> MethodOutcome:
        """Train teachers, label ``queries`` public points by noisy vote, train the student."""
        assert isinstance(transport, TeacherVotes)  # check_capabilities refused any other
        pool_size = server.public_features.shape[0]
        check_voting_run(self.queries, pool_size, self.min_responders, transport.num_agents)
        if self.release_options.teacher_da == "dann":  # PATE-FL+DA (voting paper, Sec. 5.1)
            from fedvote.models.dann import DannConfig

            assert isinstance(transport, DomainAdaptedTeachers)  # required by requirements()
            transport.train_adapted_teachers(
                self.teacher, DannConfig(domain_weight=self.release_options.da_weight), progress
            )
        else:
            transport.train_teachers(self.teacher, progress)
        if self.release_options.labels_only:
            assert isinstance(transport, LabelRelease)  # required by requirements()
            outcome = label_and_teach_confident(
                self,
                server,
                threshold=self.threshold_for(transport.num_agents),
                threshold_sigma=self.threshold_sigma,
                events=self.events,
                confident_labels=transport.confident_labels,
                ledger=ledger,
                progress=progress,
            )
            record = dict(outcome.details["confident_gnmax"])
            record["data_dependent_release"] = self.release_options.releases_data_dependent
            if self.release_options.releases_data_dependent:
                # The data-dependent ε is published (by the analysis) only through smooth
                # sensitivity; its release is charged here, before it happens.
                ledger.charge(self.release_charge())
                plans = self.release_plans()
                record["smooth_sensitivity"] = {level: plan.to_dict() for level, plan in plans.items()}
            # Without it no plan is recorded, so the analysis publishes no data-dependent ε
            # (the clean figure stays a simulation diagnostic).
            return dataclasses.replace(outcome, details={**outcome.details, "confident_gnmax": record})
        if self.release_options.individual:
            return self.individual_run(server, transport, ledger, progress)
        return label_and_teach(
            self,
            server,
            events=self.sum_events,
            vote_sum=transport.vote_sum,
            ledger=ledger,
            progress=progress,
            student_targets=self.release_options.student_targets,
        )

    def individual_run(
        self, server: ServerData, transport: Transport, ledger: PrivacyLedger, progress: Progress
    ) -> MethodOutcome:
        """Vote with budget weights and/or subsampling (issue 45); each group's ε into the outcome.

        Refused before anything is charged when a group's planned ε would exceed its budget
        at this σ (:func:`~fedvote.privacy.individual_budgets.check_group_budgets`).
        """
        assert isinstance(transport, IndividualTeacherVotes)  # required by requirements()
        plan = self.budget_plan
        if plan is not None:
            if len(plan.budgets) != transport.num_agents:
                raise ConfigError(
                    "agent_budgets", f"{len(plan.budgets)} budgets for {transport.num_agents} agents"
                )
            planned = self.individual_events(self.queries).groups
            check_group_budgets(plan, planned, self.delta, self.accountant, self.sigma)
        weights = np.ones(transport.num_agents) if plan is None else plan.agent_weights()  # (N,)
        rate = self.release_options.sampling_rate
        return label_and_teach_individual(
            self,
            server,
            events=self.sum_events,
            vote_sum=lambda batch, std, t: transport.individual_vote_sum(
                batch, std, t, weights=weights, sampling_rate=rate
            ),
            ledger=ledger,
            plan=plan,
            sampling_rate=rate,
            delta=self.delta,
            accountant=self.accountant,
            progress=progress,
            student_targets=self.release_options.student_targets,
        )
