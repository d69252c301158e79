"""What every in-process skill of :class:`~fedvote.transport.local.LocalTransport` shares.

:class:`LocalAgents` holds the agents and their state (built by ``LocalTransport.__init__``)
and the few steps several skills take: the (secure) sum of the responders' releases, the
batched teachers' votes, every agent's records stacked once. Each skill module
(``teachers``, ``knn``, ``weighted``, ``updates``, ``heads``, ``personalised``,
``multilabel``) is a mixin over it that serves one capability
(:mod:`fedvote.transport.capabilities`); LocalTransport inherits them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedvote.aggregation.secure_sum import FixedPoint, SecureSumAborted, secure_sum
from fedvote.transport.base import Transport, VoteSum
from fedvote.transport.batched_clients import StackedRecords

if TYPE_CHECKING:
    from fedvote.agents.agent import Agent
    from fedvote.data.attributes import AttributeTask
    from fedvote.data.federation import LabeledData
    from fedvote.models.ensemble import ModelEnsemble


class LocalAgents(Transport):
    """Every agent of the federation as an object in this process, and the steps skills share."""

    _agents: list[Agent]
    _private: Sequence[LabeledData]  # every agent's records: the batched paths train from them directly
    _public_features: np.ndarray
    _num_classes: int
    _agent_public_access: bool
    _training_seeds: list[int]
    _noise_entropy: int
    _batched: bool
    _device: torch.device
    _secure_codec: FixedPoint | None
    _ensemble: ModelEnsemble | None = None  # the batched teachers (teachers.py)
    _records: StackedRecords | None = None  # every agent's records stacked, built on first use
    _multilabel_task: AttributeTask | None = None  # multi-label teachers' task (multilabel.py)

    @property
    def num_agents(self) -> int:
        """Number of agents N."""
        return len(self._agents)

    @property
    def num_classes(self) -> int:
        """Number of classes C (the width of a vote)."""
        return self._num_classes

    @property
    def device(self) -> torch.device:
        """Where the batched teachers and the gradient methods' batched clients compute."""
        return self._device

    @property
    def batched(self) -> bool:
        """Whether teachers are trained and queried as one vectorised ensemble."""
        return self._batched and self._shares_architecture()

    @property
    def agent_public_access(self) -> bool:
        """Whether the federation lets agents read the public pool beyond the queries."""
        return self._agent_public_access

    def record_counts(self) -> np.ndarray:
        """Each agent's number of private records n_i, (N,)."""
        return np.array([agent.num_records for agent in self._agents], dtype=np.int64)

    def _shares_architecture(self) -> bool:
        """All agents' examples have one shape (so their teachers one architecture)."""
        return len({tuple(data.features.shape[1:]) for data in self._private}) <= 1

    def _released_sum(self, releases: list[np.ndarray], min_responders: int) -> VoteSum | None:
        """The sum of the responders' releases (all one shape): in memory, or by secure sum.

        With ``secure_sum`` the releases go through one fresh
        :class:`~fedvote.aggregation.secure_sum.SecureSumRound` with dropout threshold
        t = max(min_responders, ⌊N/2⌋ + 1); a round that cannot be unmasked releases
        nothing (``None``, so the caller voids its charge).
        """
        if self._secure_codec is None:
            sums = np.zeros_like(releases[0])
            for release in releases:  # in the agents' order, as they arrive
                sums += release
            return VoteSum(sums=sums, responders=len(releases))
        threshold = min(self.num_agents, max(min_responders, self.num_agents // 2 + 1))
        try:
            total = secure_sum(releases, threshold=threshold, codec=self._secure_codec)
        except SecureSumAborted:
            return None
        return VoteSum(sums=total, responders=len(releases))

    def _voted_labels(self, query_indices: np.ndarray) -> np.ndarray:
        """Batched path: every teacher's prediction, passed through its agent's behaviour, (N, Q)."""
        assert self._ensemble is not None
        labels = self._ensemble.predict(self._public_features[query_indices]).cpu().numpy()  # (N, Q)
        return np.stack([agent.behave(row) for agent, row in zip(self._agents, labels, strict=True)])

    def _stacked_records(self) -> StackedRecords:
        """Every agent's records, stacked on the batched device (PriFedSync's and the gradient baselines')."""
        if self._records is None:
            self._records = StackedRecords(self._private, self._device)
        return self._records
