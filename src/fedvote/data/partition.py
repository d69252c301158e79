"""Partitioners: split labelled records among agents, deterministically under a seed.

Each partitioner maps ``labels`` (n,) to a list of ``num_agents`` index arrays that
together hold every record exactly once (the ``classes`` scheme may leave records of
a class out only if no agent holds that class, which it refuses instead). The
``unbalanced`` schemes are the exception: they deliberately leave out part of each tail
class, to make the data long-tailed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from fedvote.errors import ConfigError

PartitionScheme = Literal[
    "iid", "shards", "classes", "dirichlet", "dirichlet-balanced", "unbalanced", "unbalanced-noniid"
]
PARTITION_SCHEMES: tuple[str, ...] = (
    "iid", "shards", "classes", "dirichlet", "dirichlet-balanced", "unbalanced", "unbalanced-noniid"
)


@dataclass(frozen=True)
class PartitionSpec:
    """How records are split among agents.

    Parameters
    ----------
    scheme : {"iid", "shards", "classes", "dirichlet"}
        ``iid``: a uniform random split into near-equal parts. ``shards``: McMahan et
        al. (2017) — sort by label, cut into ``agents * shards_per_agent`` shards, deal
        ``shards_per_agent`` to each agent. ``classes``: each agent sees exactly
        ``classes_per_agent`` classes (the voting paper's "6 digits per agent").
        ``dirichlet``: per class, shares over agents ~ Dirichlet(alpha) (Hsu et al. 2019).
        ``unbalanced``: the reputation paper's "unbalanced" data (Sec. 4.1.2): class sizes
        follow 1/x from 100 % down to ``min_class_fraction`` (classes in a seeded random
        order; the rest of each class is left out), then an iid split.
        ``unbalanced-noniid``: the same long-tailed data, and each agent's own classes
        follow 1/x too, in an order of its own (each class is shared among agents in
        proportion to their 1/x weights for it).
        ``dirichlet-balanced``: the same draws, the (classes, agents) share matrix then
        rescaled (Sinkhorn) so every agent gets about the same number of records, as the
        FedAUX experiments split their clients (fedaux-fdp.txt, Section 5; α down to
        0.01 with 20 agents, where plain ``dirichlet`` leaves agents empty).
    alpha : float
        Dirichlet concentration β; small is more skewed. Default 0.5.
    classes_per_agent : int
        Classes per agent for ``classes``. Default 2.
    shards_per_agent : int
        Shards per agent for ``shards``. Default 2.
    min_class_fraction : float
        The ``unbalanced`` schemes' smallest class size, relative to the largest, in
        (0, 1]. Default 0.4 (the paper's 100 % to 40 %).

    """

    scheme: str = "iid"
    alpha: float = 0.5
    classes_per_agent: int = 2
    shards_per_agent: int = 2
    min_class_fraction: float = 0.4

    def __post_init__(self) -> None:
        if self.scheme not in PARTITION_SCHEMES:
            raise ConfigError(
                "partition", f"unknown scheme {self.scheme!r}; choose from {', '.join(PARTITION_SCHEMES)}"
            )
        if not 0 < self.alpha < float("inf"):  # nan fails both; ∞ would be a uniform split: say iid
            raise ConfigError(
                "dirichlet_alpha",
                f"the Dirichlet concentration must be > 0 and finite, got {self.alpha} "
                "(an even split: --partition iid)",
            )
        if self.classes_per_agent < 1:
            raise ConfigError(
                "classes_per_agent", f"must be at least 1, got {self.classes_per_agent}"
            )
        if self.shards_per_agent < 1:
            raise ConfigError("shards_per_agent", f"must be at least 1, got {self.shards_per_agent}")
        if not 0.0 < self.min_class_fraction <= 1.0:
            raise ConfigError("min_class_fraction", f"must lie in (0, 1], got {self.min_class_fraction}")


def partition_indices(
    labels: np.ndarray, num_agents: int, spec: PartitionSpec, rng: np.random.Generator
) -> list[np.ndarray]:
    """Split record indices ``0..len(labels)-1`` among ``num_agents`` agents by ``spec``.

    Every agent receives at least one record; requests that cannot meet that raise
    :class:`~fedvote.errors.ConfigError` naming the argument.
    """
    labels = np.asarray(labels)
    if num_agents < 1:
        raise ConfigError("agents", f"must be at least 1, got {num_agents}")
    if num_agents > labels.shape[0]:
        raise ConfigError(
            "agents",
            f"{num_agents} agents but only {labels.shape[0]} records to share among them",
        )
    if spec.scheme == "iid":
        parts = _iid(labels.shape[0], num_agents, rng)
    elif spec.scheme == "shards":
        parts = _shards(labels, num_agents, spec.shards_per_agent, rng)
    elif spec.scheme == "classes":
        parts = _classes(labels, num_agents, spec.classes_per_agent, rng)
    elif spec.scheme in ("unbalanced", "unbalanced-noniid"):
        parts = _unbalanced(labels, num_agents, spec.min_class_fraction, spec.scheme == "unbalanced", rng)
    elif spec.scheme == "dirichlet-balanced":
        parts = _dirichlet_balanced(labels, num_agents, spec.alpha, rng)
    else:
        parts = _dirichlet(labels, num_agents, spec.alpha, rng)
    return [np.sort(p).astype(np.int64) for p in parts]


def _iid(num_records: int, num_agents: int, rng: np.random.Generator) -> list[np.ndarray]:
    return list(np.array_split(rng.permutation(num_records), num_agents))


def _shards(
    labels: np.ndarray, num_agents: int, shards_per_agent: int, rng: np.random.Generator
) -> list[np.ndarray]:
    num_shards = num_agents * shards_per_agent
    if num_shards > labels.shape[0]:
        raise ConfigError(
            "shards_per_agent",
            f"{num_agents} agents x {shards_per_agent} shards = {num_shards} shards "
            f"exceeds the {labels.shape[0]} records",
        )
    # Shuffle first so that records of equal label are ordered at random, then sort stably.
    shuffled = rng.permutation(labels.shape[0])
    by_label = shuffled[np.argsort(labels[shuffled], kind="stable")]
    shards = np.array_split(by_label, num_shards)
    dealt = rng.permutation(num_shards).reshape(num_agents, shards_per_agent)
    return [np.concatenate([shards[s] for s in row]) for row in dealt]


def _classes(
    labels: np.ndarray, num_agents: int, classes_per_agent: int, rng: np.random.Generator
) -> list[np.ndarray]:
    present = np.unique(labels)
    num_classes = present.shape[0]
    if classes_per_agent > num_classes:
        raise ConfigError(
            "classes_per_agent",
            f"{classes_per_agent} classes per agent but the data has only {num_classes} classes",
        )
    if num_agents * classes_per_agent < num_classes:
        raise ConfigError(
            "classes_per_agent",
            f"{num_agents} agents x {classes_per_agent} classes cannot cover all "
            f"{num_classes} classes; records of uncovered classes would belong to nobody",
        )
    # Agent i holds classes order[(i*c + j) mod C], j < c: every class is held by
    # floor or ceil of N*c/C agents, and an agent's c classes are distinct.
    order = rng.permutation(present)
    holders: dict[int, list[int]] = {int(c): [] for c in present}
    for agent in range(num_agents):
        for j in range(classes_per_agent):
            holders[int(order[(agent * classes_per_agent + j) % num_classes])].append(agent)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_agents)]
    for cls, agents in holders.items():
        members = rng.permutation(np.flatnonzero(labels == cls))
        if members.shape[0] < len(agents):
            raise ConfigError(
                "classes_per_agent",
                f"class {cls} has {members.shape[0]} records but {len(agents)} agents must share it",
            )
        for agent, chunk in zip(agents, np.array_split(members, len(agents)), strict=True):
            parts[agent].append(chunk)
    return [np.concatenate(p) for p in parts]


def _dirichlet(
    labels: np.ndarray, num_agents: int, alpha: float, rng: np.random.Generator, attempts: int = 100
) -> list[np.ndarray]:
    classes = np.unique(labels)
    for _ in range(attempts):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_agents)]
        for cls in classes:
            members = rng.permutation(np.flatnonzero(labels == cls))
            shares = rng.dirichlet(np.full(num_agents, alpha))
            cuts = (np.cumsum(shares)[:-1] * members.shape[0]).astype(np.int64)
            for agent, chunk in enumerate(np.split(members, cuts)):
                parts[agent].append(chunk)
        sizes = [sum(c.shape[0] for c in p) for p in parts]
        if min(sizes) >= 1:
            return [np.concatenate(p) for p in parts]
    raise ConfigError(
        "dirichlet_alpha",
        f"Dirichlet({alpha}) left some of the {num_agents} agents without records in "
        f"{attempts} draws; use fewer agents or a larger --dirichlet-alpha",
    )


def _dirichlet_balanced(
    labels: np.ndarray, num_agents: int, alpha: float, rng: np.random.Generator, iterations: int = 1000
) -> list[np.ndarray]:
    """Per-class Dirichlet(alpha) shares, Sinkhorn-rescaled so agents hold equal shares.

    The (C, N) share matrix is alternately normalised so that every agent (column) holds
    C/N of the class mass and every class (row) sums to 1, in log space (α = 0.01 draws
    shares far below the smallest float). Each class is then cut by its row.
    """
    from scipy.special import logsumexp

    classes = np.unique(labels)
    shares = rng.dirichlet(np.full(num_agents, alpha), size=classes.shape[0])  # (C, N)
    log_shares = np.log(np.maximum(shares, np.finfo(np.float64).tiny))
    column_target = np.log(classes.shape[0] / num_agents)
    for _ in range(iterations):
        log_shares += column_target - logsumexp(log_shares, axis=0, keepdims=True)
        log_shares -= logsumexp(log_shares, axis=1, keepdims=True)
    fractions = np.exp(log_shares)  # (C, N), rows sum to 1
    parts: list[list[np.ndarray]] = [[] for _ in range(num_agents)]
    for cls, row in zip(classes, fractions, strict=True):
        members = rng.permutation(np.flatnonzero(labels == cls))
        cuts = np.round(np.cumsum(row)[:-1] * members.shape[0]).astype(np.int64)
        for agent, chunk in enumerate(np.split(members, cuts)):
            parts[agent].append(chunk)
    sizes = [sum(c.shape[0] for c in p) for p in parts]
    if min(sizes) < 1:
        raise ConfigError(
            "agents", f"{num_agents} agents are too many for {labels.shape[0]} records to give each one"
        )
    return [np.concatenate(p) for p in parts]


def long_tail_fractions(num_classes: int, min_fraction: float) -> np.ndarray:
    """f(k) = b / (k + b), k = 0..C−1: a 1/x curve from f(0) = 1 down to f(C−1) = ``min_fraction``.

    b = (C − 1)·m / (1 − m) for m = ``min_fraction`` < 1 (all ones for m = 1); for C = 10,
    m = 0.4: b = 6, f = 1, 0.857, 0.75, …, 0.4 (reputation paper, Sec. 4.1.2).
    """
    if num_classes == 1 or min_fraction >= 1.0:
        return np.ones(num_classes)
    b = (num_classes - 1) * min_fraction / (1.0 - min_fraction)
    return b / (np.arange(num_classes) + b)


def _unbalanced(
    labels: np.ndarray, num_agents: int, min_fraction: float, iid: bool, rng: np.random.Generator
) -> list[np.ndarray]:
    classes = np.unique(labels)
    fractions = long_tail_fractions(classes.shape[0], min_fraction)  # (C,) by tail rank
    order = rng.permutation(classes.shape[0])  # class classes[order[r]] has tail rank r
    kept: list[np.ndarray] = []
    for rank, index in enumerate(order):
        members = rng.permutation(np.flatnonzero(labels == classes[index]))
        kept.append(members[: max(1, int(round(fractions[rank] * members.shape[0])))])
    if iid:
        pool = np.concatenate(kept)
        if pool.shape[0] < num_agents:
            raise ConfigError("agents", f"{num_agents} agents but only {pool.shape[0]} records kept")
        return list(np.array_split(rng.permutation(pool), num_agents))
    # Each agent ranks the classes its own way; class c is split in proportion to 1/x weights.
    ranks = np.argsort(rng.random((num_agents, classes.shape[0])), axis=1)  # (N, C) a permutation per agent
    weights = fractions[ranks]  # (N, C): agent i's weight for class c
    parts: list[list[np.ndarray]] = [[] for _ in range(num_agents)]
    for position, index in enumerate(order):
        members = kept[position]
        shares = weights[:, index] / weights[:, index].sum()
        cuts = np.round(np.cumsum(shares)[:-1] * members.shape[0]).astype(np.int64)
        for agent, chunk in enumerate(np.split(members, cuts)):
            parts[agent].append(chunk)
    sizes = [sum(c.shape[0] for c in p) for p in parts]
    if min(sizes) < 1:
        raise ConfigError("agents", f"{num_agents} agents are too many for the {sum(sizes)} records kept")
    return [np.concatenate(p) for p in parts]
