"""Run configuration: frozen dataclasses, validated at construction, JSON round-trippable."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedvote.data.partition import PartitionSpec
from fedvote.errors import ConfigError
from fedvote.methods import METHODS
from fedvote.methods.gradient import GradientOptions
from fedvote.methods.options import build_options
from fedvote.models.features import FEATURE_KINDS
from fedvote.models.training import TrainingConfig
from fedvote.privacy.accountant import ACCOUNTANTS
from fedvote.privacy.events import KNN_BOUNDS

# With neither --sigma nor --epsilon, σ is calibrated to this agent-level ε (the
# operating point of the voting paper's Table 1).
DEFAULT_EPSILON = 4.0


@dataclass(frozen=True)
class FederationConfig:
    """Which data, how many agents, how it is split.

    ``dataset`` names the agents' data (several, comma-separated, with ``target``);
    ``target`` the domain of the public pool and the test set (None: the same dataset).
    ``public_fraction`` (default by scenario, see :func:`fedvote.runner.make_federation`)
    and ``test_fraction`` size the pool and the test set; agents split the rest by
    ``partition``. ``image_size`` resamples all images to a square of that side.
    """

    dataset: str = "digits"
    data_dir: str | None = None
    agents: int = 50
    partition: PartitionSpec = field(default_factory=PartitionSpec)
    public_fraction: float | None = None
    test_fraction: float = 0.15
    target: str | None = None
    image_size: int | None = None
    label_column: str = "label"

    def __post_init__(self) -> None:
        if self.agents < 1:
            raise ConfigError("agents", f"must be at least 1, got {self.agents}")
        if self.image_size is not None and self.image_size < 1:
            raise ConfigError("image_size", f"must be at least 1, got {self.image_size}")


@dataclass(frozen=True)
class PrivacyConfig:
    """Noise and accounting.

    Give ``sigma`` (aggregate noise std; 0 = non-private reference) *or* ``epsilon``
    (σ is calibrated so the ε at ``delta`` at ``calibrate_level`` — by default the
    method's own, agent level for voting and DP-FedAvg — does not exceed it). With
    neither, ``epsilon`` defaults to :data:`DEFAULT_EPSILON`.

    ``min_responders`` is t (default: all agents). ``noise_seed`` seeds the privacy
    noise for a reproducible simulation; ``None`` draws it from OS entropy.

    ``ledger`` is a SQLite file where every release is charged before it happens,
    accumulating across runs on the same federation; ``budget_epsilon`` caps that
    federation's agent-level ε there (a run that would exceed it stops before releasing).

    ``secure_sum`` routes the in-process vote sums through the pairwise-mask secure-sum
    protocol (:mod:`fedvote.aggregation.secure_sum`); it changes what the simulated server
    sees, not ε.
    """

    sigma: float | None = None
    epsilon: float | None = None
    delta: float = 1e-3
    accountant: str = "pld"
    min_responders: int | None = None
    noise_seed: int | None = None
    ledger: str | None = None
    budget_epsilon: float | None = None
    calibrate_level: str | None = None
    secure_sum: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.secure_sum, bool):
            raise ConfigError("secure_sum", f"must be true or false, got {self.secure_sum!r}")
        if self.calibrate_level not in (None, "agent", "instance"):
            raise ConfigError(
                "calibrate_level", f"must be 'agent' or 'instance', got {self.calibrate_level!r}"
            )
        if self.budget_epsilon is not None and self.ledger is None:
            raise ConfigError("budget_epsilon", "a budget needs a ledger to keep it: add --ledger PATH")
        if self.budget_epsilon is not None and not self.budget_epsilon > 0:
            raise ConfigError("budget_epsilon", f"must be > 0, got {self.budget_epsilon}")
        if self.sigma is not None and self.epsilon is not None:
            raise ConfigError("sigma", "give either sigma or epsilon, not both")
        if self.sigma is not None and not self.sigma >= 0:
            raise ConfigError("sigma", f"must be >= 0, got {self.sigma}")
        if self.epsilon is not None and not self.epsilon > 0:
            raise ConfigError("epsilon", f"must be > 0, got {self.epsilon}")
        if not 0.0 < self.delta < 1.0:
            raise ConfigError("delta", f"must lie in (0, 1), got {self.delta}")
        if self.accountant not in ACCOUNTANTS:
            raise ConfigError(
                "accountant",
                f"unknown accountant {self.accountant!r}; choose from {', '.join(ACCOUNTANTS)}",
            )
        if self.min_responders is not None and self.min_responders < 1:
            raise ConfigError("min_responders", f"must be at least 1, got {self.min_responders}")

    @property
    def target_epsilon(self) -> float | None:
        """The ε that σ is calibrated to, or None when σ is given."""
        if self.sigma is not None:
            return None
        return self.epsilon if self.epsilon is not None else DEFAULT_EPSILON


@dataclass(frozen=True)
class KnnOptions:
    """Private-kNN-FL settings (``method="private-knn-fl"``; ignored by other methods).

    ``k`` neighbours per agent, or (when ``k`` is None) ``round(k_fraction · n_i)`` of each
    agent's n_i records, at least 1 (the voting paper uses 5 %). ``features`` is the public
    feature extractor φ (:data:`fedvote.models.features.FEATURE_KINDS`), fitted on the
    public pool only, with ``feature_dim`` outputs (pca, random, autoencoder);
    ``feature_module`` is the TorchScript file for ``features="module"``; ``normalize``
    scales φ's outputs to unit norm. ``bound`` is the instance-level sensitivity used for
    accounting: ``"tight"`` (√2/k_min) or the paper's ``"paper"`` (√(2/k_min)).
    """

    k: int | None = None
    k_fraction: float = 0.05
    features: str = "pca"
    feature_dim: int = 50
    feature_module: str | None = None
    normalize: bool = False
    bound: str = "tight"

    def __post_init__(self) -> None:
        if self.k is not None and (isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1):
            raise ConfigError("k", f"must be an integer >= 1, got {self.k!r}")
        if not 0.0 < self.k_fraction <= 1.0:
            raise ConfigError("k_fraction", f"must lie in (0, 1], got {self.k_fraction}")
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


@dataclass(frozen=True)
class RunConfig:
    """Everything needed to rerun a run: method, federation, privacy, training, seed."""

    method: str = "pate-fl"
    federation: FederationConfig = field(default_factory=FederationConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    teacher: TrainingConfig = field(default_factory=TrainingConfig)
    student: TrainingConfig = field(default_factory=lambda: TrainingConfig(model="auto"))
    knn: KnnOptions = field(default_factory=KnnOptions)
    gradient: GradientOptions = field(default_factory=GradientOptions)
    queries: int | None = None
    self_training_rounds: int = 2
    seed: int = 0
    # The method's own settings (its ``options_type`` fields); validated on construction.
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(
                "method", f"unknown method {self.method!r}; choose from {', '.join(sorted(METHODS))}"
            )
        self.method_options()
        if self.self_training_rounds < 0:
            raise ConfigError(
                "self_training_rounds", f"must be >= 0, got {self.self_training_rounds}"
            )
        if self.queries is not None and self.queries < 1:
            raise ConfigError("queries", f"must be at least 1, got {self.queries}")

    def method_options(self) -> Any:
        """The method's options dataclass built from ``options`` (None: it has none)."""
        return build_options(self.method, METHODS[self.method].options_type, self.options)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready nested dict (the ``config`` key of result.json)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Rebuild a config from :meth:`to_dict` output (unknown keys are refused)."""
        data = dict(data)
        federation = dict(data.pop("federation", {}))
        partition = PartitionSpec(**federation.pop("partition", {}))
        return cls(
            federation=FederationConfig(partition=partition, **federation),
            privacy=PrivacyConfig(**data.pop("privacy", {})),
            teacher=TrainingConfig(**data.pop("teacher", {})),
            student=TrainingConfig(**data.pop("student", {})),
            knn=KnnOptions(**data.pop("knn", {})),
            gradient=GradientOptions(**data.pop("gradient", {})),
            **data,
        )


def load_run_config(path: str | Path) -> RunConfig:
    """The RunConfig stored in ``path``: a result.json (its ``config``) or a bare config."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ConfigError("config", f"cannot read {path}: {error}") from error
    if not isinstance(data, dict):
        raise ConfigError("config", f"{path} does not hold a JSON object")
    try:
        return RunConfig.from_dict(data.get("config", data))
    except TypeError as error:
        raise ConfigError("config", f"{path} is not a fedvote config: {error}") from error
