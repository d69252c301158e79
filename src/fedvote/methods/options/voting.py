"""The options of the voting methods: PATE-FL, weighted PATE, Private-kNN-FL, majority vote.

Light: the command line builds its flags from these without importing the methods
(:mod:`fedvote.methods.registry`); each method module imports its own from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedvote.agents.behaviour import BAD_KINDS
from fedvote.aggregation.voting import RELATIVE_SCHEMES, WEIGHT_SCHEMES, WeightRule, resolve_k
from fedvote.errors import ConfigError
from fedvote.methods.options import method_option
from fedvote.models.config import FEATURE_KINDS
from fedvote.privacy.budget_spec import check_rate, parse_budget_spec
from fedvote.privacy.config import KNN_BOUNDS

# What leaves the aggregator: the noisy vote sums (Algorithms 1 and 2) or, PATE-FL only,
# the labels of the queries that pass a noisy threshold check (Confident-GNMax).
RELEASES: tuple[str, ...] = ("sums", "labels")
# How PATE-FL's teachers learn (--teacher-da): plainly on the agent's records, or by DANN
# against the public pool (PATE-FL+DA, voting paper Sec. 5.1; fedvote.models.dann).
TEACHER_DA: tuple[str, ...] = ("none", "dann")
# What a voting method's student learns from (--student-targets): the noisy-argmax labels of
# the confident queries, or every released vote sum by ridge regression
# (fedvote.models.vote_regression); "auto" by fedvote.models.config.resolve_student_targets.
STUDENT_TARGETS: tuple[str, ...] = ("auto", "labels", "vote-sums")


def student_targets_option() -> str:
    """``--student-targets``, one flag shared by every method whose server receives vote sums."""
    return method_option(  # type: ignore[no-any-return]
        "auto",
        "What the student learns from: 'labels' (the noisy-argmax labels of the queries whose noisy "
        "margin clears the bar, with FixMatch/VAT on the rest of the pool), 'vote-sums' (a linear "
        "student fitted to every released vote sum by ridge regression, λ by leave-one-out on the "
        "released sums: post-processing, no ε; Q defaults to the whole pool, up to 5,000), or "
        "'auto' (vote-sums for vectors of at least 1,024 features, e.g. CIFAR-10's patch features; "
        "labels otherwise). pate-fl and weighted-pate: --release sums only.",
        choices=STUDENT_TARGETS,
    )


def check_student_targets(targets: str) -> None:
    """Refuse a ``--student-targets`` value that is not one of :data:`STUDENT_TARGETS`, by name."""
    if targets not in STUDENT_TARGETS:
        choices = ", ".join(STUDENT_TARGETS)
        raise ConfigError("student_targets", f"must be one of {choices}, got {targets!r}")


class IndividualVoteSettings:
    """What ``--agent-budgets`` and ``--vote-sampling`` (issue 45) mean to whatever holds them as fields."""

    agent_budgets: str | None
    vote_sampling: float | None

    @property
    def individual(self) -> bool:
        """Whether votes are weighted by agent budgets or subsampled (issue 45)."""
        return self.agent_budgets is not None or self.vote_sampling is not None

    @property
    def sampling_rate(self) -> float:
        """q, the probability that an agent's vote enters a query's sum (1 without --vote-sampling)."""
        return 1.0 if self.vote_sampling is None else float(self.vote_sampling)


@dataclass(frozen=True)
class PateFLOptions(IndividualVoteSettings):
    """The settings of ``--method pate-fl`` (each is a ``fedvote run`` flag).

    ``release`` "sums" (default): Algorithm 1 of the voting paper, the server receives the
    noisy vote sums. "labels": Confident-GNMax, only the pass bits and the labels of the
    answered queries leave the aggregator (in-process transports only).
    """

    release: str = method_option(
        "sums",
        "What leaves the aggregator: 'sums' (the noisy vote sums, voting paper Alg. 1) or 'labels' "
        "(Confident-GNMax, Papernot et al. 2018 Alg. 1: pass bits of a noisy threshold check and the "
        "noisy-argmax labels of the answered queries).",
        choices=RELEASES,
    )
    threshold: float | None = method_option(
        None, "Confident-GNMax threshold T in votes (--release labels); default 0.6·N."
    )
    threshold_sigma: float | None = method_option(
        None, "Noise std σ₁ of the threshold check (--release labels); default 2σ (scales with --epsilon)."
    )
    data_dependent_release: bool | None = method_option(
        None,
        "--release labels: publish the data-dependent ε through smooth sensitivity (PATE'18 §4) "
        "[default: on]. The release is charged like any other and is accounted by RDP, so at the "
        "same --epsilon σ is larger and the labels worse (digits defaults: σ 11.85 vs 9.20, labels "
        "0.744 vs 0.914); --no-data-dependent-release charges only the queries (PLD) and publishes "
        "no data-dependent ε.",
    )
    teacher_da: str = method_option(
        "none",
        "Teachers' domain adaptation: 'none', or 'dann' (PATE-FL+DA: each agent trains its teacher by "
        "DANN, Ganin et al. 2016, against the unlabelled public pool; needs agents that may read it).",
        choices=TEACHER_DA,
    )
    da_weight: float = method_option(
        1.0, "--teacher-da dann: weight of the domain loss at the end of λ's schedule 2/(1+e^(-10p))-1."
    )
    agent_budgets: str | None = method_option(
        None,
        "Each agent its own agent-level ε (Individualized PATE's weighting, Boenisch et al. 2023): "
        "'ε:fraction,…' (e.g. 1:0.34,2:0.43,3:0.23; agents drawn into groups by --seed) or "
        "'file:PATH' (one ε per agent id). Votes are weighted so that every group spends at most "
        "its budget and the largest budget is met; σ is calibrated to the largest budget (drop "
        "--epsilon/--sigma). pate-fl (--release sums) and private-knn-fl.",
    )
    vote_sampling: float | None = method_option(
        None,
        "Subsampled voting (Private-kNN, Zhu et al. 2020): each agent's vote enters each query's "
        "sum with probability q (its own coin; it still sends its noise share), accounted as "
        "Poisson-subsampled Gaussians; the sums are scaled by 1/q. --epsilon calibration includes "
        "the amplification. pate-fl (--release sums) and private-knn-fl.",
    )

    student_targets: str = student_targets_option()

    def __post_init__(self) -> None:
        if self.agent_budgets is not None:
            parse_budget_spec(self.agent_budgets)
        if self.vote_sampling is not None:
            check_rate(self.vote_sampling)
        check_student_targets(self.student_targets)
        if self.release == "labels":
            for name in ("agent_budgets", "vote_sampling"):
                if getattr(self, name) is not None:
                    raise ConfigError(name, "applies to --release sums only")
            if self.student_targets == "vote-sums":
                raise ConfigError("student_targets", "vote-sums needs the released sums: --release sums only")
        if self.teacher_da not in TEACHER_DA:
            choices = ", ".join(TEACHER_DA)
            raise ConfigError("teacher_da", f"must be one of {choices}, got {self.teacher_da!r}")
        if not (self.da_weight >= 0 and math.isfinite(self.da_weight)):
            raise ConfigError("da_weight", f"must be a finite number >= 0, got {self.da_weight}")
        if self.teacher_da == "none" and self.da_weight != 1.0:
            raise ConfigError("da_weight", "applies to --teacher-da dann only")
        if self.release not in RELEASES:
            raise ConfigError("release", f"must be one of {', '.join(RELEASES)}, got {self.release!r}")
        if self.release == "sums":
            for name in ("threshold", "threshold_sigma", "data_dependent_release"):
                if getattr(self, name) is not None:
                    raise ConfigError(name, "applies to --release labels only")
        if self.threshold is not None and not (math.isfinite(self.threshold) and self.threshold >= 0):
            # A negative T passes every query: the check costs ε and selects nothing (issue 47).
            raise ConfigError("threshold", f"must be a finite number of votes >= 0, got {self.threshold}")
        sigma1 = self.threshold_sigma
        if sigma1 is not None and not (sigma1 >= 0 and math.isfinite(sigma1)):
            raise ConfigError("threshold_sigma", f"must be a finite number >= 0, got {self.threshold_sigma}")

    @property
    def labels_only(self) -> bool:
        """Whether only labels leave the aggregator (Confident-GNMax)."""
        return self.release == "labels"

    @property
    def releases_data_dependent(self) -> bool:
        """Whether the run publishes (and is charged for) its data-dependent ε by smooth sensitivity.

        Label release only, on unless ``--no-data-dependent-release``; a run without it plans
        and charges no GNSS event, keeps the PLD accountant, and publishes no data-dependent ε.
        """
        return self.labels_only and self.data_dependent_release is not False


@dataclass(frozen=True)
class WeightedVotingOptions:
    """The settings of ``--method weighted-pate`` (each is a ``fedvote run`` flag).

    Validated on construction; one ``ConfigError`` naming the option on bad input.
    """

    scheme: str = method_option(
        "accuracy",
        "Weighting scheme (reputation paper, Sec. 4.1.1). Default accuracy: it releases no accuracy "
        "summary, and was best or second best at 0 and 20 % bad teachers in docs/results.md.",
        choices=WEIGHT_SCHEMES,
    )
    min_weight: float = method_option(0.1, "Smallest vote weight w_min (the paper: 0.1).")
    max_weight: float = method_option(
        3.0, "Largest vote weight w_max (the paper: 3); the votes' sensitivity is w_max."
    )
    validation_size: int | None = method_option(
        None,
        "Public-pool points labelled as the validation set (removed from the query pool); "
        "default: a fifth of the pool, at most 500.",
    )
    validation_file: str | None = method_option(
        None, "A labelled public npz (x, y) to score teachers on instead of a pool slice."
    )
    summary_sigma: float = method_option(
        8.0, "Noise std of the released accuracy histogram (percentile, zscore, rank only)."
    )
    summary_bins: int = method_option(10, "Equal-width accuracy bins of the released histogram.")
    zscore_span: float = method_option(
        1.0, "z-scores in [-span, span] map linearly to [w_min, w_max] (beyond: clipped)."
    )
    bad_fraction: float = method_option(
        0.0, "Simulation: fraction of agents (seeded choice) that are bad teachers."
    )
    bad_kind: str = method_option(
        "adversarial", "Simulation: what bad teachers do.", choices=BAD_KINDS
    )
    bad_target_class: int = method_option(0, "Simulation: the wrong class adversaries vote for.")
    weight_scale: int = method_option(
        100,
        "--secure-noise only: weights are rounded to the public grid round(K·w)/K and vote as "
        "integers round(K·w)·e_y (sensitivity round(K·w_max) in those units).",
    )
    student_targets: str = student_targets_option()

    def __post_init__(self) -> None:
        check_student_targets(self.student_targets)
        scale = self.weight_scale
        if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
            raise ConfigError("weight_scale", f"must be an integer >= 1, got {self.weight_scale!r}")
        if self.scheme not in WEIGHT_SCHEMES:
            choices = ", ".join(WEIGHT_SCHEMES)
            raise ConfigError("scheme", f"unknown scheme {self.scheme!r}; choose from {choices}")
        if not 0.0 < self.max_weight < float("inf"):
            raise ConfigError("max_weight", f"must be a finite number > 0, got {self.max_weight}")
        if not 0.0 <= self.min_weight <= self.max_weight:
            raise ConfigError("min_weight", f"must lie in [0, {self.max_weight}], got {self.min_weight}")
        size = self.validation_size
        if size is not None and (isinstance(size, bool) or size < 0):
            raise ConfigError("validation_size", f"must be an integer >= 0, got {self.validation_size!r}")
        if not self.summary_sigma > 0:
            raise ConfigError("summary_sigma", f"must be > 0, got {self.summary_sigma}")
        if self.summary_bins < 2:
            raise ConfigError("summary_bins", f"must be at least 2, got {self.summary_bins}")
        if not self.zscore_span > 0:
            raise ConfigError("zscore_span", f"must be > 0, got {self.zscore_span}")
        if not 0.0 <= self.bad_fraction <= 1.0:
            raise ConfigError("bad_fraction", f"must lie in [0, 1], got {self.bad_fraction}")
        if self.bad_kind not in BAD_KINDS:
            choices = ", ".join(BAD_KINDS)
            raise ConfigError("bad_kind", f"unknown kind {self.bad_kind!r}; choose from {choices}")
        if self.bad_target_class < 0:
            raise ConfigError("bad_target_class", f"must be >= 0, got {self.bad_target_class}")

    @property
    def relative(self) -> bool:
        """Whether the scheme needs the released accuracy summary (percentile, zscore, rank)."""
        return self.scheme in RELATIVE_SCHEMES

    @property
    def needs_validation(self) -> bool:
        """Whether teachers are scored at all (every scheme but one-model-one-vote)."""
        return self.scheme != "one-vote"

    @property
    def vote_max_weight(self) -> float:
        """The largest weight a vote can carry: 1 for one-vote, else w_max."""
        return 1.0 if self.scheme == "one-vote" else self.max_weight

    def weight_rule(self, histogram: np.ndarray | None, scale: int | None = None) -> WeightRule:
        """The rule mapping a teacher's validation accuracy to its weight under these options.

        ``histogram``: the released accuracy summary (relative schemes), else None; ``scale``:
        the public integer weight scale of ``--secure-noise`` (None: real-valued weights).
        """
        return WeightRule(
            scheme=self.scheme,
            min_weight=self.min_weight,
            max_weight=self.max_weight,
            zscore_span=self.zscore_span,
            histogram=histogram,
            scale=scale,
        )


@dataclass(frozen=True)
class KnnOptions(IndividualVoteSettings):
    """The settings of ``--method private-knn-fl`` (each a ``fedvote run`` flag).

    ``k`` neighbours per agent, or (when ``k`` is None) ``round(k_fraction · n_i)`` of each
    agent's n_i records, at least 1 (the voting paper uses 5 %). ``features`` is the public
    feature extractor φ (:data:`fedvote.models.features.FEATURE_KINDS`), fitted on the
    public pool only, with ``feature_dim`` outputs (pca, random, autoencoder, contrastive);
    ``feature_module`` is the TorchScript file for ``features="module"``; ``normalize``
    scales φ's outputs to unit norm. ``bound`` is the instance-level sensitivity used for
    accounting: ``"tight"`` (√2/k_min) or the paper's ``"paper"`` (√(2/k_min)).
    """

    k: int | None = method_option(
        None, "Private-kNN-FL: neighbours per agent [default: --k-fraction of its records]."
    )
    k_fraction: float = method_option(
        0.05, "Private-kNN-FL: k as a fraction of each agent's records (the paper's 5 %)."
    )
    features: str = method_option(
        "pca",
        "Private-kNN-FL: public feature extractor, fitted on the public pool only.",
        choices=FEATURE_KINDS,
    )
    feature_dim: int = method_option(
        50, "Private-kNN-FL: outputs of the feature extractor (pca, random, autoencoder, contrastive)."
    )
    feature_module: str | None = method_option(
        None, "Private-kNN-FL: TorchScript (or torch.export .pt2) file for --features module."
    )
    normalize: bool = method_option(
        False, "Private-kNN-FL: scale the features to unit norm.", flag="--normalize-features"
    )
    bound: str = method_option(
        "tight",
        "Private-kNN-FL instance-level sensitivity: tight √2/k or the paper's √(2/k).",
        choices=KNN_BOUNDS,
        flag="--knn-bound",
    )
    agent_budgets: str | None = method_option(
        None, "Each agent its own agent-level ε, as for pate-fl ('ε:fraction,…' or 'file:PATH')."
    )
    vote_sampling: float | None = method_option(
        None, "Subsampled voting, as for pate-fl: an agent's vote enters each query's sum with probability q."
    )
    student_targets: str = student_targets_option()

    def __post_init__(self) -> None:
        resolve_k(1, self.k, self.k_fraction)  # validates k and k_fraction
        if self.features not in FEATURE_KINDS:
            raise ConfigError(
                "features",
                f"unknown feature extractor {self.features!r}; choose from {', '.join(FEATURE_KINDS)}",
            )
        dim = self.feature_dim
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ConfigError("feature_dim", f"must be an integer >= 1, got {self.feature_dim!r}")
        if (self.features == "module") != (self.feature_module is not None):
            raise ConfigError(
                "feature_module", "give a TorchScript file exactly when features is 'module'"
            )
        if self.bound not in KNN_BOUNDS:
            raise ConfigError("bound", f"must be one of {', '.join(KNN_BOUNDS)}, got {self.bound!r}")
        if self.agent_budgets is not None:
            parse_budget_spec(self.agent_budgets)
        if self.vote_sampling is not None:
            check_rate(self.vote_sampling)
        check_student_targets(self.student_targets)


@dataclass(frozen=True)
class MajorityVoteOptions:
    """The settings of ``--method majority-vote``: what its student learns from the clean sums.

    The same rule as PATE-FL's, so that the non-private reference is the line PATE-FL
    approaches as ε grows: on CIFAR-10's patch features both fit every vote sum.
    """

    student_targets: str = student_targets_option()

    def __post_init__(self) -> None:
        check_student_targets(self.student_targets)
