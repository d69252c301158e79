"""FedAUXfdp: one-shot, fully differentially private federated distillation (``fedaux-fdp.txt``).

One communication round (the paper's Figure 1, with Section 4's modification):

1. the server splits its public auxiliary pool into a distillation set (80 %) and a
   pre-training set (20 %), and fits the feature extractor h₀ on the pre-training set
   only, without labels (:mod:`fedvote.models.features`; PCA by default, an autoencoder
   with ``--extractor autoencoder``, or the paper's choice, contrastive learning — SimCLR
   on a small CNN — with ``--extractor contrastive`` for images). h₀ and a
   public normalisation make h̃ with ‖h̃(x)‖ ≤ 1 for every x
   (:class:`~fedvote.models.logistic_heads.HeadFeatures`);
2. every agent fits a **scoring head**, binary L2-regularised logistic regression of
   h̃(own records) against h̃(public negatives D⁻ = the pre-training set), and
3. a **class head**, C-class L2-regularised logistic regression on h̃(own records),
   both minimising mean loss + λ/2·‖β‖² (eq. 2) and released with Gaussian output
   perturbation at sensitivities 2/(λ·(nᵢ + |D⁻|)) and 2√2/(λ·nᵢ) — the per-record
   gradient (p − e_y)·h̃ᵀ has norm ≤ √2 (``docs/privacy.md``); the paper's Theorem 1
   bounds it by √C, giving 2√C/(λ·nᵢ), kept as ``--head-sensitivity paper``;
4. the server labels the distillation set with eq. (1), Σᵢ fᵢ(x)·gᵢ(x) / Σᵢ fᵢ(x), and
   distils a student: a logistic head on the frozen h̃ (the paper distils into the whole
   network; here h₀ stays frozen, so the student is h̃ followed by a linear layer).

Variants (one pipeline, the flags below differ):

* ``fedaux-fdp`` — the method; ``--no-class-privacy`` gives Table 3's "None" row;
* ``fedaux-f`` — FedAUX with a frozen extractor (+F): private scores, class heads trained
  by local epochs without regulariser and released *without* noise; the student starts
  from the clients' averaged heads (the paper's step 4 of FedAUX);
* ``fedd-p`` — ensemble distillation of the private class heads, soft label the plain
  mean of gᵢ(x); no scoring heads, the whole budget on the class heads;
* ``fedavg-p`` — the server head is the nᵢ-weighted average of the private class heads;
  no distillation, no scoring heads.

Privacy (``docs/privacy.md``). Instance level (replace-one record of one agent): each
agent's two releases are Gaussian mechanisms with the sensitivities above; agents hold
disjoint records, so across agents it is parallel composition. ``privacy.instance.epsilon``
is the paper's basic composition ε_scores + ε_classes at δ = δ_scores + δ_classes (the run's
δ, split equally between the noised heads); ``epsilon_pld`` is the PLD of the same two
Gaussian releases. Agent level (zero-out): every released head lies in the ball
‖β‖ ≤ √(2·log K/λ) (J(β*) ≤ J(0); the agent projects onto it), so each release is a
Gaussian mechanism with that sensitivity — a sound but large ε.

Differences from the paper, on purpose: features are clipped to a public constant (eq. 4
divides by the max-norm over the private D); every class head has all C rows (the paper's
scikit-learn fit has only the classes an agent holds, which reveals that set and makes C
data-dependent).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch
from scipy import special
from torch import nn

from fedvote.config import DEFAULT_EPSILON
from fedvote.data.federation import PublicMetadata, ServerData
from fedvote.errors import ConfigError
from fedvote.methods.base import Method, MethodOutcome
from fedvote.methods.options.fedaux import FedAuxOptions
from fedvote.models.config import COLOUR_PHOTO_DATASETS
from fedvote.models.features import check_extractor_input, fit_feature_extractor
from fedvote.models.logistic_heads import (
    MULTINOMIAL_GRADIENT_BOUND,
    HeadFeatures,
    HeadRequest,
    ReleasedHeads,
    class_head_sensitivity,
    head_norm_bound,
    public_head_features,
)
from fedvote.privacy.accountant import gaussian_epsilon
from fedvote.privacy.calibrate import analytic_gaussian_sigma, classic_gaussian_sigma
from fedvote.privacy.events import LevelEvents, perturbed_head_events
from fedvote.privacy.ledger import PrivacyLedger, compose_releases
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.results import PrivacyStatement
from fedvote.transport.base import Transport
from fedvote.transport.capabilities import PrivateHeads

if TYPE_CHECKING:
    from fedvote.config import RunConfig

# The paper's score budget (Section 5): (ε = 0.1, δ = 1e-5).
DEFAULT_EPSILON_SCORES = 0.1

# --extractor-dim's default ("auto", FedAuxFdp.extractor_dim_for): the largest d of this
# ladder whose class-head noise/signal ratio (check_learnable's) is at most
# AUTO_DIM_RATIO, else the smallest. 0.12 read off digits runs (docs/defaults.md): at the
# default ε it picks d = 12, which learnt best of the ladder there.
EXTRACTOR_DIM_LADDER: tuple[int, ...] = (32, 24, 16, 12, 8, 6, 4)
AUTO_DIM_RATIO = 0.12


def noise_multiplier(epsilon: float, delta: float, gaussian: str, argument: str = "epsilon") -> float:
    """σ/Δ of one Gaussian release that is (ε, δ)-DP: analytic (any ε) or classic (ε < 1)."""
    if gaussian == "classic":
        return classic_gaussian_sigma(epsilon, delta, 1.0)
    return analytic_gaussian_sigma(epsilon, delta, 1.0, argument)


def certainty_weighted_soft_labels(class_probs: np.ndarray, log_scores: np.ndarray) -> np.ndarray:
    """Eq. (1): Σᵢ fᵢ(x)·gᵢ(x) / Σᵢ fᵢ(x) for every x, (Q, C).

    ``class_probs`` (N, Q, C) are gᵢ(x); ``log_scores`` (N, Q) are log fᵢ(x). Computed as
    Σᵢ softmaxᵢ(log fᵢ(x))·gᵢ(x), the same value without underflow when every fᵢ(x) is tiny.
    """
    weights = special.softmax(log_scores, axis=0)  # (N, Q), sums to 1 over agents
    return np.einsum("nq,nqc->qc", weights, class_probs)


def mean_soft_labels(class_probs: np.ndarray) -> np.ndarray:
    """FedD's soft label: the plain mean (1/N) Σᵢ gᵢ(x), (Q, C), from ``class_probs`` (N, Q, C)."""
    return class_probs.mean(axis=0)


@dataclass(frozen=True)
class HeadRelease:
    """One kind of head every agent releases: σᵢ/Δᵢ, σᵢ(nᵢ), Δᵢ(nᵢ) and its K outputs (K = 2: binary)."""

    multiplier: float | None
    noise_std: Callable[[int], float | None]
    sensitivity: Callable[[int], float]
    outputs: int

    def noise_stds(self, record_counts: list[int]) -> list[float] | None:
        """Every agent's σᵢ, or None when the head is released without noise."""
        stds: list[float] = []
        for n in record_counts:
            std = self.noise_std(n)  # the agent's own σᵢ (HeadRequest), not recomputed here
            if std is None:
                return None
            stds.append(std)
        return stds


def released_heads(request: HeadRequest) -> list[HeadRelease]:
    """The heads ``request`` makes each agent release: scoring head (if any), then class head.

    σᵢ and Δᵢ are the request's own (:meth:`HeadRequest.score_noise_std`,
    :meth:`HeadRequest.class_noise_std`): what the agents add is what is charged.
    """
    heads = []
    if request.negative_indices is not None:
        heads.append(
            HeadRelease(request.score_noise_multiplier, request.score_noise_std, request.score_sensitivity, 2)
        )
    heads.append(
        HeadRelease(
            request.class_noise_multiplier,
            request.class_noise_std,
            request.class_sensitivity,
            request.num_classes,
        )
    )
    return heads


class HeadOnFeatures(nn.Module):
    """The server model: x ↦ W·h̃(x), W (C, d + 1), on the frozen public feature map h̃."""

    def __init__(self, features: HeadFeatures, weight: np.ndarray) -> None:
        super().__init__()
        self.features = features
        self.weight = nn.Parameter(torch.as_tensor(weight, dtype=torch.float32), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (n, C) for examples ``x`` (n, *shape)."""
        z = torch.as_tensor(self.features.transform(x.detach().cpu().numpy()), dtype=torch.float32)
        return z @ self.weight.T


def distil_head(
    z: np.ndarray, soft_labels: np.ndarray, *, start: np.ndarray, epochs: int, seed: int
) -> np.ndarray:
    """A linear head (C, d + 1) trained on h̃-features ``z`` (Q, d + 1) to match ``soft_labels`` (Q, C).

    Cross-entropy against the soft labels, Adam (lr 1e-2), batches of 128, from ``start``.
    Post-processing of released heads on public data: no privacy cost.
    """
    generator = torch.Generator().manual_seed(int(seed))
    x = torch.as_tensor(z, dtype=torch.float32)
    y = torch.as_tensor(soft_labels, dtype=torch.float32)
    weight = torch.tensor(start, dtype=torch.float32, requires_grad=True)
    optimiser = torch.optim.Adam([weight], lr=1e-2)
    for _ in range(epochs):
        order = torch.randperm(x.shape[0], generator=generator)
        for begin in range(0, x.shape[0], 128):
            rows = order[begin : begin + 128]
            loss = -(y[rows] * torch.log_softmax(x[rows] @ weight.T, dim=1)).sum(dim=1).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    return weight.detach().numpy().astype(np.float64)


# A class-head setting is refused when its averaged noise per coefficient exceeds this many
# times the largest mean coefficient a head can have (FedAuxFdp.check_learnable). On digits
# (docs/defaults.md): 6.2× returned chance (0.07-0.15), 1.1× learnt 0.64.
UNLEARNABLE_NOISE_RATIO = 2.0


def class_head_norm_ceiling(num_classes: int, regularization: float) -> float:
    """The largest norm a C-class head's optimum can have: min(√(2·ln C/λ), √2/λ).

    √(2·ln C/λ) is :func:`head_norm_bound` (J(β*) ≤ J(0)); √2/λ follows from stationarity,
    λβ* = −(1/n) Σ ∇ℓ(β*) with every per-record gradient of norm ≤ √2
    (:data:`MULTINOMIAL_GRADIENT_BOUND`, docs/privacy.md). Used only to judge learnability;
    the agent-level sensitivity stays :func:`head_norm_bound`.
    """
    return min(head_norm_bound(num_classes, regularization), MULTINOMIAL_GRADIENT_BOUND / regularization)


def class_head_signal(num_classes: int, regularization: float, dim: int) -> float:
    """The largest mean coefficient of a class head, C × (d + 1) coefficients: ceiling/√(C(d+1))."""
    return class_head_norm_ceiling(num_classes, regularization) / math.sqrt(num_classes * (dim + 1))


@dataclass(frozen=True)
class FedAuxFdp(Method):
    """FedAUXfdp (``fedaux-fdp``); the baselines are subclasses that switch the parts below.

    Parameters
    ----------
    options : FedAuxOptions
        The method's settings.
    delta : float
        The run's total δ, split equally between the noised heads (basic composition).
    seed : int
        Seeds the pool split, h₀ and the student (not the privacy noise).
    extractor_cache : bool
        Keep a learned h₀ (autoencoder, contrastive) in the extractor disk cache
        (:mod:`fedvote.models.extractor_cache`) and reuse it for the same pre-training split
        and settings. h₀ is a function of public data only, so this changes no analysis.

    """

    name = "fedaux-fdp"
    requires: ClassVar[tuple[type, ...]] = (PrivateHeads,)
    calibration_level: ClassVar[str | None] = None  # the budget is given per head, not calibrated
    options_type: ClassVar[type | None] = FedAuxOptions
    # Its own PCA sees the pixels but on colour photos (models.config.COLOUR_PHOTO_DATASETS).
    auto_patch_datasets: ClassVar[tuple[str, ...]] = COLOUR_PHOTO_DATASETS
    audit_release = "heads"
    # What distinguishes the variants.
    uses_scores: ClassVar[bool] = True
    class_head_kind: ClassVar[str] = "logistic"
    aggregation: ClassVar[str] = "weighted-distill"  # | "mean-distill" | "average-heads"
    start_from_average: ClassVar[bool] = False

    options: FedAuxOptions = field(default_factory=FedAuxOptions)
    delta: float = 1e-5
    seed: int = 0
    extractor_cache: bool = True
    # Public metadata (:meth:`with_public`): the agents' record counts nᵢ, the classes C and
    # the pool size (its pre-training split gives the scoring heads' negatives), which fix
    # every agent's σᵢ and head-norm bound, so the agent level can be planned.
    agent_records: tuple[int, ...] | None = None
    num_classes: int | None = None
    pool_size: int | None = None
    sigma: float = field(init=False, default=0.0)  # σ/Δ of the class heads (0: not noised)

    def __post_init__(self) -> None:
        if not 0.0 < self.delta < 1.0:
            raise ConfigError("delta", f"must lie in (0, 1), got {self.delta}")
        if not self.uses_scores and self.options.epsilon_scores is not None:
            raise ConfigError(
                "epsilon_scores",
                f"{self.name} releases no scoring heads; give its budget as --epsilon-classes",
            )
        if self.class_noised and not self.class_epsilon > 0:
            raise ConfigError(
                "epsilon_classes",
                f"--epsilon-scores {self.epsilon_scores:g} leaves nothing of the default total "
                f"ε = {DEFAULT_EPSILON:g} for the class heads: give --epsilon-classes",
            )
        if self.class_head_kind == "sgd" and not self.options.class_privacy:
            pass  # FedAUX+F's heads are never noised; --no-class-privacy only repeats it
        elif not self.options.class_privacy and not self.uses_scores:
            raise ConfigError("class_privacy", f"{self.name} without class privacy releases nothing private")
        multiplier = self.class_multiplier
        object.__setattr__(self, "sigma", 0.0 if multiplier is None else multiplier)

    @classmethod
    def check_privacy_flags(cls, config: RunConfig) -> None:
        """Refuse ``--epsilon`` and ``--sigma``: the budget is given per head (before any data is loaded)."""
        if config.privacy.epsilon is not None:
            raise ConfigError(
                "epsilon", f"{cls.name} takes its budget per head: use --epsilon-scores/--epsilon-classes"
            )
        if config.privacy.sigma is not None:
            raise ConfigError("sigma", f"{cls.name} derives σ from --epsilon-scores/--epsilon-classes and δ")

    @classmethod
    def from_config(
        cls, config: RunConfig, *, sigma: float, queries: int, min_responders: int
    ) -> FedAuxFdp:
        """The method with the run's options, δ and seed; ``--epsilon`` and ``--sigma`` are refused."""
        cls.check_privacy_flags(config)
        if config.privacy.min_responders is not None:  # no shares of a sum to honour t (issue 42, defect 4)
            raise ConfigError(
                "min_responders", f"does not apply to {cls.name}: each head carries its whole noise"
            )
        options = cls.options_from(config) or FedAuxOptions()
        return cls(options=options, delta=config.privacy.delta, seed=config.seed)

    def with_sigma(self, sigma: float) -> FedAuxFdp:
        """Refused: σ follows from each head's (ε, δ) and sensitivity."""
        raise ConfigError("sigma", f"{self.name} derives σ from --epsilon-scores/--epsilon-classes and δ")

    # --- the budget ---------------------------------------------------------------------

    @property
    def instance_bound(self) -> str | None:
        """The class heads' sensitivity bound the noise was scaled to (``--head-sensitivity``), if noised."""
        return self.options.head_sensitivity if self.class_noised else None

    @property
    def class_noised(self) -> bool:
        """Whether the class heads carry noise."""
        return self.class_head_kind == "logistic" and self.options.class_privacy

    @property
    def epsilon_scores(self) -> float | None:
        """ε of each scoring head (None: no scoring head)."""
        if not self.uses_scores:
            return None
        value = self.options.epsilon_scores
        return DEFAULT_EPSILON_SCORES if value is None else value

    @property
    def class_epsilon(self) -> float:
        """ε of each class head: ``--epsilon-classes``, else the toolkit's total ε less ε_scores.

        The default total is :data:`fedvote.config.DEFAULT_EPSILON` (the ε every method's
        defaults target), so fedaux-fdp spends ε_scores + ε_classes = 4 and fedd-p and
        fedavg-p, which release class heads only, ε_classes = 4. The paper's 0.1 + 0.5 is
        ``--epsilon-classes 0.5`` (experiments/fedaux_fdp.json).
        """
        given = self.options.epsilon_classes
        if given is not None:
            return given
        return DEFAULT_EPSILON - (self.epsilon_scores or 0.0)

    def regularization(self, num_classes: int | None) -> float:
        """λ of both heads: ``--lambda``, else 1/ln C (C: the classes, public; 2 while unknown).

        A class head's norm is bounded both by √(2·ln C/λ) (J(β*) ≤ J(0)) and by √2/λ
        (stationarity, per-record gradient ≤ √2); they meet at λ = 1/ln C. Above it the
        signal bound falls like the noise (both ∝ 1/λ), so a larger λ no longer raises the
        ratio check_learnable compares, while the agent-level ε keeps growing.
        """
        if self.options.lambda_ is not None:
            return self.options.lambda_
        return 1.0 / math.log(max(2, num_classes or 2))

    def noise_signal_ratio(self, records: tuple[int, ...], num_classes: int, dim: int) -> float | None:
        """check_learnable's ratio: the averaged class-head noise per coefficient over a head's largest mean.

        Public quantities only (record counts nᵢ, classes C, λ, ε, δ, h₀'s dimension d):
        agent i adds N(0, σᵢ²) per coefficient with σᵢ = m·c/nᵢ (m the noise multiplier,
        c = Δᵢ·nᵢ, e.g. 2√2/λ), so the records-weighted average of the N heads carries
        noise of std m·c·√N / Σnᵢ per coefficient. No head's coefficients can average more
        than ‖β‖/√(C(d+1)), with ‖β‖ ≤ min(√(2·ln C/λ), √2/λ) (:func:`class_head_norm_ceiling`).
        None when the class heads carry no noise.
        """
        multiplier = self.class_multiplier
        if multiplier is None or not records:
            return None
        total, count = float(sum(records)), len(records)
        regularization = self.regularization(num_classes)
        per_record = class_head_sensitivity(num_classes, regularization, 1, self.options.head_sensitivity)
        noise = multiplier * per_record * math.sqrt(count) / total
        return noise / class_head_signal(num_classes, regularization, dim)

    def extractor_dim_for(self, records: tuple[int, ...] | None, num_classes: int | None) -> int:
        """h₀'s output dimension d: ``--extractor-dim``, else the auto rule from public quantities.

        Auto: the largest d of :data:`EXTRACTOR_DIM_LADDER` whose :meth:`noise_signal_ratio`
        is at most :data:`AUTO_DIM_RATIO`, else the ladder's smallest (check_learnable then
        refuses it if even that is hopeless). The signal bound per coefficient falls as
        1/√(C(d+1)) while the noise per coefficient does not depend on d. Without noised
        class heads (FedAUX+F, --no-class-privacy) or before the record counts are known:
        the ladder's largest, 32 (the former default).
        """
        if self.options.extractor_dim is not None:
            return self.options.extractor_dim
        if not records or num_classes is None or self.class_multiplier is None:
            return EXTRACTOR_DIM_LADDER[0]
        for dim in EXTRACTOR_DIM_LADDER:
            ratio = self.noise_signal_ratio(records, num_classes, dim)
            if ratio is not None and ratio <= AUTO_DIM_RATIO:
                return dim
        return EXTRACTOR_DIM_LADDER[-1]

    @property
    def extractor_dim(self) -> int:
        """h₀'s output dimension for the public metadata this method knows (:meth:`with_public`)."""
        return self.extractor_dim_for(self.agent_records, self.num_classes)

    @property
    def head_delta(self) -> float:
        """δ of each noised head: the run's δ split equally among them (basic composition)."""
        noised = int(self.uses_scores) + int(self.class_noised)
        return self.delta / max(1, noised)

    @property
    def score_multiplier(self) -> float | None:
        """σ/Δ of the scoring heads (None: no scoring head)."""
        epsilon = self.epsilon_scores
        if epsilon is None:
            return None
        return noise_multiplier(epsilon, self.head_delta, self.options.gaussian, "epsilon_scores")

    @property
    def class_multiplier(self) -> float | None:
        """σ/Δ of the class heads (None: released without noise)."""
        if not self.class_noised:
            return None
        return noise_multiplier(self.class_epsilon, self.head_delta, self.options.gaussian, "epsilon_classes")

    def release_events(self, request: HeadRequest, record_counts: list[int] | None) -> list[LevelEvents]:
        """The run's releases (scoring heads, then class heads), each over all agents.

        Every σᵢ and Δᵢ is read from ``request``, the object the agents add their noise
        from (:meth:`HeadRequest.class_noise_std`), so the event charged is the noise
        added over the sensitivity proven. ``record_counts`` nᵢ (public metadata) fix every
        agent's σᵢ = multiplier·Δᵢ; None (before the run) plans the instance level exactly
        (σᵢ/Δᵢ is the multiplier for every agent) and the agent level as unbounded.
        """
        releases: list[LevelEvents] = []
        for head in released_heads(request):
            if record_counts is None:  # σᵢ/Δᵢ is the multiplier for every agent; R/σᵢ needs nᵢ
                stds = None if head.multiplier is None else [head.multiplier]
                releases.append(perturbed_head_events(stds, [1.0], None))
                continue
            releases.append(
                perturbed_head_events(
                    head.noise_stds(record_counts),
                    [head.sensitivity(n) for n in record_counts],
                    head_norm_bound(head.outputs, request.regularization),
                )
            )
        return releases

    def with_public(self, public: PublicMetadata) -> FedAuxFdp:
        """The method knowing the agents' record counts and the classes: its agent level can be planned.

        A setting whose class-head noise drowns every head is refused here, before
        anything is fitted (:meth:`check_learnable`).
        """
        records = None if public.agent_records is None else tuple(int(n) for n in public.agent_records)
        method = dataclasses.replace(
            self, agent_records=records, num_classes=public.num_classes, pool_size=public.pool_size
        )
        method.check_learnable()
        return method

    def check_learnable(self) -> None:
        """Refuse (naming ``--epsilon-classes``) class heads whose averaged noise exceeds any head's signal.

        From public quantities only (:meth:`noise_signal_ratio`, at h₀'s dimension
        :attr:`extractor_dim`). When the averaged noise exceeds even the optimistic signal
        bound by :data:`UNLEARNABLE_NOISE_RATIO`, no aggregation (FedAVG+P's average,
        FedD+P's mean, FedAUX's certainty weighting, which averages fewer heads) can learn:
        the run would return chance after spending its budget. Refused with the smallest
        ε, and the most clients for the same records, at which the two are equal.
        """
        records, classes = self.agent_records, self.num_classes
        if not records or classes is None:
            return
        dim = self.extractor_dim
        ratio = self.noise_signal_ratio(records, classes, dim)
        if ratio is None or ratio <= UNLEARNABLE_NOISE_RATIO:
            return
        multiplier = self.class_multiplier
        assert multiplier is not None  # a ratio means noised class heads
        total, count = float(sum(records)), len(records)
        regularization = self.regularization(classes)
        signal = class_head_signal(classes, regularization, dim)
        noise = ratio * signal
        # the largest multiplier with noise ≤ signal, and the ε at which one head gets it
        largest = multiplier / ratio
        needed = gaussian_epsilon(1.0 / largest, self.head_delta)
        fewest = int(count / ratio**2)  # the same records in fewer clients: noise ∝ √N
        remedies = [f"--epsilon-classes ≥ {needed:.3g}"]
        if fewest >= 2:
            remedies.append(f"at most {fewest} clients holding the same records")
        if regularization < 1.0 / math.log(classes):  # beyond it a larger λ no longer helps
            remedies.append("a larger --lambda")
        if dim > EXTRACTOR_DIM_LADDER[-1]:
            remedies.append("a smaller --extractor-dim")
        raise ConfigError(
            "epsilon_classes",
            f"{self.name} cannot learn here: at ε = {self.class_epsilon:g} with about "
            f"{total / count:.0f} records per client, the class heads' output-perturbation noise "
            f"averaged over {count} clients is {noise:.3g} per coefficient, {ratio:.1f}× the "
            f"largest mean coefficient a head can have, min(√(2·ln C/λ), √2/λ)/√(C(d+1)) = "
            f"{signal:.3g} at d = {dim}; give {', or '.join(remedies)}",
        )

    def planned_events(self) -> LevelEvents:
        """The composed releases before the run: exactly what the run charges once nᵢ and C are known.

        Without them (:meth:`with_public` not called) the instance level is still exact
        (σᵢ/Δᵢ is the multiplier for every agent) and the agent level unbounded.
        """
        counts = None if self.agent_records is None else list(self.agent_records)
        negatives = np.zeros(0, dtype=np.int64)
        if self.pool_size is not None:
            negatives = self.split_pool(self.pool_size)[1]
        request = self.head_request(self.num_classes or 2, negatives)
        releases = self.release_events(request, counts)
        return LevelEvents(
            agent=compose_releases(releases, "agent"),
            instance=compose_releases(releases, "instance"),
            agent_sensitivity=max(r.agent_sensitivity for r in releases),
            instance_sensitivity=max(r.instance_sensitivity for r in releases),
        )

    def stated_statements(self) -> tuple[PrivacyStatement, ...]:
        """The instance ε as the paper composes it, ε_scores + ε_classes: the run's headline.

        Each noised head is (εₕ, δ/k)-DP by calibration, so basic composition gives
        (Σ εₕ, δ)-DP at the run's δ (fedaux-fdp.txt, Section 4); never below the
        accountant's ε of the same Gaussian releases, which the report keeps beside it.
        Empty when a head is released without noise (the accountant's ∞ stands).
        """
        if not self.class_noised:
            return ()
        noised = [e for e in (self.epsilon_scores, self.class_epsilon) if e is not None]
        return (
            PrivacyStatement(
                name="basic composition ε_scores + ε_classes (paper)",
                level="instance",
                epsilon=float(sum(noised)),
                delta=self.delta,
                source="fedaux-fdp.txt: each noised head (εₕ, δ/k)-DP by calibration; basic composition",
                headline=True,
            ),
        )

    # --- the run ------------------------------------------------------------------------

    def split_pool(self, pool_size: int) -> tuple[np.ndarray, np.ndarray]:
        """(distillation indices, pre-training indices) of the public pool, seeded."""
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, 0xFEDA]))
        order = rng.permutation(pool_size)
        cut = int(round(self.options.distill_fraction * pool_size))
        if not 0 < cut < pool_size:
            raise ConfigError("distill_fraction", f"leaves an empty split of the {pool_size}-point pool")
        return np.sort(order[:cut]), np.sort(order[cut:])

    def fit_features(self, pretraining: np.ndarray, dim: int | None = None) -> HeadFeatures:
        """h₀ fitted without labels on the public pre-training split, and h̃ from it.

        ``dim`` is h₀'s output dimension (default :attr:`extractor_dim`).
        """
        options = self.options
        check_extractor_input(options.extractor, pretraining.shape[1:], argument="extractor")
        extractor = fit_feature_extractor(
            options.extractor,
            pretraining,
            dim=self.extractor_dim if dim is None else dim,
            seed=self.seed,
            epochs=options.extractor_epochs,
            cache=self.extractor_cache,
        )
        return public_head_features(
            extractor,
            pretraining,
            clip=options.feature_clip,
            bias=options.feature_bias,
            quantile=options.feature_quantile,
        )

    def head_request(self, num_classes: int, negatives: np.ndarray) -> HeadRequest:
        """What each agent fits and how it perturbs it."""
        return HeadRequest(
            regularization=self.regularization(num_classes),
            num_classes=num_classes,
            negative_indices=negatives if self.uses_scores else None,
            score_noise_multiplier=self.score_multiplier,
            class_head=self.class_head_kind,
            class_noise_multiplier=self.class_multiplier,
            sgd_epochs=self.options.local_epochs,
            seed=self.seed,
            class_bound=self.options.head_sensitivity,
        )

    def server_head(self, released: list[ReleasedHeads], z: np.ndarray) -> np.ndarray:
        """The server's head (C, d + 1) from the released heads and h̃(distillation set) ``z``."""
        sizes = np.array([r.num_records for r in released], dtype=np.float64)
        heads = np.stack([r.class_head for r in released])  # (N, C, d + 1)
        average = np.einsum("n,ncd->cd", sizes / sizes.sum(), heads)
        if self.aggregation == "average-heads":
            return average
        class_probs = special.softmax(np.einsum("qd,ncd->nqc", z, heads), axis=2)  # (N, Q, C)
        if self.aggregation == "mean-distill":
            soft = mean_soft_labels(class_probs)
        else:
            scores = np.stack([r.score_head for r in released if r.score_head is not None])  # (N, d + 1)
            log_scores = -np.logaddexp(0.0, -(scores @ z.T))  # (N, Q): log σ(sᵢᵀ h̃(x))
            soft = certainty_weighted_soft_labels(class_probs, log_scores)
        start = average if self.start_from_average else np.zeros_like(average)
        return distil_head(z, soft, start=start, epochs=self.options.distill_epochs, seed=self.seed)

    def run(
        self,
        server: ServerData,
        transport: Transport,
        ledger: PrivacyLedger,
        progress: Progress = NO_PROGRESS,
    ) -> MethodOutcome:
        """Pre-train h₀, collect the agents' perturbed heads (charged first), build the server model."""
        assert isinstance(transport, PrivateHeads)  # check_capabilities refused any other
        distill, pretrain = self.split_pool(server.public_features.shape[0])
        sizes = [int(n) for n in transport.record_counts()]
        dim = self.extractor_dim_for(tuple(sizes), server.num_classes)  # public: nᵢ and C
        with progress.step("pre-training h₀ on the public split", total=1) as bar:
            features = self.fit_features(server.public_features[pretrain], dim)
            bar.advance()
        negatives = pretrain.shape[0] if self.uses_scores else 0
        request = self.head_request(server.num_classes, pretrain)
        for release in self.release_events(request, sizes):  # charged before any release
            ledger.charge(release)
        released = transport.private_heads(features, request, progress)
        with progress.step("building the server model", total=1) as bar:
            z = features.transform(server.public_features[distill])  # (Q, d + 1)
            weight = self.server_head(released, z)
            bar.advance()
        return MethodOutcome(
            student=HeadOnFeatures(features, weight).eval(),
            query_indices=np.zeros(0, dtype=np.int64),
            pseudo_labels=np.zeros(0, dtype=np.int64),
            details={
                "fedaux": {
                    "epsilon_scores": self.epsilon_scores,
                    "epsilon_classes": self.class_epsilon if self.class_noised else None,
                    "epsilon_classes_choice": "given" if self.options.epsilon_classes is not None
                    else f"default: total ε {DEFAULT_EPSILON:g} less ε_scores",
                    "head_delta": self.head_delta,
                    "lambda": request.regularization,
                    "lambda_choice": "given" if self.options.lambda_ is not None else "default: 1/ln C",
                    "gaussian": self.options.gaussian,
                    "score_noise_multiplier": self.score_multiplier,
                    "class_noise_multiplier": self.class_multiplier,
                    "class_head": self.class_head_kind,
                    "aggregation": self.aggregation,
                    "extractor": features.extractor.kind,
                    "extractor_dim": features.extractor.dim,
                    "extractor_dim_choice": self.dim_choice(tuple(sizes), server.num_classes, dim),
                    "feature_bias": features.bias,
                    "feature_clip": features.scale,
                    "distillation_size": int(distill.shape[0]),
                    "pretraining_size": int(pretrain.shape[0]),
                    "negatives": negatives,
                    "class_sensitivity": self.class_sensitivity_report(request, sizes),
                },
                "bound": self.options.head_sensitivity if self.class_noised else None,
            },
            statements=self.stated_statements(),
        )

    def dim_choice(self, records: tuple[int, ...], num_classes: int, dim: int) -> dict[str, object]:
        """How h₀'s dimension was chosen: given, or the auto rule with its ladder, threshold and ratio."""
        rule = "given" if self.options.extractor_dim is not None else "auto"
        return {
            "rule": rule,
            "dim": dim,
            "noise_signal_ratio": self.noise_signal_ratio(records, num_classes, dim),
            "threshold": AUTO_DIM_RATIO if rule == "auto" else None,
            "ladder": list(EXTRACTOR_DIM_LADDER) if rule == "auto" else None,
        }

    def class_sensitivity_report(
        self, request: HeadRequest, record_counts: list[int]
    ) -> dict[str, object] | None:
        """The worst agent's class-head Δ under both bounds, labelled, and which one was used.

        ``used`` is the Δ the noise was scaled to and the ledger charged; ``tight``
        (2√2/(λ·nᵢ)) and ``paper`` (Theorem 1, 2√C/(λ·nᵢ)) are shown side by side for the
        smallest nᵢ. None for FedAUX+F's SGD heads, which have no sensitivity bound.
        """
        if self.class_head_kind != "logistic":
            return None
        n_min = min(record_counts)
        return {
            "bound": request.class_bound,
            "used": request.class_sensitivity(n_min),
            "noise_std": request.class_noise_std(n_min),
            "n_min": n_min,
            "tight": class_head_sensitivity(request.num_classes, request.regularization, n_min, "tight"),
            "paper": class_head_sensitivity(request.num_classes, request.regularization, n_min, "paper"),
            "formulas": {"tight": "2√2/(λ·n)", "paper": "2√C/(λ·n) (fedaux-fdp.txt, Theorem 1)"},
        }


@dataclass(frozen=True)
class FedAuxF(FedAuxFdp):
    """FedAUX+F: frozen h₀, private scores, unregularised SGD class heads released without noise.

    The student starts from the clients' nᵢ-weighted average head, then is distilled on
    eq. (1)'s soft labels (FedAUX's server step). Instance ε is ∞: the class heads are
    not private, which is the point of the comparison (Table 3).
    """

    name = "fedaux-f"
    class_head_kind: ClassVar[str] = "sgd"
    start_from_average: ClassVar[bool] = True


@dataclass(frozen=True)
class FedDP(FedAuxFdp):
    """FedD+P: ensemble distillation of the private class heads, soft label (1/N) Σᵢ gᵢ(x); no scores."""

    name = "fedd-p"
    uses_scores: ClassVar[bool] = False
    aggregation: ClassVar[str] = "mean-distill"


@dataclass(frozen=True)
class FedAvgP(FedAuxFdp):
    """FedAVG+P: the server head is the nᵢ-weighted average of the private class heads; one round."""

    name = "fedavg-p"
    uses_scores: ClassVar[bool] = False
    aggregation: ClassVar[str] = "average-heads"
