"""Local updates in process: the gradient baselines' rounds (FedAvg, DP-FedAvg, DP-FedSGD).

:class:`LocalUpdateSkills` serves :class:`~fedvote.transport.capabilities.LocalUpdates` and
:class:`~fedvote.transport.capabilities.SecureUpdateSum` for
:class:`~fedvote.transport.local.LocalTransport`: the sampled agents' updates, batched
(:class:`~fedvote.transport.batched_clients.BatchedUpdates`) when the model is a perceptron,
else one agent after another (:func:`~fedvote.agents.local_updates.local_update`; DANN
steps, multi-label BCE steps); DP-FedAvg's sum over every agent of its update or noise share.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from fedvote.agents import multilabel_votes
from fedvote.agents.agent import Agent
from fedvote.agents.dann_teacher import dann_local_update
from fedvote.agents.local_updates import (
    DiscreteTraining,
    count_coordinates,
    discrete_share,
    fast_shares_apply,
    local_update,
    noise_shares,
    released_width,
)
from fedvote.aggregation.secure_sum import FixedPoint, secure_sum
from fedvote.errors import ConfigError
from fedvote.models import local_training
from fedvote.models.local_training import LocalTraining
from fedvote.models.multilabel import MultiLabelLocalTraining
from fedvote.models.threads import outer_threads, single_threaded
from fedvote.transport.batched_clients import BatchedUpdates
from fedvote.transport.capabilities import LocalUpdates, SecureUpdateSum
from fedvote.transport.local.shared import LocalAgents

# Agents whose releases are held at once while DP-FedAvg's plain sum adds them (issue 46: memory
# bounded in N; 10,000 agents × MNIST's d would otherwise hold ~8 GB of shares).
_SUM_CHUNK = 256


class LocalUpdateSkills(LocalAgents, LocalUpdates, SecureUpdateSum):
    """The agents' local (DP-)SGD updates from the global model θ, and their secure sum."""

    _batched_updates: BatchedUpdates | None = None  # the gradient baselines', built on first use

    def local_updates(
        self, global_params: np.ndarray, agent_ids: np.ndarray, training: LocalTraining
    ) -> local_training.LocalUpdates:
        """The listed agents' updates from θ (m, d): trained together, or one agent after another.

        Batched (:meth:`_updates`) when the transport is and the model is a perceptron; the
        per-agent loop otherwise. The input shift, when the round has one, goes down with θ
        (counted).
        """
        theta = np.asarray(global_params, dtype=np.float32)
        ids = np.asarray(agent_ids, dtype=np.int64).reshape(-1)
        d = theta.shape[0]
        width = released_width(training, d)  # d, or d + 1 with adaptive clipping's bit
        self.communication.count(down=(d + training.shift_floats) * ids.shape[0], up=width * ids.shape[0])
        updates = np.zeros((ids.shape[0], width), dtype=np.float32)
        with single_threaded():
            released = self._updates(theta, [self._agents[int(i)] for i in ids], training)
        for row, update in enumerate(released):
            updates[row] = update
        records = np.array([self._agents[int(i)].num_records for i in ids], dtype=np.int64)
        return local_training.LocalUpdates(agent_ids=ids, updates=updates, records=records)

    def _updates(self, theta: np.ndarray, agents: list[Agent], training: LocalTraining) -> list[np.ndarray]:
        """The ``agents``' released updates (d,) from θ, each through its agent's exit, in order.

        Batched clients (:class:`~fedvote.transport.batched_clients.BatchedUpdates`) when
        :attr:`batched` and the model is a perceptron; else one agent after another
        (:func:`~fedvote.agents.local_updates.local_update`). Either way every agent draws
        its batches, DP-SGD noise and noise share from its own generators, so both give the
        same updates up to floating-point rounding.
        """
        if isinstance(training, MultiLabelLocalTraining):  # BCE on the attributes, one agent after another
            if training.dann_scale is not None:
                raise ConfigError("local_da", "DANN local updates are single-label; not for multi-label ones")
            return [multilabel_votes.multilabel_local_update(agent, theta, training) for agent in agents]
        if training.dann_scale is not None:  # FedAvg+DA: DANN local steps, one agent after another
            if not self._agent_public_access:
                raise ConfigError(
                    "local_da",
                    "DANN reads the public pool beyond the queries, and this federation's agents may not "
                    "(agent_public_access is false): use --local-da none",
                )
            return [dann_local_update(agent, theta, training) for agent in agents]
        batched = self._gradient_clients() if self._batched and agents else None
        if batched is not None and batched.supports(training):
            return batched.updates(agents, theta, training)
        return [local_update(agent, theta, training) for agent in agents]

    def secure_update_sum(
        self, global_params: np.ndarray, agent_ids: np.ndarray, training: LocalTraining
    ) -> np.ndarray:
        """Σ over *every* agent of its release, (d,) float64 (d + 1 with a clip bit): all the server gets.

        θ goes to all N agents. An agent in ``agent_ids`` (its own coin said it takes part)
        sends its update, clipped and noised as ``training`` says (trained as
        :meth:`local_updates` trains them); every other agent sends its noise share
        N(0, training.noise_std²) alone, from its own generator. The server learns the
        total, not an update, nor who took part (DP-FedAvg with distributed noise). As for
        votes, the in-process sum stands for secure aggregation; with ``secure_sum`` the N
        vectors really go through :func:`~fedvote.aggregation.secure_sum.secure_sum`
        (pairwise masks, every agent responds). Counts N·d floats each way (and the input
        shift down with θ), one round.
        """
        theta = np.asarray(global_params, dtype=np.float32)
        chosen = sorted({int(i) for i in np.asarray(agent_ids).reshape(-1)})
        if isinstance(training, DiscreteTraining):
            return self._discrete_update_sum(theta, chosen, training)
        d, n = theta.shape[0], self.num_agents
        width = released_width(training, d)  # d, or d + 1 with adaptive clipping's bit
        count = count_coordinates(training)  # the release's trailing count coordinates (0 or 1)
        codec = self._secure_codec
        if codec is not None:
            codec.check_smoothing(training.noise_std, n)  # rounding after the noise must be free
        self.communication.count(down=(d + training.shift_floats) * n, up=width * n)
        with single_threaded():
            updates = self._updates(theta, [self._agents[i] for i in chosen], training)
            trained = dict(zip(chosen, updates, strict=True))

            def release_of(index: int) -> np.ndarray:
                """Agent ``index``'s own release: its update, or its noise share alone (its generator)."""
                if index in trained:
                    return trained[index].astype(np.float64)
                return self._agents[index].noise_share((width,), training.noise_std, count_coordinates=count)

            if codec is None:  # summed chunk by chunk: memory O(chunk·d), not O(N·d)
                return self._chunked_update_sum(n, width, trained, training)
            with ThreadPoolExecutor(max_workers=outer_threads()) as pool:  # the masked sum holds all N
                releases = list(pool.map(release_of, range(n)))
        floor = training.min_responders or 0  # t: as for votes (_released_sum), max(t, ⌊N/2⌋ + 1)
        return secure_sum(releases, threshold=min(n, max(floor, n // 2 + 1)), codec=codec)

    def _chunked_update_sum(
        self, n: int, width: int, trained: dict[int, np.ndarray], training: LocalTraining
    ) -> np.ndarray:
        """Σ of the N releases, (width,) float64, :data:`_SUM_CHUNK` agents at a time (memory O(chunk·d)).

        The N − m noise shares are most of a round (N·d Gaussians: 10⁹ on MNIST at N = 10,000).
        Each chunk's unsampled agents draw their shares as one block (:func:`noise_shares`: a row
        an agent, each from the agent's own generator), split between the pool's threads (torch
        draws without the GIL); the sampled agents' trained releases are added as they are. The
        server adds each chunk's rows: it never draws noise for the sum itself.
        """
        total = np.zeros(width, dtype=np.float64)
        count = count_coordinates(training)  # adaptive clipping's bit: drawn from the count streams
        buffer = np.empty((_SUM_CHUNK, width), dtype=np.float32)
        threads = outer_threads()
        with ThreadPoolExecutor(max_workers=threads) as pool:
            for start in range(0, n, _SUM_CHUNK):
                indices = range(start, min(n, start + _SUM_CHUNK))
                untrained = [i for i in indices if i not in trained]
                fast = [i for i in untrained if fast_shares_apply(self._agents[i])]
                slow = [i for i in untrained if not fast_shares_apply(self._agents[i])]
                parts = np.array_split(np.arange(len(fast)), max(1, min(threads, len(fast))))
                jobs = [
                    pool.submit(
                        noise_shares,
                        [self._agents[fast[int(k)]] for k in part],
                        width,
                        training.noise_std,
                        buffer[int(part[0]) :] if part.size else buffer,
                        count_coordinates=count,
                    )
                    for part in parts
                ]
                for job in jobs:
                    job.result()
                if fast:
                    total += buffer[: len(fast)].sum(axis=0, dtype=np.float64)
                for i in slow:  # secure-noise agents: their CSPRNG-seeded shares
                    agent = self._agents[i]
                    total += agent.noise_share((width,), training.noise_std, count_coordinates=count)
                for i in indices:
                    if i in trained:
                        total += trained[i].astype(np.float64)
        return total

    def _discrete_update_sum(
        self, theta: np.ndarray, chosen: list[int], training: DiscreteTraining
    ) -> np.ndarray:
        """Σ over every agent of its integer release (quantised update + share, or share alone), (d,).

        Integers all the way: summed exactly in int64 (N·largest_value < 2^53, checked), or with
        ``--secure-sum`` through the pairwise-masked sum on a 64-bit ring at resolution 1, whose
        capacity check refuses a federation whose sum could wrap. Returned as float64 (exact).
        """
        d, n = theta.shape[0], self.num_agents
        if n * training.largest_value >= 2**53:
            raise ConfigError(
                "secure_sum", f"{n} agents sending up to ±{training.largest_value} could overflow"
            )
        self.communication.count(down=(d + training.shift_floats) * n, up=d * n)
        with single_threaded():
            updates = self._updates(theta, [self._agents[i] for i in chosen], training)
        trained = dict(zip(chosen, updates, strict=True))

        def release_of(index: int) -> np.ndarray:
            """Agent ``index``'s integer release, (d,) int64."""
            return trained[index] if index in trained else discrete_share(self._agents[index], d, training)

        if self._secure_codec is None:
            total = np.zeros(d, dtype=np.int64)
            for index in range(n):  # in the agents' order; memory: one release at a time
                total += release_of(index)
            return total.astype(np.float64)  # exact: |total| < 2^53
        releases = [release_of(index) for index in range(n)]
        codec = FixedPoint(bits=64, scale_bits=0, bound=float(training.largest_value))
        codec.check_capacity(n)  # the ring cannot wrap
        floor = training.min_responders or 0
        threshold = min(n, max(floor, n // 2 + 1))
        return secure_sum([r.astype(np.float64) for r in releases], threshold=threshold, codec=codec)

    def _gradient_clients(self) -> BatchedUpdates:
        if self._batched_updates is None:
            shape = tuple(self._private[0].features.shape[1:])
            self._batched_updates = BatchedUpdates(self._stacked_records(), shape, self._num_classes)
        return self._batched_updates
