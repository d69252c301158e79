"""Agent-side kNN votes (Private-kNN-FL, Algorithm 2): the agent's "teacher" is a kNN vote in φ-space.

:meth:`KnnVoter.prepare` embeds the agent's own records with the public φ and fixes its k;
each vote — the mean one-hot label of a query's k nearest own records plus a noise share —
leaves through the agent's one exit (:meth:`fedvote.agents.agent.Agent.release`), checked to
be a (Q, C) vote whose rows sum to at most 1.
"""

from __future__ import annotations

import numpy as np

from fedvote.agents.agent import Agent, VoteOutput
from fedvote.aggregation.knn import knn_votes, resolve_k
from fedvote.data.federation import LabeledData
from fedvote.errors import ConfigError
from fedvote.models.features import FeatureExtractor


def neighbour_counts(votes: np.ndarray, k: int) -> np.ndarray:
    """The integer label counts of k neighbours, k·``votes`` (Q, C), from their means (exact: n/k·k)."""
    counts = np.rint(np.asarray(votes, dtype=np.float64) * k)  # (Q, C)
    if not np.allclose(counts, np.asarray(votes, dtype=np.float64) * k, rtol=0.0, atol=1e-6):
        raise ValueError(f"the votes are not means of {k} labels")
    return counts


class KnnVoter:
    """What an agent keeps for kNN voting: φ, its k, φ(own records) (n, d) and φ(pool) (P, d)."""

    def __init__(
        self, agent: Agent, extractor: FeatureExtractor, k: int, records: np.ndarray, public: np.ndarray
    ) -> None:
        self.agent = agent
        self.extractor = extractor
        self.k = k
        self._records = records
        self._public = public

    @classmethod
    def prepare(
        cls,
        agent: Agent,
        extractor: FeatureExtractor,
        *,
        k: int | None = None,
        k_fraction: float = 0.05,
        public_embedding: np.ndarray | None = None,
        record_embedding: np.ndarray | None = None,
    ) -> KnnVoter:
        """Embed the agent's private records with the public φ and fix the k it uses.

        ``k`` fixed, or ``round(k_fraction · n)`` (at least 1) of the agent's n records
        (:func:`fedvote.aggregation.knn.resolve_k`). Its k (:attr:`k`) is public metadata (a
        function of the public record count) that the server needs for accounting.
        ``public_embedding`` is φ(public pool), (P, d), when the transport computed it once
        for every agent (it is public); otherwise the agent computes it itself.
        ``record_embedding`` is φ(own records), (n, d), for in-process transports that
        embed every agent's data at once.
        """
        data = agent.private_data
        agent_k = resolve_k(agent.num_records, k, k_fraction)
        pool_size = agent.public_features.shape[0]
        pool = public_embedding
        if pool is None:
            pool = extractor.transform(agent.public_features)
        if pool.shape != (pool_size, extractor.dim):
            raise ConfigError(
                "public_embedding", f"expected ({pool_size}, {extractor.dim}), got {tuple(pool.shape)}"
            )
        records = record_embedding
        if records is None:
            records = extractor.transform(data.features)
        if records.shape != (agent.num_records, extractor.dim):
            raise ConfigError(
                "record_embedding",
                f"expected ({agent.num_records}, {extractor.dim}), got {tuple(records.shape)}",
            )
        return cls(
            agent,
            extractor,
            agent_k,
            np.asarray(records, dtype=np.float32),
            np.asarray(pool, dtype=np.float32),
        )

    def _votes(self, embedded: np.ndarray) -> np.ndarray:
        """The clean kNN votes (Q, C) of embedded queries (Q, d) among the agent's own records."""
        agent = self.agent
        return knn_votes(embedded, self._records, agent.private_data.labels, self.k, agent.num_classes)

    def noisy_votes(self, query_indices: np.ndarray, noise_std: float) -> np.ndarray:
        """The agent's kNN release: mean one-hot label of each query's k nearest own records.

        Algorithm 2, line 5: (1/k) Σ_j e_{y_j} + N(0, noise_std²), (Q, C), noise_std = σ/√t.
        Ties at the k-th distance go to the lower record index.
        """
        return self.release_votes(self._votes(self._public[query_indices]), noise_std, len(query_indices))

    def release_votes(self, votes: np.ndarray, noise_std: float, num_queries: int) -> np.ndarray:
        """Release kNN votes computed in a batch for this agent (LocalTransport's index): + noise, (Q, C).

        With ``--secure-noise`` the agent releases the integer *counts* k·vote of its k
        neighbours' labels (rows summing to at most k) plus N_Z(0, ``noise_std``²), where
        ``noise_std`` is then in count units (K·σ/√t; ``docs/privacy.md``, "Secure noise
        for kNN and weighted votes").
        """
        if not self.agent.secure_noise:
            return self.agent.release(votes, noise_std, VoteOutput(num_queries=num_queries))
        counts = neighbour_counts(votes, self.k)  # (Q, C), rows summing to at most k
        return self.agent.release(counts, noise_std, VoteOutput(num_queries=num_queries, bound=float(self.k)))

    def accuracy(self, test: LabeledData) -> float:
        """Simulation-only diagnostic: accuracy of the noiseless kNN vote's argmax on ``test``."""
        votes = self._votes(self.extractor.transform(test.features))
        return float(np.mean(np.argmax(votes, axis=1) == test.labels))
