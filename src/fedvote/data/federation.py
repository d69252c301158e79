"""The federation: agents' private labelled splits, the server's public pool, the test set.

The public pool's true labels are kept only to *measure* pseudo-label accuracy; no
method ever receives them (methods see a :class:`ServerData`, see ``server_data``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedvote.data.datasets import Dataset
from fedvote.data.partition import PartitionSpec, partition_indices
from fedvote.errors import ConfigError


@dataclass(frozen=True, eq=False)
class LabeledData:
    """Examples ``features`` (n, *shape) float32 with ``labels`` (n,) int64."""

    features: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return int(self.labels.shape[0])


@dataclass(frozen=True, eq=False)
class ServerData:
    """What the server (and so a method) may see: the public pool and the test set.

    ``public_features`` (P, *shape) are unlabelled; agents hold a copy too, so only
    query indices into the pool need to travel.
    """

    public_features: np.ndarray
    test: LabeledData
    num_classes: int
    example_shape: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class Federation:
    """Private splits of ``num_agents`` agents plus the server's public pool and test set."""

    dataset_name: str
    agents: tuple[LabeledData, ...]
    public: LabeledData
    test: LabeledData
    num_classes: int
    example_shape: tuple[int, ...]

    @property
    def num_agents(self) -> int:
        """Number of agents N."""
        return len(self.agents)

    def server_data(self) -> ServerData:
        """The server's view: public pool features (no labels) and the test set."""
        return ServerData(
            public_features=self.public.features,
            test=self.test,
            num_classes=self.num_classes,
            example_shape=self.example_shape,
        )

    def agent_sizes(self) -> np.ndarray:
        """Records per agent, (N,)."""
        return np.array([len(a) for a in self.agents], dtype=np.int64)

    def class_counts(self) -> np.ndarray:
        """Records per agent and class, (N, C)."""
        return np.stack([np.bincount(a.labels, minlength=self.num_classes) for a in self.agents])


def build_federation(
    dataset: Dataset,
    *,
    num_agents: int,
    partition: PartitionSpec,
    public_fraction: float = 0.2,
    test_fraction: float = 0.2,
    agent_fraction: float | None = None,
    seed: int = 0,
) -> Federation:
    """Split ``dataset`` into agents' private data, a public pool and a test set.

    The public pool and the test set are drawn uniformly at random (the target
    distribution); the rest — or ``agent_fraction`` of the data — is partitioned among
    agents by ``partition``. Deterministic under ``seed``.
    """
    for name, value in (("public_fraction", public_fraction), ("test_fraction", test_fraction)):
        if not 0.0 < value < 1.0:
            raise ConfigError(name, f"must lie in (0, 1), got {value}")
    if agent_fraction is None:
        agent_fraction = 1.0 - public_fraction - test_fraction
    if not 0.0 < agent_fraction < 1.0:
        raise ConfigError("agent_fraction", f"must lie in (0, 1), got {agent_fraction}")
    total = public_fraction + test_fraction + agent_fraction
    if total > 1.0 + 1e-9:
        raise ConfigError(
            "public_fraction",
            f"public ({public_fraction}) + test ({test_fraction}) + agent ({agent_fraction}) "
            f"fractions sum to {total:g} > 1",
        )
    n = len(dataset)
    num_public = int(round(public_fraction * n))
    num_test = int(round(test_fraction * n))
    num_private = min(int(round(agent_fraction * n)), n - num_public - num_test)
    if min(num_public, num_test, num_private) < 1:
        raise ConfigError(
            "public_fraction",
            f"{n} records give {num_private} private, {num_public} public and {num_test} test "
            f"records; each part needs at least one",
        )
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xFED]))
    order = rng.permutation(n)
    test_idx = order[:num_test]
    public_idx = order[num_test : num_test + num_public]
    private_idx = order[num_test + num_public : num_test + num_public + num_private]
    parts = partition_indices(dataset.labels[private_idx], num_agents, partition, rng)

    def take(indices: np.ndarray) -> LabeledData:
        return LabeledData(dataset.features[indices], dataset.labels[indices])

    return Federation(
        dataset_name=dataset.name,
        agents=tuple(take(private_idx[p]) for p in parts),
        public=take(public_idx),
        test=take(test_idx),
        num_classes=dataset.num_classes,
        example_shape=dataset.example_shape,
    )
