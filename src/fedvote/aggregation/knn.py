"""kNN votes of Private-kNN-FL (Algorithm 2 of the voting paper), batched and memory-bounded.

An agent's vote on a query is the mean of the one-hot labels of its ``k`` nearest own
records in the public feature space φ: ``v = (1/k) Σ_{j≤k} e_{y_j}`` (a probability
vector). Distances come from matrix products, ``‖r‖² − 2 q·r`` (the query's own norm
does not change its ranking), over chunks of queries so that no more than about
``memory_budget_bytes`` is allocated at once: 10⁴ queries × 10⁵ records never form
the full distance matrix.

Ties at the k-th distance are broken towards the lower record index (the record's
position in the agent's data), so the vote is a deterministic function of the data.

Size and sensitivity
--------------------
An agent with ``n < k`` records votes with all its n labels, still divided by k, so the
vote sums to n/k < 1: the per-record weight stays 1/k and the instance-level L2
sensitivity √2/k holds (replacing one record moves one weight 1/k from one class to
another). When ``k`` is a fraction of each agent's data (:func:`resolve_k`), agents use
different k_i = round(f·n_i); n_i is public metadata and does not change under
replace-one adjacency, so agent i's vote has sensitivity √2/k_i and the sum's is
max_i √2/k_i = √2/k_min. Accounting must use the smallest k any agent uses.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fedvote.aggregation.voting import MAX_K, resolve_k
from fedvote.errors import ConfigError

__all__ = ["MAX_K", "KnnIndex", "knn_votes", "knn_votes_by_agent", "resolve_k"]

_DEFAULT_MEMORY_BUDGET = 256 << 20  # bytes per chunk of the (queries × records) work
_BYTES_PER_PAIR = 24  # distance (4) + comparison masks + the float mask of the vote


def knn_votes(
    queries: np.ndarray | torch.Tensor,
    records: np.ndarray | torch.Tensor,
    labels: np.ndarray,
    k: int,
    num_classes: int,
    *,
    memory_budget_bytes: int = _DEFAULT_MEMORY_BUDGET,
    device: str | torch.device = "cpu",
) -> np.ndarray:
    """One agent's kNN votes (Q, C) float64: mean one-hot label of each query's k nearest records.

    Parameters
    ----------
    queries : array
        Query features (Q, d).
    records : array
        The agent's own record features (n, d), in the same feature space.
    labels : np.ndarray
        The records' labels (n,) in [0, num_classes).
    k : int
        Neighbours per query; the vote divides by k even when n < k.

    """
    return knn_votes_by_agent(
        queries,
        [records],
        [labels],
        [k],
        num_classes,
        memory_budget_bytes=memory_budget_bytes,
        device=device,
    )[0]


def knn_votes_by_agent(
    queries: np.ndarray | torch.Tensor,
    records: Sequence[np.ndarray | torch.Tensor],
    labels: Sequence[np.ndarray],
    ks: Sequence[int],
    num_classes: int,
    *,
    memory_budget_bytes: int = _DEFAULT_MEMORY_BUDGET,
    device: str | torch.device = "cpu",
) -> np.ndarray:
    """Every agent's kNN votes (N, Q, C) float64, agent i among its own ``records[i]`` only.

    Shorthand for ``KnnIndex(records, labels, ks, num_classes, ...).votes(queries)``.
    """
    index = KnnIndex(records, labels, ks, num_classes, memory_budget_bytes=memory_budget_bytes, device=device)
    return index.votes(queries)


class KnnIndex:
    """The agents' embedded records, stacked once, for repeated batched kNN votes.

    :meth:`votes` takes one matrix product per chunk of queries against all agents'
    records together, then a top-k within each agent's own columns: agent i's vote
    depends on its own records only. Equal to :func:`knn_votes` for each agent, up to
    floating-point rounding of the distances.

    Parameters
    ----------
    records : sequence of arrays
        Agent i's record features (n_i, d); n_i may be 0 (that agent votes zeros).
    labels : sequence of np.ndarray
        Agent i's labels (n_i,).
    ks : sequence of int
        Agent i's k (its vote divides by k_i).
    num_classes : int
        Number of classes C.
    memory_budget_bytes : int
        Rough bound on the memory of one chunk of (queries × records) work.
    device : str or torch.device
        Where distances are computed (e.g. ``"cuda"``).

    """

    def __init__(
        self,
        records: Sequence[np.ndarray | torch.Tensor],
        labels: Sequence[np.ndarray],
        ks: Sequence[int],
        num_classes: int,
        *,
        memory_budget_bytes: int = _DEFAULT_MEMORY_BUDGET,
        device: str | torch.device = "cpu",
    ) -> None:
        n_agents = len(records)
        if len(labels) != n_agents or len(ks) != n_agents:
            raise ValueError(
                "records, labels and ks need one entry per agent; "
                f"got {n_agents}, {len(labels)} and {len(ks)}"
            )
        if n_agents == 0:
            raise ValueError("a kNN index needs at least one agent")
        for k in ks:
            if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
                raise ConfigError("k", f"must be an integer >= 1, got {k!r}")
        if memory_budget_bytes < 1:
            raise ConfigError("memory_budget_bytes", f"must be >= 1, got {memory_budget_bytes}")
        arrays = [np.asarray(r, dtype=np.float32) for r in records]
        dims = {a.shape[1] for a in arrays if a.ndim == 2 and (a.shape[0] > 0 or a.shape[1] > 0)}
        if len(dims) > 1 or any(a.ndim != 2 and a.size > 0 for a in arrays):
            raise ConfigError("records", f"every agent's records must be (n_i, d) with one d; got {dims}")
        self.dim = dims.pop() if dims else 0
        for i, (a, y) in enumerate(zip(arrays, labels, strict=True)):
            if np.shape(y) != (a.shape[0],):
                raise ConfigError(
                    "labels", f"agent {i}: {a.shape[0]} records but labels of shape {np.shape(y)}"
                )
        self.device = torch.device(device)
        self.ks = [int(k) for k in ks]
        self.num_classes = int(num_classes)
        self.memory_budget_bytes = int(memory_budget_bytes)
        sizes = [a.shape[0] for a in arrays]
        self._offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)  # (N + 1,)
        self._records = torch.as_tensor(np.concatenate([a.reshape(a.shape[0], self.dim) for a in arrays])).to(
            self.device
        )  # (M, d)
        y_all = torch.as_tensor(np.concatenate([np.asarray(y, dtype=np.int64) for y in labels]))
        self._one_hot = torch.nn.functional.one_hot(y_all, self.num_classes).to(torch.float32)
        self._one_hot = self._one_hot.to(self.device)  # (M, C)
        self._norms = (self._records * self._records).sum(dim=1)  # (M,)

    @property
    def num_agents(self) -> int:
        """Number of agents N."""
        return len(self.ks)

    def votes(self, queries: np.ndarray | torch.Tensor) -> np.ndarray:
        """Every agent's kNN votes on ``queries`` (Q, d): (N, Q, C) float64."""
        q = torch.as_tensor(np.asarray(queries, dtype=np.float32)).to(self.device)  # (Q, d)
        if q.ndim != 2 or (self.dim and q.shape[1] != self.dim):
            raise ConfigError("queries", f"must be a (Q, {self.dim}) matrix, got shape {tuple(q.shape)}")
        out = np.zeros((self.num_agents, q.shape[0], self.num_classes), dtype=np.float64)
        total = int(self._offsets[-1])
        if total == 0 or q.shape[0] == 0:
            return out
        chunk = max(1, self.memory_budget_bytes // (_BYTES_PER_PAIR * total))
        for start in range(0, q.shape[0], chunk):
            block = q[start : start + chunk]  # (b, d)
            distances = torch.addmm(self._norms.unsqueeze(0), block, self._records.T, alpha=-2.0)  # (b, M)
            for i in range(self.num_agents):
                lo, hi = int(self._offsets[i]), int(self._offsets[i + 1])
                if hi == lo:
                    continue
                chosen = _nearest_mask(distances[:, lo:hi], min(self.ks[i], hi - lo))  # (b, n_i)
                counts = chosen.to(torch.float32) @ self._one_hot[lo:hi]  # (b, C) neighbours per class
                out[i, start : start + block.shape[0]] = counts.cpu().numpy().astype(np.float64) / self.ks[i]
        return out


def _nearest_mask(distances: torch.Tensor, k: int) -> torch.Tensor:
    """(b, n) bool: exactly ``k`` per row, the smallest distances, ties to the lower index."""
    kth = torch.topk(distances, k, dim=1, largest=False, sorted=True).values[:, -1:]  # (b, 1)
    below = distances < kth
    tied = distances == kth
    need = k - below.sum(dim=1, keepdim=True)  # (b, 1) how many tied records to take, ≥ 1
    if bool((tied.sum(dim=1, keepdim=True) == need).all()):
        return below | tied  # no tie straddles the k-th place
    rank = torch.cumsum(tied.to(torch.int32), dim=1)  # (b, n) 1-based rank among tied records
    return below | (tied & (rank <= need))
