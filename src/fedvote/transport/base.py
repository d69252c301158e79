"""The seam between *what* a method does and *where* its agents act.

A method talks to agents only through a :class:`Transport`: it asks them to train
their teachers and to vote on query indices into the public pool, and receives only
the *sum* of their noisy votes (as secure aggregation would reveal it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedvote.agents.behaviour import Behaviour
from fedvote.aggregation.voting import WeightRule
from fedvote.data.federation import LabeledData
from fedvote.models.batched_dp_sgd import NoisyTraining
from fedvote.models.features import FeatureExtractor
from fedvote.models.local_training import LocalTraining, LocalUpdates
from fedvote.models.logistic_heads import HeadFeatures, HeadRequest, ReleasedHeads
from fedvote.models.training import TrainingConfig
from fedvote.progress import NO_PROGRESS, Progress


@dataclass(frozen=True, eq=False)
class VoteSum:
    """Sum over responders of their noisy votes, (Q, C), and how many responded."""

    sums: np.ndarray
    responders: int


@dataclass(frozen=True, eq=False)
class ReleasedLabels:
    """All that leaves the aggregator in a Confident-GNMax round (``--release labels``).

    ``answered`` (Q,) bool: the released pass bits of the threshold check; ``labels`` (A,)
    int64: the noisy-argmax labels of the answered queries, in query order (A = answered
    count); ``responders``: how many agents added a noise share (so the noise actually in
    each sum is responders·share²). The noisy sums themselves stay inside the aggregator.
    """

    answered: np.ndarray
    labels: np.ndarray
    responders: int


@dataclass
class Communication:
    """Floats sent agent→server (up) and server→agent (down), and communication rounds."""

    upload_floats: int = 0
    download_floats: int = 0
    rounds: int = 0

    def as_dict(self) -> dict[str, int]:
        """JSON-ready counters."""
        return {
            "upload_floats": self.upload_floats,
            "download_floats": self.download_floats,
            "rounds": self.rounds,
        }


def agent_training_seeds(seed: int, num_agents: int) -> list[int]:
    """Each agent's teacher seed (N,), a function of the run's ``seed`` only.

    Shared by every transport, so agent i trains the same teacher in-process and on its
    own node.
    """
    return [int(s) for s in np.random.SeedSequence([seed, 0xA6E]).generate_state(num_agents)]


def agent_noise_seeds(entropy: int, agent_id: int) -> np.random.SeedSequence:
    """Agent ``agent_id``'s privacy-noise stream: child i of ``SeedSequence(entropy)``.

    The same stream ``SeedSequence(entropy).spawn(N)[agent_id]`` gives, so an agent
    seeded for a reproducible simulation draws the same noise under every transport.
    """
    return np.random.SeedSequence(entropy, spawn_key=(agent_id,))


class Transport(ABC):
    """Agents' actions as seen by the server; implementations decide where agents run."""

    def __init__(self) -> None:
        self.communication = Communication()

    @property
    @abstractmethod
    def num_agents(self) -> int:
        """Number of agents N."""

    @abstractmethod
    def train_teachers(self, config: TrainingConfig, progress: Progress = NO_PROGRESS) -> None:
        """Every agent trains its local teacher on its private data."""

    @abstractmethod
    def vote_sum(
        self, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of the agents' noisy votes on ``query_indices`` (one communication round).

        Each agent adds N(0, noise_std²) to its own vote. Returns ``None`` — nothing is
        released — when fewer than ``min_responders`` agents answered.
        """

    def confident_labels(
        self,
        query_indices: np.ndarray,
        *,
        threshold: float,
        threshold_noise_std: float,
        noise_std: float,
        min_responders: int,
    ) -> ReleasedLabels | None:
        """Confident-GNMax on the teachers' votes (Papernot et al. 2018, Alg. 1); one round.

        Each agent sends two independently noised copies of its one-hot votes (shares
        N(0, threshold_noise_std²) and N(0, noise_std²)); the aggregator sums each copy,
        checks max_j ≥ ``threshold`` on the first and releases the argmax of the second for
        the queries that pass — only labels and pass bits leave it. ``None`` (nothing
        released) when fewer than ``min_responders`` answered. Only a transport whose
        aggregator is not the server can offer it (in-process: the secure sum).
        """
        raise NotImplementedError(f"{type(self).__name__} cannot release labels only (--release labels)")

    @abstractmethod
    def teacher_accuracies(self, test: LabeledData) -> np.ndarray:
        """Simulation-only diagnostic: each teacher's test accuracy, (N,). Not a release."""

    # --- Reputation-weighted voting (reputation-weighted-pate.txt) -------------------------
    # Not abstract: transports that do not support weighted voting refuse it when asked.

    def accuracy_summary(
        self, validation: LabeledData, bins: int, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of the agents' noisy one-hot accuracy bins, ``sums`` (1, B); one round.

        ``validation`` (public, labelled) goes down to every agent; each measures its
        teacher on it and sends the one-hot bin of its accuracy plus N(0, noise_std²).
        ``None`` (nothing released) when fewer than ``min_responders`` answered.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support weighted voting")

    def assign_weights(self, validation: LabeledData | None, rule: WeightRule) -> None:
        """Every agent fixes its own vote weight from ``rule`` and its validation accuracy.

        Nothing comes back: weights stay inside the agents (``rule`` carries only public
        values: the scheme, [w_min, w_max] and the released accuracy summary).
        """
        raise NotImplementedError(f"{type(self).__name__} does not support weighted voting")

    def weighted_vote_sum(
        self, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of the agents' weighted noisy votes w_i·e_{f_i(x)} + N(0, noise_std²); as :meth:`vote_sum`.

        Needs :meth:`assign_weights` first.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support weighted voting")

    def simulate_behaviours(self, behaviours: Sequence[Behaviour]) -> None:
        """Simulation only: make agent i behave as ``behaviours[i]`` (bad and malicious teachers)."""
        raise NotImplementedError(f"{type(self).__name__} cannot simulate agent behaviours")

    # --- Private-kNN-FL (Algorithm 2) ---------------------------------------------------
    # Not abstract: transports that do not support kNN voting refuse it when asked.

    def prepare_knn(
        self, extractor: FeatureExtractor, *, k: int | None = None, k_fraction: float = 0.05
    ) -> np.ndarray:
        """Ship the public φ to every agent, which embeds its own records for kNN voting.

        Each agent uses ``k`` neighbours, or ``round(k_fraction · n_i)`` (at least 1) of its
        n_i records. Returns each agent's k, (N,) int64 — public metadata the server needs
        for accounting (the instance-level sensitivity is √2 / min k).
        """
        raise NotImplementedError(f"{type(self).__name__} does not support kNN voting")

    def knn_vote_sum(
        self, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of the agents' noisy kNN votes on ``query_indices``; as :meth:`vote_sum`.

        Each agent's vote is the mean one-hot label of the query's k nearest neighbours
        among its own records in φ-space (it sums to 1), plus N(0, noise_std²).
        Needs :meth:`prepare_knn` first.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support kNN voting")

    # --- Gradient-based baselines (FedAvg, DP-FedAvg, DP-FedSGD) ----------------------------
    # Not abstract: transports that do not support local training refuse it when asked.

    # --- FedAUXfdp (fedaux-fdp.txt): output-perturbed logistic heads ---------------------------
    # Not abstract: transports that do not support it refuse it when asked.

    def private_heads(
        self, features: HeadFeatures, request: HeadRequest, progress: Progress = NO_PROGRESS
    ) -> list[ReleasedHeads]:
        """Ship the public feature map h̃ to every agent; each releases its perturbed heads.

        One communication round: h̃ (and the negative-data indices) down, each agent's
        class head (C·(d+1) floats) and scoring head (d+1) up. The agents fit and perturb
        inside their boundary (:meth:`fedvote.agents.agent.Agent.private_heads`).
        """
        raise NotImplementedError(f"{type(self).__name__} does not support FedAUX private heads")

    def record_counts(self) -> np.ndarray:
        """Each agent's number of private records n_i, (N,) — public metadata, as in the papers."""
        raise NotImplementedError(f"{type(self).__name__} does not support gradient-based methods")

    def local_updates(
        self, global_params: np.ndarray, agent_ids: np.ndarray, training: LocalTraining
    ) -> LocalUpdates:
        """One communication round: agents ``agent_ids`` train from θ and send their updates.

        θ (d,) goes down to each of the m listed agents; each trains on its own records as
        ``training`` says and sends back its update (clipped and noised agent-side when
        ``training`` asks). Counts d·m floats each way and one round, also when m = 0.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support gradient-based methods")

    # --- PriFedSync (federated-f-dp-prifedsync.txt): personalised models, local noisy SGD ---
    # Not abstract: transports that do not support it refuse it when asked.

    def private_local_models(
        self, helpers: np.ndarray, agent_ids: np.ndarray, training: NoisyTraining
    ) -> np.ndarray:
        """One synchronisation round: client ``agent_ids[j]`` gets helper ``helpers[j]`` (m, d).

        Each runs Algorithm 2 (K steps of noisy SGD or Adam, per-sample clip C, noise
        N(0, 4C²σ²)) from its helper on its own records and sends back its private model,
        (m, d). Counts d·m floats each way and one round, also when m = 0.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support PriFedSync")

    def client_accuracies(
        self,
        models: np.ndarray,
        agent_ids: np.ndarray,
        test: LabeledData,
        *,
        per_client: int,
        layer_sizes: tuple[int, ...],
    ) -> np.ndarray:
        """Simulation-only diagnostic: ``models[j]``'s accuracy on client ``agent_ids[j]``'s test set.

        A client's test set is ``per_client`` records of ``test`` with the labels it trained
        on (:func:`fedvote.data.client_holdout.client_test_indices`). Not a release: it reads
        the clients' label sets, which a deployment would evaluate client-side.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support PriFedSync")
