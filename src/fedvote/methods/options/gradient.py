"""The settings of the gradient methods (FedAvg, DP-FedAvg, DP-FedSGD, PriFedSync), as options.

Each method's options dataclass names the gradient settings it takes with
:func:`gradient_option` (``--rounds``, …, ``--gradient-model``); :class:`GradientSettings`
validates them. Light: the command line builds its flags from these without importing
the methods (:mod:`fedvote.methods.registry`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from fedvote.errors import ConfigError
from fedvote.methods.options import method_option
from fedvote.models.config import MODEL_NAMES, OPTIMIZERS
from fedvote.privacy.config import TREE_ESTIMATORS

# DP-FedAvg's noise placements (:mod:`fedvote.methods.dp_fedavg`): every agent adds a share
# and the updates are summed by secure aggregation (default); Algorithm 5 as the paper
# writes it (the server sees each noisy update); the server adds the noise (Algorithm 3).
NOISE_PLACEMENTS: tuple[str, ...] = ("distributed", "distributed-unmasked", "server")
# DP-FedAvg's clip: fixed at S, or adaptive to a privately estimated quantile (Andrew et al. 2021;
# :mod:`fedvote.privacy.adaptive_clipping`), starting from S.
CLIPPINGS: tuple[str, ...] = ("fixed", "adaptive")
# FedAvg's and DP-FedAvg's local updates: plain, or with the DANN loss (FedAvg+DA, DP-FedAvg+DA).
LOCAL_DA: tuple[str, ...] = ("none", "dann")


# The settings of the gradient methods, each a ``fedvote run`` flag (``--rounds``, …,
# ``--gradient-model``): name -> (default, help, choices). ``None`` means the method's own
# default (its class docstring says which; its result's ``details`` record the values used).
# A method's options dataclass (e.g. :class:`FedAvgOptions` below) names the ones it
# takes with :func:`gradient_option`; a flag it does not take is refused by name.
_GRADIENT_OPTIONS: dict[str, tuple[Any, str, tuple[str, ...] | None]] = {
    "rounds": (
        None,
        "Gradient methods: communication rounds T [default: 100; PriFedSync 200, 100 with small clients].",
        None,
    ),
    "sampling_rate": (
        None,
        "Gradient methods: agent sampling probability q per round [default: 0.05; DP-FedSGD 1; "
        "PriFedSync 0.5, 1 with small clients; DP-FedAvg with --epsilon: planned from N and the target, "
        "the smallest q whose noise on the averaged update is within 25% of full participation's, at most "
        "100 agents expected a round, at least 0.05 (0.2 with 50 or 100 agents at epsilon 4)].",
        None,
    ),
    "local_steps": (
        None,
        "Gradient methods: local (DP-)SGD iterations E per round [default: 20; DP-FedSGD 1; PriFedSync 38, "
        "1 with small clients].",
        None,
    ),
    "clip_norm": (None, "DP-FedAvg update clip S [default: 0.08].", None),
    "per_sample_clip": (None, "DP-SGD per-record clip C [default: 1].", None),
    "learning_rate": (None, "Gradient methods: local SGD step size.", None),
    "lr_decay": (None, "Gradient methods: step size decay per round.", None),
    "batch_size": (
        None,
        "Local mini-batch size (PriFedSync: the expected size of its Poisson batches) [default: 32; "
        "PriFedSync 16, or the smallest client's records when it holds under 320].",
        None,
    ),
    "batch_sampling_rate": (None, "DP-FedSGD Poisson batch rate q_b [default: 0.25].", None),
    "noise": (
        "distributed",
        "DP-FedAvg noise: distributed = every agent adds its share and the server gets only the sum "
        "(Alg. 5, sample hidden from the server); distributed-unmasked = Alg. 5 as the paper writes it "
        "(the server sees each noisy update and who was sampled; ε is stated against the server); "
        "server = Alg. 3 (trusted server adds the noise).",
        NOISE_PLACEMENTS,
    ),
    "local_da": (
        None,
        "FedAvg / DP-FedAvg local updates: 'none', or 'dann' (FedAvg+DA, DP-FedAvg+DA: the model carries a "
        "domain classifier behind gradient reversal and every local step adds the DANN loss against the "
        "public pool; λ = 2/(1+e^(-10 t/T))-1 over the rounds) [default: none].",
        LOCAL_DA,
    ),
    "clipping": (
        "fixed",
        "DP-FedAvg clip: fixed = every update clipped to --clip-norm S; adaptive = the clip starts at S and "
        "follows the privately estimated --clip-quantile of the update norms (Andrew et al. 2021: "
        "C <- C*exp(-eta_C*(noisy fraction - quantile)); the noisy count is in the same Gaussian, so "
        "the headline epsilon covers it).",
        CLIPPINGS,
    ),
    "clip_quantile": (
        0.5,
        "DP-FedAvg --clipping adaptive: the target quantile gamma of the update norms.",
        None,
    ),
    "clip_learning_rate": (
        0.2,
        "DP-FedAvg --clipping adaptive: the clip's geometric step eta_C at the paper's count noise; "
        "applied as eta_C*min(1, (q*N/20)/sigma_b), damped where the count is noisier (details.clip_step).",
        None,
    ),
    "clip_count_stddev": (
        None,
        "DP-FedAvg --clipping adaptive: noise std sigma_b of the count of updates under the clip [default: "
        "max(expected agents per round / 20, z/(2*sqrt(0.01))), so the count takes at most 1 % of z^-2, "
        "the paper's share].",
        None,
    ),
    "epoch_rounds": (
        None,
        "DP-FTRL: rounds per epoch K; the agents form K fixed groups, group t mod K takes part in round t, "
        "and the tree restarts every K rounds [default: ceil(N/100), at most 100 agents a round: 1 with "
        "up to 100 agents].",
        None,
    ),
    "server_learning_rate": (None, "DP-FTRL: the server's step on the noisy prefix sum [default: 1].", None),
    "server_momentum": (
        None,
        "DP-FTRL: the server's heavy-ball momentum gamma on the increments of the noisy prefix sums "
        "(Kairouz et al. 2021's DP-FTRLM; post-processing, the same epsilon); with it, a step of "
        "--server-learning-rate 1-gamma keeps the long-run step [default: 0, plain DP-FTRL: measured "
        "below it on digits and MNIST, docs/defaults.md].",
        None,
    ),
    "tree_estimator": (
        "honaker",
        "DP-FTRL: how the prefix sums are read from the tree: honaker = every node of the complete tree "
        "released and each estimated from itself and its children (Honaker 2015; Kairouz et al. 2021, "
        "App. B.1: lower variance); plain = one node a round, the prefix its binary decomposition. The "
        "same privacy bound for either.",
        TREE_ESTIMATORS,
    ),
    "gradient_model": (
        None,
        "Gradient methods: the global model [default: mlp; logistic for a noised method on feature "
        "vectors of at least 1024 features (e.g. --input-features patch), and for DP-FedSGD and "
        "PriFedSync with small clients].",
        MODEL_NAMES,
    ),
}
GRADIENT_OPTION_NAMES: frozenset[str] = frozenset(_GRADIENT_OPTIONS)

# ``--center-inputs/--no-center-inputs``, shared with PriFedSync (which declares its own field,
# default on, and handles it itself): kept out of :data:`GRADIENT_OPTION_NAMES` so that
# :meth:`GradientSettings.overrides` never hands it to PriFedSync; the baselines' ``from_config``
# reads it. The help is the one ``fedvote run --help`` shows (dp-fedavg is the first owner).
CENTER_INPUTS_HELP = (
    "Subtract the public pool's mean from every input: a public constant sent down with the model, "
    "subtracted by every agent before training (before clipping) and applied by the released model; "
    "it costs no privacy (--no-center-inputs: raw inputs) [default: on for dp-fedsgd and prifedsync, "
    "off for fedavg and dp-fedavg]"
)


def center_inputs_option() -> Any:
    """The options-dataclass field of ``--center-inputs`` for a gradient baseline (None: its default)."""
    return method_option(None, CENTER_INPUTS_HELP)


def gradient_option(name: str) -> Any:
    """The options-dataclass field of gradient setting ``name`` (its flag is ``--name``)."""
    default, help_text, choices = _GRADIENT_OPTIONS[name]
    return method_option(default, help_text, choices=choices)


class GradientSettings:
    """What the options dataclasses of the gradient methods share: validation, overrides.

    A mixin of frozen dataclasses whose fields include some of the gradient settings
    (made with :func:`gradient_option`); any other fields (PriFedSync's own) are left to
    the subclass.
    """

    def __post_init__(self) -> None:
        check_gradient_settings(**self._gradient_values())
        center = getattr(self, "center_inputs", None)
        if center is not None and not isinstance(center, bool):
            raise ConfigError("center_inputs", f"must be true or false, got {center!r}")

    def _gradient_values(self) -> dict[str, Any]:
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        return {f.name: getattr(self, f.name) for f in fields if f.name in GRADIENT_OPTION_NAMES}

    def overrides(self) -> dict[str, Any]:
        """The gradient settings given (not ``None``), as keyword arguments of the method.

        ``gradient_model`` becomes the method's ``model``.
        """
        given = {name: value for name, value in self._gradient_values().items() if value is not None}
        if "gradient_model" in given:
            given["model"] = given.pop("gradient_model")
        return given


def check_gradient_settings(**values: object) -> None:
    """Refuse out-of-range gradient settings (``None`` = not given)."""
    checks: dict[str, tuple[str, object]] = {
        "rounds": ("an integer >= 1", lambda v: isinstance(v, int) and v >= 1),
        "local_steps": ("an integer >= 1", lambda v: isinstance(v, int) and v >= 1),
        "batch_size": ("an integer >= 1", lambda v: isinstance(v, int) and v >= 1),
        "sampling_rate": ("in (0, 1]", lambda v: 0.0 < v <= 1.0),
        "batch_sampling_rate": ("in (0, 1]", lambda v: 0.0 < v <= 1.0),
        "clip_norm": ("> 0", lambda v: v > 0 and math.isfinite(v)),
        "per_sample_clip": ("> 0", lambda v: v > 0 and math.isfinite(v)),
        "learning_rate": ("> 0", lambda v: v > 0 and math.isfinite(v)),
        "lr_decay": ("in (0, 1]", lambda v: 0.0 < v <= 1.0),
        "clip_quantile": ("in (0, 1)", lambda v: 0.0 < v < 1.0),
        "clip_learning_rate": ("> 0", lambda v: v > 0 and math.isfinite(v)),
        "clip_count_stddev": ("> 0", lambda v: v > 0 and math.isfinite(v)),
        "epoch_rounds": ("an integer >= 1", lambda v: isinstance(v, int) and v >= 1),
        "server_learning_rate": ("> 0", lambda v: v > 0 and math.isfinite(v)),
        "server_momentum": ("in [0, 1)", lambda v: 0.0 <= v < 1.0),
    }
    for name, value in values.items():
        if value is None:
            continue
        if name == "noise":
            if value not in NOISE_PLACEMENTS:
                raise ConfigError("noise", f"must be one of {', '.join(NOISE_PLACEMENTS)}, got {value!r}")
            continue
        if name == "clipping":
            if value not in CLIPPINGS:
                raise ConfigError("clipping", f"must be one of {', '.join(CLIPPINGS)}, got {value!r}")
            continue
        if name == "tree_estimator":
            if value not in TREE_ESTIMATORS:
                raise ConfigError(name, f"must be one of {', '.join(TREE_ESTIMATORS)}, got {value!r}")
            continue
        if name == "local_da":
            if value not in LOCAL_DA:
                raise ConfigError("local_da", f"must be one of {', '.join(LOCAL_DA)}, got {value!r}")
            continue
        if name in ("model", "gradient_model"):
            if value not in MODEL_NAMES:
                raise ConfigError(name, f"unknown model {value!r}; choose from {', '.join(MODEL_NAMES)}")
            continue
        what, ok = checks[name]
        if not ok(value):  # type: ignore[operator]
            raise ConfigError(name, f"must be {what}, got {value!r}")


@dataclass(frozen=True)
class FedAvgOptions(GradientSettings):
    """The settings of ``--method fedavg`` (each a ``fedvote run`` flag; None: the method's default)."""

    rounds: int | None = gradient_option("rounds")
    sampling_rate: float | None = gradient_option("sampling_rate")
    local_steps: int | None = gradient_option("local_steps")
    learning_rate: float | None = gradient_option("learning_rate")
    lr_decay: float | None = gradient_option("lr_decay")
    batch_size: int | None = gradient_option("batch_size")
    gradient_model: str | None = gradient_option("gradient_model")
    center_inputs: bool | None = center_inputs_option()
    local_da: str | None = gradient_option("local_da")


@dataclass(frozen=True)
class DpFedAvgOptions(GradientSettings):
    """The settings of ``--method dp-fedavg`` (each a ``fedvote run`` flag; None: the method's default)."""

    rounds: int | None = gradient_option("rounds")
    sampling_rate: float | None = gradient_option("sampling_rate")
    local_steps: int | None = gradient_option("local_steps")
    clip_norm: float | None = gradient_option("clip_norm")
    learning_rate: float | None = gradient_option("learning_rate")
    lr_decay: float | None = gradient_option("lr_decay")
    batch_size: int | None = gradient_option("batch_size")
    noise: str = gradient_option("noise")
    gradient_model: str | None = gradient_option("gradient_model")
    center_inputs: bool | None = center_inputs_option()
    local_da: str | None = gradient_option("local_da")
    clipping: str = gradient_option("clipping")
    clip_quantile: float = gradient_option("clip_quantile")
    clip_learning_rate: float = gradient_option("clip_learning_rate")
    clip_count_stddev: float | None = gradient_option("clip_count_stddev")


@dataclass(frozen=True)
class DpFtrlOptions(GradientSettings):
    """The settings of ``--method dp-ftrl`` (each a ``fedvote run`` flag; None: the method's default)."""

    rounds: int | None = gradient_option("rounds")
    epoch_rounds: int | None = gradient_option("epoch_rounds")
    local_steps: int | None = gradient_option("local_steps")
    clip_norm: float | None = gradient_option("clip_norm")
    learning_rate: float | None = gradient_option("learning_rate")
    lr_decay: float | None = gradient_option("lr_decay")
    batch_size: int | None = gradient_option("batch_size")
    server_learning_rate: float | None = gradient_option("server_learning_rate")
    server_momentum: float | None = gradient_option("server_momentum")
    tree_estimator: str | None = gradient_option("tree_estimator")
    gradient_model: str | None = gradient_option("gradient_model")
    center_inputs: bool | None = center_inputs_option()


@dataclass(frozen=True)
class DpFedSgdOptions(GradientSettings):
    """The settings of ``--method dp-fedsgd`` (each a ``fedvote run`` flag; None: the method's default)."""

    rounds: int | None = gradient_option("rounds")
    sampling_rate: float | None = gradient_option("sampling_rate")
    local_steps: int | None = gradient_option("local_steps")
    per_sample_clip: float | None = gradient_option("per_sample_clip")
    learning_rate: float | None = gradient_option("learning_rate")
    lr_decay: float | None = gradient_option("lr_decay")
    batch_sampling_rate: float | None = gradient_option("batch_sampling_rate")
    gradient_model: str | None = gradient_option("gradient_model")
    center_inputs: bool | None = center_inputs_option()


# PriFedSync's helper F_i (eq. 2.1 of its paper).
HELPERS: tuple[str, ...] = ("identity", "interpolate")


@dataclass(frozen=True)
class PriFedSyncOptions(GradientSettings):
    """PriFedSync's settings (``fedvote run --method prifedsync`` flags).

    The gradient settings it shares with the gradient baselines (``--rounds``, …; None:
    PriFedSync's own default) and its own (``--helper``, …).
    """

    rounds: int | None = gradient_option("rounds")
    sampling_rate: float | None = gradient_option("sampling_rate")
    local_steps: int | None = gradient_option("local_steps")
    batch_size: int | None = gradient_option("batch_size")
    per_sample_clip: float | None = gradient_option("per_sample_clip")
    learning_rate: float | None = gradient_option("learning_rate")
    gradient_model: str | None = gradient_option("gradient_model")
    helper: str = method_option(
        "interpolate",
        "PriFedSync helper F_i: identity (one global model) or interpolate (eq. 2.1)",
        choices=HELPERS,
    )
    alpha: float = method_option(0.1, "PriFedSync: α of the interpolated helper (1−α)·w⁽ⁱ⁾ + α·w̃_global")
    server_rate: float = method_option(1.0, "PriFedSync: server step η of w̃_global")
    optimizer: str | None = method_option(
        None, "PriFedSync: local noisy optimizer [default: adam; sgd with small clients]", choices=OPTIMIZERS
    )
    target_accuracy: float | None = method_option(
        None,
        "PriFedSync: stop at the first round whose released global model reaches this accuracy "
        "on the labelled public validation set (ε stays that of --rounds)",
    )
    validation_size: int | None = method_option(
        None,
        "Public-pool points labelled as a public validation set (weighted-pate: scores "
        "teachers, default 500; prifedsync: the stop rule, default the whole pool)",
    )
    validation_file: str | None = method_option(
        None, "A labelled public npz (x, y) to score teachers on instead of a pool slice."
    )
    client_test_size: int = method_option(
        200, "PriFedSync: test records per client for the private-label diagnostics (not released)"
    )
    center_inputs: bool = method_option(
        True,
        "PriFedSync: subtract the public pool's mean from every input (a public constant sent with the "
        "helper; --no-center-inputs: raw inputs)",
    )

    def overrides(self) -> dict[str, Any]:
        """The gradient settings given (:meth:`GradientSettings.overrides`) and the optimizer, if given."""
        given = super().overrides()
        if self.optimizer is not None:
            given["optimizer"] = self.optimizer
        return given

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.helper not in HELPERS:
            raise ConfigError("helper", f"must be one of {', '.join(HELPERS)}, got {self.helper!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ConfigError("alpha", f"must lie in [0, 1], got {self.alpha}")
        if not 0.0 < self.server_rate <= 1.0:
            raise ConfigError("server_rate", f"must lie in (0, 1], got {self.server_rate}")
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            raise ConfigError("optimizer", f"must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.target_accuracy is not None and not 0.0 < self.target_accuracy <= 1.0:
            raise ConfigError("target_accuracy", f"must lie in (0, 1], got {self.target_accuracy}")
        size = self.validation_size
        if size is not None and (isinstance(size, bool) or size < 1):
            raise ConfigError("validation_size", f"must be an integer >= 1, got {size!r}")
        if isinstance(self.client_test_size, bool) or self.client_test_size < 1:
            raise ConfigError("client_test_size", f"must be an integer >= 1, got {self.client_test_size}")
