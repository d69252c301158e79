"""Which public-pool points the voting methods ask the agents to label.

The queries are chosen from the public pool alone (its unlabelled features and the seed),
so the choice is public and costs no privacy. Two rules, and ``auto`` between them:

* ``random``: a seeded random subset (the voting paper's Algorithm 1, line 3).
* ``typical``: one *typical* point per cluster of the pool — the TypiClust rule of
  Hacohen, Dekel & Weinshall (ICML 2022, "Active Learning on a Budget: Opposite
  Strategies Suit High and Low Budgets", Algorithm 1): cluster the pool into Q clusters
  (k-means on a PCA projection), and from each cluster take the point of highest
  typicality, the inverse of its mean distance to its K nearest neighbours within the
  cluster. In the low-budget regime the voting methods are in (Q ≈ 100 labels), the
  labelled points then cover the pool's modes with few near-duplicates, every class is
  represented, and — the reason it helps here — typical points are the ones the teachers
  agree on, so the noisy argmax is right more often at the same noise (measured in
  docs/defaults.md).
* ``auto`` (the default): ``typical`` when the pool holds at least
  :data:`TYPICAL_MIN_POOL_PER_QUERY` points per query (clusters large enough for
  typicality to mean something), else ``random``. Measured (experiments/query_selection.py):
  on MNIST's 3,000-point pool with Q = 100 typical queries were labelled right far more
  often than random ones; on digits' 270-point pool (2.7 points per query) less often.
"""

from __future__ import annotations

import numpy as np

from fedvote.errors import ConfigError

QUERY_SELECTIONS: tuple[str, ...] = ("auto", "typical", "random")
# ``auto`` picks ``typical`` from this many pool points per query up (MNIST's 30 is above,
# digits' 2.7 below).
TYPICAL_MIN_POOL_PER_QUERY = 10

# TypiClust's neighbourhood size K (the paper's 20) and its feature space: PCA to at most
# this many dimensions (k-means and distances in the pixels' 784 dimensions are slower and
# dominated by stroke noise).
TYPICALITY_NEIGHBOURS = 20
PROJECTION_DIMENSIONS = 50


def random_queries(pool_size: int, queries: int, seed: int) -> np.ndarray:
    """``queries`` distinct indices into the pool, (Q,), a function of ``seed`` only.

    The first Q of one seeded order of the pool, so a run with more queries asks the same
    ones and then more.
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x9A7E]))
    return rng.permutation(pool_size)[:queries]


def typical_queries(public_features: np.ndarray, queries: int, seed: int) -> np.ndarray:
    """The most typical point of each of ``queries`` k-means clusters of the pool (TypiClust), (Q,).

    ``public_features`` (P, *shape) are flattened and projected by PCA onto at most
    :data:`PROJECTION_DIMENSIONS` dimensions; k-means (k-means++ seeding from ``seed``)
    makes Q clusters; each contributes its point of least mean distance to its
    min(K, size − 1) nearest cluster-mates. Q = P returns the whole pool.
    """
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA

    pool_size = public_features.shape[0]
    if queries >= pool_size:
        return np.arange(pool_size)
    flat = public_features.reshape(pool_size, -1).astype(np.float64)  # (P, D)
    dimensions = min(PROJECTION_DIMENSIONS, flat.shape[1], pool_size)
    projected = PCA(dimensions, random_state=seed).fit_transform(flat) if dimensions < flat.shape[1] else flat
    clusters = KMeans(queries, n_init=1, random_state=seed).fit_predict(projected)  # (P,)
    chosen = np.empty(queries, dtype=np.int64)
    for cluster in range(queries):
        members = np.flatnonzero(clusters == cluster)  # (m,), m >= 1: k-means leaves no cluster empty
        chosen[cluster] = members[_most_typical(projected[members])]
    return np.sort(chosen)


def _most_typical(points: np.ndarray) -> int:
    """Index of the row of ``points`` (m, d) with the least mean distance to its K nearest other rows."""
    from sklearn.neighbors import NearestNeighbors

    if points.shape[0] <= 2:
        return 0
    neighbours = min(TYPICALITY_NEIGHBOURS, points.shape[0] - 1)
    distances, _ = NearestNeighbors(n_neighbors=neighbours + 1).fit(points).kneighbors(points)  # (m, K + 1)
    return int(np.argmin(distances[:, 1:].mean(axis=1)))  # column 0: each point itself


def resolve_query_selection(selection: str, pool_size: int, queries: int) -> str:
    """``selection`` with ``"auto"`` resolved by the pool's size per query; unknown rules refused.

    ``"auto"`` is ``"typical"`` from :data:`TYPICAL_MIN_POOL_PER_QUERY` pool points per query
    up, else ``"random"``.
    """
    if selection not in QUERY_SELECTIONS:
        choices = ", ".join(QUERY_SELECTIONS)
        raise ConfigError("query_selection", f"must be one of {choices}, got {selection!r}")
    if selection != "auto":
        return selection
    return "typical" if pool_size >= TYPICAL_MIN_POOL_PER_QUERY * queries else "random"


def choose_queries(
    public_features: np.ndarray, queries: int, seed: int, selection: str = "auto"
) -> np.ndarray:
    """The Q pool indices to label under rule ``selection`` (:data:`QUERY_SELECTIONS`), (Q,)."""
    selection = resolve_query_selection(selection, public_features.shape[0], queries)
    if selection == "random":
        return random_queries(public_features.shape[0], queries, seed)
    return typical_queries(public_features, queries, seed)
