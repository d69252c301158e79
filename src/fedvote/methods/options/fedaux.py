"""The options of FedAUXfdp and its baselines (``fedvote run --method fedaux-fdp ...``).

Light: the command line builds its flags from these without importing the methods
(:mod:`fedvote.methods.registry`); :mod:`fedvote.methods.fedaux_fdp` imports them from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fedvote.config import DEFAULT_EPSILON
from fedvote.errors import ConfigError
from fedvote.methods.options import method_option
from fedvote.models.config import CLASS_HEAD_BOUNDS

# h₀'s kinds (fitted without labels on the public pre-training split) and the ways each
# head's σ is calibrated.
EXTRACTOR_KINDS: tuple[str, ...] = ("autoencoder", "contrastive", "pca", "random", "identity")
GAUSSIAN_CALIBRATIONS: tuple[str, ...] = ("analytic", "classic")

# The largest h₀ output dimension accepted (a million features: beyond any public pool's).
MAX_EXTRACTOR_DIM = 2**20
# The smallest --lambda taken: the heads' sensitivity 2√2/(λ·nᵢ) stays far from overflowing below it.
MIN_LAMBDA = 1e-9
# h̃'s constant bias coordinate b by default (the rest of the unit norm, √(1 − b²), carries
# h₀'s outputs) and the quantile of the public centred norms h₀'s outputs are divided by
# (0: the smallest, so every pre-training embedding lands on the unit sphere). The paper
# reproduction (experiments/fedaux_fdp.json) keeps the former 0.5 and the median (0.5).
DEFAULT_FEATURE_BIAS = 0.1
DEFAULT_FEATURE_QUANTILE = 0.0


@dataclass(frozen=True)
class FedAuxOptions:
    """Settings of FedAUXfdp and its baselines (``fedvote run --method fedaux-fdp ...``)."""

    epsilon_scores: float | None = method_option(
        None, "ε of each agent's scoring head (default 0.1, the paper's); not for fedd-p/fedavg-p"
    )
    epsilon_classes: float | None = method_option(
        None,
        f"ε of each agent's class head (fedd-p, fedavg-p: their whole budget); default: the "
        f"toolkit's ε = {DEFAULT_EPSILON:g} in all (fedaux-fdp: {DEFAULT_EPSILON:g} less "
        f"--epsilon-scores); the paper's is 0.5",
    )
    class_privacy: bool = method_option(
        True, "perturb the class heads (--no-class-privacy: Table 3's 'None' row of fedaux-fdp)"
    )
    lambda_: float | None = method_option(
        None,
        "λ of both heads' objective, mean loss + λ/2·‖β‖² (eq. 2); default 1/ln C, where a class "
        "head's norm bounds √(2·ln C/λ) and √2/λ meet (the paper's is 0.01)",
        flag="--lambda",
    )
    head_sensitivity: str = method_option(
        "tight",
        "class-head sensitivity: tight 2√2/(λ·nᵢ) (per-record gradient ≤ √2) or the paper's "
        "2√C/(λ·nᵢ) (Theorem 1)",
        choices=CLASS_HEAD_BOUNDS,
    )
    gaussian: str = method_option(
        "analytic",
        "σ of each head: analytic Gaussian (Balle & Wang 2018) or the paper's classic one (ε < 1)",
        choices=GAUSSIAN_CALIBRATIONS,
    )
    extractor: str = method_option(
        "pca", "h₀, fitted without labels on the public pre-training split", choices=EXTRACTOR_KINDS
    )
    extractor_dim: int | None = method_option(
        None,
        "output dimension d of h₀; default auto: the largest of 32, 24, 16, 12, 8, 6, 4 whose "
        "class-head noise is at most 0.12× a head's largest mean coefficient (public quantities "
        "only), else 4",
    )
    extractor_epochs: int = method_option(30, "training epochs of a learned h₀ (autoencoder, contrastive)")
    feature_clip: float | None = method_option(
        None, "public constant B: h₀ outputs are centred, divided by B and clipped to norm 1 "
        "(default: the --feature-quantile of the centred norms on the pre-training split)"
    )
    feature_quantile: float = method_option(
        DEFAULT_FEATURE_QUANTILE,
        "quantile of the pre-training split's centred h₀ norms that is B when --feature-clip is "
        "not given (0: the smallest, every embedding on the unit sphere; 0.5: the median, the "
        "former default)",
    )
    feature_bias: float = method_option(
        DEFAULT_FEATURE_BIAS, "h̃'s constant bias coordinate b in (0, 1); h₀'s outputs get norm ≤ √(1 − b²)"
    )
    distill_fraction: float = method_option(
        0.8, "share of the public pool used for distillation; the rest pre-trains h₀"
    )
    distill_epochs: int = method_option(30, "epochs of the student's distillation")
    local_epochs: int = method_option(40, "epochs of FedAUX+F's unregularised class heads")

    def __post_init__(self) -> None:
        for name in ("epsilon_scores", "epsilon_classes", "lambda_"):
            value = getattr(self, name)
            if value is not None and (not value > 0 or not math.isfinite(value)):
                raise ConfigError(name, f"must be a finite number > 0, got {value}")
        if self.lambda_ is not None and self.lambda_ < MIN_LAMBDA:  # 1/λ in the sensitivity would overflow
            floor = f"must be at least {MIN_LAMBDA:g} (the heads' sensitivity grows as 1/λ)"
            raise ConfigError("lambda_", f"{floor}, got {self.lambda_}")
        if self.head_sensitivity not in CLASS_HEAD_BOUNDS:
            choices = ", ".join(CLASS_HEAD_BOUNDS)
            raise ConfigError("head_sensitivity", f"must be one of {choices}, got {self.head_sensitivity!r}")
        if self.gaussian not in GAUSSIAN_CALIBRATIONS:
            choices = ", ".join(GAUSSIAN_CALIBRATIONS)
            raise ConfigError("gaussian", f"must be one of {choices}, got {self.gaussian!r}")
        if self.extractor not in EXTRACTOR_KINDS:
            choices = ", ".join(EXTRACTOR_KINDS)
            raise ConfigError("extractor", f"must be one of {choices}, got {self.extractor!r}")
        for name in ("extractor_dim", "extractor_epochs", "distill_epochs", "local_epochs"):
            value = getattr(self, name)
            if name == "extractor_dim" and value is None:  # auto (FedAuxFdp.extractor_dim_for)
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"must be an integer >= 1, got {value!r}")
        # beyond any pool's features; float maths overflows
        if self.extractor_dim is not None and self.extractor_dim > MAX_EXTRACTOR_DIM:
            limit = MAX_EXTRACTOR_DIM
            raise ConfigError("extractor_dim", f"must be at most {limit}, got {self.extractor_dim}")
        if self.feature_clip is not None and not self.feature_clip > 0:
            raise ConfigError("feature_clip", f"must be > 0, got {self.feature_clip}")
        if not 0.0 <= self.feature_quantile <= 1.0:
            raise ConfigError("feature_quantile", f"must lie in [0, 1], got {self.feature_quantile}")
        if not 0.0 < self.feature_bias < 1.0:
            raise ConfigError("feature_bias", f"must lie in (0, 1), got {self.feature_bias}")
        if not 0.0 < self.distill_fraction < 1.0:
            raise ConfigError("distill_fraction", f"must lie in (0, 1), got {self.distill_fraction}")
