"""Private-kNN-FL: Algorithm 2 of the voting paper (../shared/papers/voting-based-dpfl.txt).

The server fits a public feature extractor φ on its public pool (never on private data)
and ships it to the agents. For each query x_t, agent i finds the k_i nearest of its own
records to x_t in φ-space and releases the mean of their one-hot labels (a vector that
sums to 1) plus N(0, σ²/t); the argmax of the sum is the pseudo-label, and a student is
trained on the pseudo-labelled queries as in PATE-FL.

Privacy (Theorem 3; ``docs/privacy.md``)
----------------------------------------
* agent level (zero-out): the vote is a probability vector, sensitivity 1 — exactly
  PATE-FL's agent-level guarantee.
* instance level (replace-one record): one record changes at most one of agent i's k_i
  neighbours, moving weight 1/k_i between two classes: L2 sensitivity √2/k_i (``"tight"``);
  the paper states the looser √(2/k_i) (``"paper"``). When k is a fraction of each
  agent's data, the k_i differ; an agent's record count is public metadata and does not
  change under replace-one, so the release's sensitivity is max_i √2/k_i = √2/k_min.
  Accounting therefore uses the *smallest* k any agent uses. A fixed k divides by k
  even for an agent with fewer records (its vote then sums to n_i/k < 1), so k_min = k.
  ``privacy.instance.epsilon_paper_bound`` reports the paper's figure (√(2/k_min)) for the
  same releases beside the tight one (equal at k_min = 1).
* ``--secure-noise``: each agent releases the integer counts of its neighbours' labels
  with exact discrete Gaussian shares on the count scale K = k_max (the run's largest k,
  public); the server divides the sum by K. Accounted in counts
  (:func:`~fedvote.privacy.events.private_knn_fl_discrete_events`): agent level Δ₂ = K
  (ratio 1/σ), instance level two coordinates by 1 (ratio √2/(Kσ) ≤ √2/(k_min σ)).
* ``--agent-budgets`` / ``--vote-sampling`` (issue 45): as for PATE-FL (weights from the
  budgets, each agent's own coins), with the instance level at w·√2/k_min and no sampling
  credit (:func:`~fedvote.privacy.subsampled_votes.individual_knn_events`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from torch import nn

from fedvote.aggregation.voting import resolve_k
from fedvote.data.federation import PublicMetadata, ServerData
from fedvote.errors import ConfigError
from fedvote.methods.base import Method, MethodOutcome
from fedvote.methods.integer_votes import VoteSumFn, on_integer_scale
from fedvote.methods.options.voting import IndividualVoteSettings, KnnOptions, check_student_targets
from fedvote.methods.voting import (
    IndividualBudgets,
    check_voting_run,
    check_voting_settings,
    label_and_teach,
    label_and_teach_individual,
    vote_sum_queries,
)
from fedvote.models.config import COLOUR_PHOTO_DATASETS, resolve_student_targets
from fedvote.models.features import (
    FEATURE_KINDS,
    FeatureExtractor,
    check_extractor_input,
    fit_feature_extractor,
)
from fedvote.models.training import TrainingConfig
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.calibrate import calibrate_sigma
from fedvote.privacy.events import (
    KNN_BOUNDS,
    LevelEvents,
    gaussian_release_event,
    private_knn_fl_discrete_events,
    private_knn_fl_events,
    private_knn_fl_sensitivity,
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
from fedvote.privacy.subsampled_votes import individual_knn_events
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.results import PrivacyStatement
from fedvote.transport.base import Transport
from fedvote.transport.capabilities import IndividualKnnVotes, KnnVotes

if TYPE_CHECKING:
    from fedvote.config import RunConfig


# The name of the statement that gives the instance ε at the paper's sensitivity √(2/k_min).
PAPER_STATEMENT = "paper's instance sensitivity √(2/k_min)"


@dataclass(frozen=True)
class PrivateKnnFL(IndividualBudgets, IndividualVoteSettings, Method):
    """Private-kNN-FL with aggregate noise std ``sigma`` over ``queries`` public queries.

    Parameters
    ----------
    sigma : float
        Std of the total noise on each vote sum (σ); 0 runs the non-private reference.
    queries : int
        Number of public-pool queries Q to label.
    min_responders : int
        t, the minimum number of honest responders; each agent adds N(0, σ²/t). A query
        batch with fewer responders is neither released nor charged.
    k : int or None
        Neighbours per agent; None: ``round(k_fraction · n_i)`` (at least 1) for agent i.
    k_fraction : float
        Fraction of each agent's records used as k when ``k`` is None (paper: 5 %).
    features : str
        The public feature extractor φ (:data:`fedvote.models.features.FEATURE_KINDS`).
    feature_dim : int
        Output dimension of φ for ``pca``, ``random``, ``autoencoder`` and ``contrastive``.
    feature_module : torch.nn.Module or path or None
        The extractor (or its TorchScript file) for ``features="module"``.
    normalize : bool
        Scale φ's outputs to unit L2 norm.
    bound : str
        Instance-level sensitivity used for accounting: ``"tight"`` (√2/k_min, default)
        or ``"paper"`` (√(2/k_min), Theorem 3 as stated).
    feature_cache : bool
        Keep a learned φ (``autoencoder``, ``contrastive``) in the extractor disk cache
        (``$FEDVOTE_CACHE``, else ``~/.cache/fedvote/extractors``) and reuse it for the same
        public pool and settings (default True). Not a CLI flag.
    agent_records : tuple of int or None
        Each agent's record count, when known before the run (public metadata). Only
        :meth:`planned_events` uses it, to plan the instance level with a fractional k;
        without it a fractional k is planned with k_min = 1 (an upper bound on ε). The run
        itself charges the k_min the agents report.
    student : TrainingConfig
        How the student is trained.
    query_batch_size, self_training_rounds, semi_supervised, query_selection, student_min_margin, seed
        As in :class:`fedvote.methods.pate_fl.PateFL`.
    student_targets : str
        ``"labels"``, ``"vote-sums"`` (a linear student fitted to every released sum:
        post-processing) or ``"auto"`` (resolved from the example shape by :meth:`with_public`,
        as PATE-FL's ``--student-targets``).

    """

    name = "private-knn-fl"
    requires: ClassVar[tuple[type, ...]] = (KnnVotes,)
    votes_with_unit_mass: ClassVar[bool] = True
    options_type: ClassVar[type | None] = KnnOptions
    # Its own PCA sees the pixels but on colour photos (models.config.COLOUR_PHOTO_DATASETS).
    auto_patch_datasets: ClassVar[tuple[str, ...]] = COLOUR_PHOTO_DATASETS
    audit_release = "knn-votes"
    flower_support = True
    flower_secure_noise_refusal = (
        "kNN neighbour counts exceed the SecAgg+ integer clip set for one-hot votes; pass --no-secure-noise"
    )
    agent_models = "kNN classifier"

    sigma: float
    queries: int
    min_responders: int
    k: int | None = None
    k_fraction: float = 0.05
    features: str = "pca"
    feature_dim: int = 50
    feature_module: nn.Module | str | Path | None = None
    normalize: bool = False
    bound: str = "tight"
    feature_cache: bool = True
    agent_records: tuple[int, ...] | None = None
    student: TrainingConfig = TrainingConfig()
    query_batch_size: int = 1000
    self_training_rounds: int = 2
    semi_supervised: str = "auto"
    query_selection: str = "auto"
    student_min_margin: float = 0.5
    seed: int = 0
    delta: float = 1e-5
    accountant: str = "pld"
    secure_noise: bool = False
    agent_budgets: str | None = None
    vote_sampling: float | None = None
    budget_plan: BudgetPlan | None = None
    student_targets: str = "auto"

    def __post_init__(self) -> None:
        check_voting_settings(self)
        if self.individual and self.secure_noise:
            flag = "agent_budgets" if self.agent_budgets is not None else "vote_sampling"
            raise ConfigError(flag, "needs real-valued weighted votes: drop --secure-noise")
        resolve_k(1, self.k, self.k_fraction)  # validates k and k_fraction
        if self.features not in FEATURE_KINDS:
            raise ConfigError(
                "features",
                f"unknown feature extractor {self.features!r}; choose from {', '.join(FEATURE_KINDS)}",
            )
        if (
            isinstance(self.feature_dim, bool)
            or not isinstance(self.feature_dim, int)
            or self.feature_dim < 1
        ):
            raise ConfigError("feature_dim", f"must be an integer >= 1, got {self.feature_dim!r}")
        if self.bound not in KNN_BOUNDS:
            raise ConfigError("bound", f"must be one of {', '.join(KNN_BOUNDS)}, got {self.bound!r}")
        if self.agent_records is not None and any(n < 0 for n in self.agent_records):
            raise ConfigError("agent_records", f"record counts must be >= 0, got {self.agent_records}")
        check_student_targets(self.student_targets)

    @classmethod
    def from_config(
        cls, config: RunConfig, *, sigma: float, queries: int, min_responders: int
    ) -> PrivateKnnFL:
        """Private-kNN-FL with the run's options (:class:`KnnOptions`), student settings and seed."""
        options: KnnOptions = cls.options_from(config)
        if options.agent_budgets is not None:
            refuse_fixed_noise_with_budgets(config.privacy)
        return cls(
            sigma=sigma,
            queries=queries,
            min_responders=min_responders,
            k=options.k,
            k_fraction=options.k_fraction,
            features=options.features,
            feature_dim=options.feature_dim,
            feature_module=options.feature_module,
            normalize=options.normalize,
            bound=options.bound,
            student=config.student,
            self_training_rounds=config.self_training_rounds,
            semi_supervised=config.semi_supervised,
            query_selection=config.query_selection,
            seed=config.seed,
            delta=config.privacy.delta,
            accountant=config.privacy.accountant,
            secure_noise=config.privacy.secure_noise,
            agent_budgets=options.agent_budgets,
            vote_sampling=options.vote_sampling,
            student_targets=options.student_targets,
        )

    def with_sigma(self, sigma: float) -> PrivateKnnFL:
        """The same run with noise std ``sigma``."""
        return dataclasses.replace(self, sigma=sigma)

    def with_agent_records(self, sizes: np.ndarray | tuple[int, ...]) -> PrivateKnnFL:
        """The same run, told each agent's record count (so a fractional k plans exactly)."""
        return dataclasses.replace(self, agent_records=tuple(int(n) for n in sizes))

    def planned_details(self) -> dict[str, Any]:
        """The student's targets as run (chosen from the example shape where "auto")."""
        return {"student_targets": self.student_targets}

    def default_queries(self, pool_size: int) -> int | None:
        """Vote-sum targets: the whole pool (:func:`~fedvote.methods.voting.vote_sum_queries`); else None."""
        return vote_sum_queries(self.student_targets, pool_size)

    def with_public(self, public: PublicMetadata) -> PrivateKnnFL:
        """The run knowing the agents' record counts, where the server knows them.

        The student's targets are resolved from the example shape (as PATE-FL's: a public
        quantity). A fixed ``k`` above the smallest agent's record count is refused: that agent's vote
        would be all its records, divided by a k it cannot reach (k = 10⁹: instance ε 0.0,
        accuracy 0.126, issue 47); ``--k-fraction`` scales k with each agent's records.
        """
        targets = resolve_student_targets(self.student_targets, public.example_shape)
        method = dataclasses.replace(self, student_targets=targets)
        if self.agent_budgets is not None:
            plan = plan_budget_spec(self.agent_budgets, public.num_agents, self.seed, self.unit_sigma)
            method = dataclasses.replace(method, budget_plan=plan)
        if public.agent_records is None:
            return method
        smallest = min((int(n) for n in public.agent_records), default=0)
        if self.k is not None and smallest and self.k > smallest:
            raise ConfigError(
                "k",
                f"{self.k} neighbours but the smallest agent holds {smallest} records; give k <= {smallest} "
                "(or --k-fraction, a share of each agent's records)",
            )
        return method.with_agent_records(public.agent_records)

    def unit_sigma(self, budget: float) -> float:
        """σ_b: the smallest noise at which an agent of weight 1 spends at most ``budget`` (agent level)."""
        rate = self.sampling_rate
        return calibrate_sigma(
            lambda sigma: individual_knn_events(sigma, self.queries, 1, sampling_rate=rate).agent,
            budget,
            self.delta,
            self.accountant,
        )

    def individual_events(self, count: int, k_min: int) -> IndividualRelease:
        """``count`` weighted, subsampled kNN vote sums, as the heaviest agent and as each group sees them."""
        weights = self.group_weights()
        groups = [
            individual_knn_events(
                self.sigma, count, k_min, bound=self.bound, weight=w, sampling_rate=self.sampling_rate
            )
            for w in weights
        ]
        return individual_release(groups, weights)

    def requirements(self) -> tuple[type, ...]:
        """KNN votes; with budgets or vote sampling, the individual kNN votes."""
        return (*self.requires, IndividualKnnVotes) if self.individual else self.requires

    @property
    def instance_bound(self) -> str:
        """``tight`` (√2/k_min, proven in docs/privacy.md) or ``paper`` (√(2/k_min), Theorem 3 as stated)."""
        return self.bound

    def planned_k_min(self) -> int:
        """The smallest k any agent will use, as far as is known before the run (else 1)."""
        if self.k is not None:
            return int(self.k)
        if not self.agent_records:
            return 1
        return min(resolve_k(n, None, self.k_fraction) for n in self.agent_records)

    def planned_k_max(self) -> int:
        """The largest k any agent will use, as far as is known before the run (else k_min's plan).

        The count scale K of ``--secure-noise``. Unknown record counts plan K = k_min = 1,
        which gives the larger instance-level ε (ratio √2/(Kσ)).
        """
        if self.k is not None:
            return int(self.k)
        if not self.agent_records:
            return self.planned_k_min()
        return max(resolve_k(n, None, self.k_fraction) for n in self.agent_records)

    def planned_events(self) -> LevelEvents:
        """All ``queries`` releases: agent level s = 1; instance level s = √2/k_min (or paper's)."""
        return self.events(self.queries, self.planned_k_min(), self.planned_k_max())

    def events(self, count: int, k_min: int, k_max: int) -> LevelEvents:
        """``count`` kNN vote sums: Gaussian (Theorem 3), or integer counts on the scale k_max (secure)."""
        if self.individual:
            return self.individual_events(count, k_min)
        if self.secure_noise:
            return private_knn_fl_discrete_events(
                self.sigma, self.min_responders, count, k_min, k_max, self.bound
            )
        return private_knn_fl_events(self.sigma, count, k_min, self.bound)

    def fit_features(self, server: ServerData) -> FeatureExtractor:
        """φ fitted on the server's public pool only (the one input it receives).

        A learned φ (autoencoder, contrastive) is kept in the extractor disk cache when
        ``feature_cache`` (:mod:`fedvote.models.extractor_cache`): a function of the public
        pool alone, so storing and reusing it changes no privacy analysis.
        """
        check_extractor_input(self.features, server.public_features.shape[1:], argument="features")
        return fit_feature_extractor(
            self.features,
            server.public_features,
            dim=self.feature_dim,
            seed=self.seed,
            normalize=self.normalize,
            module=self.feature_module,
            cache=self.feature_cache,
        )

    def run(
        self,
        server: ServerData,
        transport: Transport,
        ledger: PrivacyLedger,
        progress: Progress = NO_PROGRESS,
    ) -> MethodOutcome:
        """Fit φ on the pool, label ``queries`` public points by noisy kNN vote, train the student."""
        assert isinstance(transport, KnnVotes)  # check_capabilities refused any other
        pool_size = server.public_features.shape[0]
        check_voting_run(self.queries, pool_size, self.min_responders, transport.num_agents)
        with progress.step("fitting the public feature extractor", total=1) as bar:
            extractor = self.fit_features(server)
            bar.advance()
        with progress.step("embedding the agents' records", total=1) as bar:
            ks = transport.prepare_knn(extractor, k=self.k, k_fraction=self.k_fraction)  # (N,)
            bar.advance()
        k_min, k_max = int(np.min(ks)), int(np.max(ks))
        if self.individual:
            return self.individual_run(server, transport, ledger, progress, ks, extractor)
        # --secure-noise: integer counts on the public scale K = k_max, the sum divided by K.
        vote_sum: VoteSumFn = transport.knn_vote_sum
        if self.secure_noise:
            vote_sum = on_integer_scale(vote_sum, k_max)
        outcome = label_and_teach(
            self,
            server,
            events=lambda count: self.events(count, k_min, k_max),
            vote_sum=vote_sum,
            ledger=ledger,
            progress=progress,
            student_targets=self.student_targets,
        )
        return dataclasses.replace(
            outcome,
            statements=self.paper_statement(k_min, int(outcome.query_indices.shape[0]), k_max),
            details={
                **outcome.details,
                "bound": self.bound,
                "k": k_min,
                "count_scale": k_max if self.secure_noise else None,
                "k_per_agent": [int(k) for k in ks],
                "features": extractor.kind,
                "feature_dim": extractor.dim,
            },
        )

    def individual_run(
        self,
        server: ServerData,
        transport: Transport,
        ledger: PrivacyLedger,
        progress: Progress,
        ks: np.ndarray,
        extractor: FeatureExtractor,
    ) -> MethodOutcome:
        """Vote with budget weights and/or subsampling (issue 45), as PATE-FL does; each group's ε."""
        assert isinstance(transport, IndividualKnnVotes)  # required by requirements()
        k_min = int(np.min(ks))
        plan = self.budget_plan
        if plan is not None:
            if len(plan.budgets) != transport.num_agents:
                raise ConfigError(
                    "agent_budgets", f"{len(plan.budgets)} budgets for {transport.num_agents} agents"
                )
            planned = self.individual_events(self.queries, k_min).groups
            check_group_budgets(plan, planned, self.delta, self.accountant, self.sigma)
        weights = np.ones(transport.num_agents) if plan is None else plan.agent_weights()  # (N,)
        rate = self.sampling_rate
        outcome = label_and_teach_individual(
            self,
            server,
            events=lambda count: self.individual_events(count, k_min),
            vote_sum=lambda batch, std, t: transport.individual_knn_vote_sum(
                batch, std, t, weights=weights, sampling_rate=rate
            ),
            ledger=ledger,
            plan=plan,
            sampling_rate=rate,
            delta=self.delta,
            accountant=self.accountant,
            progress=progress,
            student_targets=self.student_targets,
        )
        details = {
            **outcome.details, "bound": self.bound, "k": k_min, "k_per_agent": [int(k) for k in ks],
            "features": extractor.kind, "feature_dim": extractor.dim,
        }
        return dataclasses.replace(outcome, details=details)

    def paper_statement(
        self, k_min: int, released: int, k_max: int | None = None
    ) -> tuple[PrivacyStatement, ...]:
        """The instance ε at the paper's looser sensitivity √(2/k_min) (Theorem 3 as stated).

        Empty when the paper's bound is the one in use, or nothing private was released.
        With ``--secure-noise``, of the integer release on the scale ``k_max``.
        """
        if self.bound == "paper" or released == 0 or not self.sigma > 0:
            return ()
        if self.secure_noise:
            event = dataclasses.replace(self, bound="paper").events(released, k_min, k_max or k_min).instance
        else:
            sensitivity = private_knn_fl_sensitivity(k_min, "instance", "paper")
            event = gaussian_release_event(self.sigma, sensitivity, released)
        return (
            PrivacyStatement(
                name=PAPER_STATEMENT,
                level="instance",
                epsilon=epsilon_for(event, self.delta, self.accountant),
                delta=self.delta,
                source="voting paper, Theorem 3 as stated (looser than the tight √2/k_min, docs/privacy.md)",
            ),
        )
