"""Private-kNN-FL's votes in process (Algorithm 2 of voting-based-dpfl.txt).

:class:`KnnVoteSkills` serves :class:`~fedvote.transport.capabilities.KnnVotes` for
:class:`~fedvote.transport.local.LocalTransport`: every agent embeds its records by the
public φ and fixes its k (:class:`~fedvote.agents.knn_votes.KnnVoter`); batched, all agents'
embeddings are stacked into one :class:`~fedvote.aggregation.knn.KnnIndex`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedvote.agents import teacher_votes
from fedvote.agents.knn_votes import KnnVoter
from fedvote.aggregation.knn import KnnIndex
from fedvote.data.federation import LabeledData
from fedvote.models.features import FeatureExtractor
from fedvote.transport.base import VoteSum
from fedvote.transport.capabilities import IndividualKnnVotes, KnnVotes
from fedvote.transport.local.shared import LocalAgents


class KnnVoteSkills(LocalAgents, KnnVotes, IndividualKnnVotes):
    """Agents voting by their k nearest records in φ's embedding."""

    _knn: _LocalKnn | None = None  # after prepare_knn

    def prepare_knn(
        self, extractor: FeatureExtractor, *, k: int | None = None, k_fraction: float = 0.05
    ) -> np.ndarray:
        """Give every agent φ; each embeds its records and fixes its k. Returns the ks, (N,).

        φ(public pool) is computed once and shared (it is public). In batched mode the
        agents' records are embedded here in one pass and stacked into one
        :class:`~fedvote.aggregation.knn.KnnIndex`; the agents get their own slices, so
        both paths vote on identical embeddings. After this call
        :meth:`teacher_accuracies` describes the agents' kNN classifiers.
        """
        public_embedding = extractor.transform(self._public_features)  # (P, d)
        embedded: list[np.ndarray] | None = None
        if self.batched:
            sizes = np.array([len(data) for data in self._private], dtype=np.int64)
            union = np.concatenate([data.features for data in self._private])  # (sum n_i, *shape)
            embedded = np.split(extractor.transform(union), np.cumsum(sizes)[:-1])  # agent i: (n_i, d)
        voters = [
            KnnVoter.prepare(
                agent,
                extractor,
                k=k,
                k_fraction=k_fraction,
                public_embedding=public_embedding,
                record_embedding=None if embedded is None else embedded[i],
            )
            for i, agent in enumerate(self._agents)
        ]
        ks = np.array([voter.k for voter in voters], dtype=np.int64)
        index = None
        if embedded is not None:
            index = KnnIndex(
                embedded,
                [data.labels for data in self._private],
                ks.tolist(),
                self._num_classes,
                device=self._device,
            )
        self._knn = _LocalKnn(extractor=extractor, public=public_embedding, ks=ks, index=index, voters=voters)
        # Down: φ to every agent; up: each agent's k (a function of its public size).
        self.communication.count(down=self.num_agents * extractor.num_floats, up=self.num_agents)
        return ks.copy()

    def knn_vote_sum(
        self, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of all agents' noisy kNN votes; in-process every agent responds."""
        if self._knn is None:
            raise RuntimeError("call prepare_knn before knn_vote_sum")
        responders = self._knn.voters
        self.communication.count(
            down=len(self._agents) * query_indices.shape[0],
            up=len(responders) * query_indices.shape[0] * self._num_classes,
        )
        if len(responders) < min_responders:
            return None
        if self._knn.index is None:
            releases = [voter.noisy_votes(query_indices, noise_std) for voter in responders]
            return self._released_sum(releases, min_responders)  # sums: (Q, C)
        # Every agent's clean kNN vote in one batched pass; each agent adds its noise share.
        votes = self._knn.index.votes(self._knn.public[query_indices])  # (N, Q, C)
        q = query_indices.shape[0]
        releases = [
            voter.release_votes(vote, noise_std, q) for voter, vote in zip(responders, votes, strict=True)
        ]
        return self._released_sum(releases, min_responders)

    def individual_knn_vote_sum(
        self,
        query_indices: np.ndarray,
        noise_std: float,
        min_responders: int,
        *,
        weights: np.ndarray,
        sampling_rate: float,
    ) -> VoteSum | None:
        """Sum of every agent's weighted, subsampled noisy kNN votes (issue 45); in-process all respond.

        Each agent's mean-label vote (Q, C) leaves through
        :func:`~fedvote.agents.teacher_votes.release_individual_votes` (its own coins, its
        noise share on every query).
        """
        if self._knn is None:
            raise RuntimeError("call prepare_knn before individual_knn_vote_sum")
        weights = np.asarray(weights, dtype=np.float64)  # (N,)
        if weights.shape != (self.num_agents,):
            raise ValueError(f"weights of shape {weights.shape} for {self.num_agents} agents")
        responders = self._knn.voters
        q = query_indices.shape[0]
        self.communication.count(down=len(self._agents) * q, up=len(responders) * q * self._num_classes)
        if len(responders) < min_responders:
            return None
        if self._knn.index is None:
            votes = np.stack([voter.noisy_votes(query_indices, 0.0) for voter in responders])  # (N, Q, C)
        else:
            votes = self._knn.index.votes(self._knn.public[query_indices])  # (N, Q, C)
        releases = [
            teacher_votes.release_individual_votes(
                voter.agent, vote, weight=float(weight), sampling_rate=sampling_rate, noise_std=noise_std,
                num_queries=q,
            )
            for voter, vote, weight in zip(responders, votes, weights, strict=True)
        ]
        return self._released_sum(releases, min_responders)

    def _knn_accuracies(self, test: LabeledData) -> np.ndarray:
        """Each agent's noiseless kNN classifier's test accuracy, (N,) — a diagnostic."""
        assert self._knn is not None
        if self._knn.index is None:
            return np.array([voter.accuracy(test) for voter in self._knn.voters])
        votes = self._knn.index.votes(self._knn.extractor.transform(test.features))  # (N, T, C)
        return np.mean(np.argmax(votes, axis=2) == test.labels[None, :], axis=1)


@dataclass(frozen=True, eq=False)
class _LocalKnn:
    """LocalTransport's kNN state: φ, φ(pool) (P, d), each agent's k (N,), the batched index.

    ``voters`` are the agents' own kNN state (:class:`~fedvote.agents.knn_votes.KnnVoter`),
    through which every kNN vote leaves its agent.
    """

    extractor: FeatureExtractor
    public: np.ndarray
    ks: np.ndarray
    index: KnnIndex | None
    voters: list[KnnVoter]
