"""Run configuration: frozen dataclasses, validated at construction, JSON round-trippable."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from fedvote.data.partition import PartitionSpec
from fedvote.errors import ConfigError
from fedvote.methods import METHODS
from fedvote.models.training import TrainingConfig
from fedvote.privacy.accountant import ACCOUNTANTS

# With neither --sigma nor --epsilon, σ is calibrated to this agent-level ε (the
# operating point of the voting paper's Table 1).
DEFAULT_EPSILON = 4.0


@dataclass(frozen=True)
class FederationConfig:
    """Which data, how many agents, how it is split.

    ``public_fraction`` and ``test_fraction`` of the dataset form the server's public
    pool and the test set; the rest is partitioned among ``agents`` by ``partition``.
    """

    dataset: str = "digits"
    data_dir: str | None = None
    agents: int = 50
    partition: PartitionSpec = field(default_factory=PartitionSpec)
    public_fraction: float = 0.15
    test_fraction: float = 0.15

    def __post_init__(self) -> None:
        if self.agents < 1:
            raise ConfigError("agents", f"must be at least 1, got {self.agents}")


@dataclass(frozen=True)
class PrivacyConfig:
    """Noise and accounting.

    Give ``sigma`` (aggregate noise std; 0 = non-private reference) *or* ``epsilon``
    (σ is calibrated so the agent-level ε at ``delta`` does not exceed it). With
    neither, ``epsilon`` defaults to :data:`DEFAULT_EPSILON`.

    ``min_responders`` is t (default: all agents). ``noise_seed`` seeds the privacy
    noise for a reproducible simulation; ``None`` draws it from OS entropy.

    ``ledger`` is a SQLite file where every release is charged before it happens,
    accumulating across runs on the same federation; ``budget_epsilon`` caps that
    federation's agent-level ε there (a run that would exceed it stops before releasing).
    """

    sigma: float | None = None
    epsilon: float | None = None
    delta: float = 1e-3
    accountant: str = "pld"
    min_responders: int | None = None
    noise_seed: int | None = None
    ledger: str | None = None
    budget_epsilon: float | None = None

    def __post_init__(self) -> None:
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
class RunConfig:
    """Everything needed to rerun a run: method, federation, privacy, training, seed."""

    method: str = "pate-fl"
    federation: FederationConfig = field(default_factory=FederationConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    teacher: TrainingConfig = field(default_factory=TrainingConfig)
    student: TrainingConfig = field(default_factory=lambda: TrainingConfig(model="auto"))
    queries: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(
                "method", f"unknown method {self.method!r}; choose from {', '.join(sorted(METHODS))}"
            )
        if self.queries is not None and self.queries < 1:
            raise ConfigError("queries", f"must be at least 1, got {self.queries}")

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
            **data,
        )
