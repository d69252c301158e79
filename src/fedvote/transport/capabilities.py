"""What a transport can do, one small ABC per skill; a method names the skills it needs.

:class:`~fedvote.transport.base.Transport` holds only what every transport does (the
communication counters, N, the agents' record counts). Everything else is a capability a
transport declares by inheriting it — ``class LocalTransport(Transport, TeacherVotes, …)``
— and a method declares by listing it (:attr:`fedvote.methods.base.Method.requires`,
:meth:`~fedvote.methods.base.Method.requirements`). :func:`check_capabilities` compares
the two before anything is charged or trained, so a method never meets a transport that
cannot serve it halfway through a run.

:class:`SimulationDiagnostics` is never required: it computes noiseless functions of the
agents' private data that only an in-process simulation has, and a method that reports
one does so only ``if isinstance(transport, SimulationDiagnostics)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from fedvote.agents.behaviour import Behaviour
from fedvote.aggregation.voting import WeightRule
from fedvote.data.attributes import AttributeTask
from fedvote.data.federation import LabeledData
from fedvote.errors import ConfigError
from fedvote.models import local_training
from fedvote.models.batched_dp_sgd import NoisyTraining
from fedvote.models.dann import DannConfig
from fedvote.models.features import FeatureExtractor
from fedvote.models.local_training import LocalTraining
from fedvote.models.logistic_heads import HeadFeatures, HeadRequest, ReleasedHeads
from fedvote.models.training import TrainingConfig
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import ReleasedLabels, Transport, VoteSum

if TYPE_CHECKING:
    from fedvote.methods.base import Method


class Capability(ABC):
    """One skill a transport may offer; ``description`` names it in messages ("teacher votes")."""

    description: ClassVar[str]


class TeacherVotes(Capability):
    """Agents train teachers on their private data and vote on public queries (PATE-FL)."""

    description: ClassVar[str] = "teacher votes"

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


class IndividualTeacherVotes(Capability):
    """Teacher votes weighted by each agent's public budget weight and/or Poisson-subsampled (issue 45).

    ``--agent-budgets`` / ``--vote-sampling`` of PATE-FL (Individualized PATE's weighting;
    Private-kNN's subsampling): ``docs/privacy.md``, "Individual budgets and subsampled voting".
    """

    description: ClassVar[str] = "individually weighted, subsampled teacher votes"

    @abstractmethod
    def individual_vote_sum(
        self,
        query_indices: np.ndarray,
        noise_std: float,
        min_responders: int,
        *,
        weights: np.ndarray,
        sampling_rate: float,
    ) -> VoteSum | None:
        """Sum over agents of w_i·b_ij·e_{f_i(x_j)} + N(0, noise_std²), (Q, C); as ``vote_sum``.

        ``weights`` (N,) are public; b_ij ~ Bernoulli(``sampling_rate``) is drawn by agent i
        from its own privacy stream, per query, and never leaves it: every agent sends its
        noise share on every query, sampled or not. Needs :meth:`TeacherVotes.train_teachers`.
        """


class DomainAdaptedTeachers(Capability):
    """Agents train teachers by DANN against the public pool (PATE-FL+DA, ``--teacher-da dann``).

    Only where the federation lets agents read the unlabelled public pool beyond the
    queries (``Federation.agent_public_access``): :meth:`train_adapted_teachers` refuses
    otherwise, before training anything.
    """

    description: ClassVar[str] = "domain-adapted teachers (DANN)"

    @abstractmethod
    def train_adapted_teachers(
        self, config: TrainingConfig, dann: DannConfig, progress: Progress = NO_PROGRESS
    ) -> None:
        """Every agent trains its teacher by DANN: its records as source, the public pool as target.

        Raises :class:`~fedvote.errors.ConfigError` (``teacher_da``) when the agents may
        not read the pool. Votes then go through :meth:`TeacherVotes.vote_sum` as usual.
        """


class LabelRelease(Capability):
    """An aggregator that is not the server lets out labels only (``--release labels``)."""

    description: ClassVar[str] = "label-only release (Confident-GNMax)"

    @abstractmethod
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


class KnnVotes(Capability):
    """Agents vote with the labels of their k nearest records in a public φ-space (Private-kNN-FL)."""

    description: ClassVar[str] = "kNN votes"

    @abstractmethod
    def prepare_knn(
        self, extractor: FeatureExtractor, *, k: int | None = None, k_fraction: float = 0.05
    ) -> np.ndarray:
        """Ship the public φ to every agent, which embeds its own records for kNN voting.

        Each agent uses ``k`` neighbours, or ``round(k_fraction · n_i)`` (at least 1) of its
        n_i records. Returns each agent's k, (N,) int64 — public metadata the server needs
        for accounting (the instance-level sensitivity is √2 / min k).
        """

    @abstractmethod
    def knn_vote_sum(
        self, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of the agents' noisy kNN votes on ``query_indices``; as :meth:`TeacherVotes.vote_sum`.

        Each agent's vote is the mean one-hot label of the query's k nearest neighbours
        among its own records in φ-space (it sums to 1), plus N(0, noise_std²).
        Needs :meth:`prepare_knn` first.
        """


class IndividualKnnVotes(Capability):
    """kNN votes weighted by each agent's public budget weight and/or Poisson-subsampled (issue 45)."""

    description: ClassVar[str] = "individually weighted, subsampled kNN votes"

    @abstractmethod
    def individual_knn_vote_sum(
        self,
        query_indices: np.ndarray,
        noise_std: float,
        min_responders: int,
        *,
        weights: np.ndarray,
        sampling_rate: float,
    ) -> VoteSum | None:
        """As :meth:`IndividualTeacherVotes.individual_vote_sum` with the agents' kNN votes.

        Needs :meth:`KnnVotes.prepare_knn` first.
        """


class WeightedVotes(Capability):
    """Reputation-weighted voting (reputation-weighted-pate.txt): weights stay inside the agents."""

    description: ClassVar[str] = "reputation-weighted votes"

    @abstractmethod
    def accuracy_summary(
        self, validation: LabeledData, bins: int, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of the agents' noisy one-hot accuracy bins, ``sums`` (1, B); one round.

        ``validation`` (public, labelled) goes down to every agent; each measures its
        teacher on it and sends the one-hot bin of its accuracy plus N(0, noise_std²).
        ``None`` (nothing released) when fewer than ``min_responders`` answered.
        """

    @abstractmethod
    def assign_weights(self, validation: LabeledData | None, rule: WeightRule) -> None:
        """Every agent fixes its own vote weight from ``rule`` and its validation accuracy.

        Nothing comes back: weights stay inside the agents (``rule`` carries only public
        values: the scheme, [w_min, w_max] and the released accuracy summary).
        """

    @abstractmethod
    def weighted_vote_sum(
        self, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of the agents' weighted noisy votes w_i·e_{f_i(x)} + N(0, noise_std²); as a vote sum.

        Needs :meth:`assign_weights` first.
        """


class AgentBehaviours(Capability):
    """Simulation only: some agents are bad or malicious teachers."""

    description: ClassVar[str] = "simulated agent behaviours"

    @abstractmethod
    def simulate_behaviours(self, behaviours: Sequence[Behaviour]) -> None:
        """Simulation only: make agent i behave as ``behaviours[i]`` (bad and malicious teachers)."""


class LocalUpdates(Capability):
    """Agents train a shared model on their own records and send their updates (FedAvg family)."""

    description: ClassVar[str] = "local model updates"

    @abstractmethod
    def local_updates(
        self, global_params: np.ndarray, agent_ids: np.ndarray, training: LocalTraining
    ) -> local_training.LocalUpdates:
        """One communication round: agents ``agent_ids`` train from θ and send their updates.

        θ (d,) goes down to each of the m listed agents; each trains on its own records as
        ``training`` says and sends back its update (clipped and noised agent-side when
        ``training`` asks), training on its records minus ``training.input_shift`` when the
        round has one (a public constant sent with θ). Counts d·m floats each way (plus the
        shift's floats down to each agent) and one round, also when m = 0.
        """


class SecureUpdateSum(Capability):
    """Every agent's release of a round is summed by secure aggregation (DP-FedAvg, distributed noise)."""

    description: ClassVar[str] = "securely summed updates"

    @abstractmethod
    def secure_update_sum(
        self, global_params: np.ndarray, agent_ids: np.ndarray, training: LocalTraining
    ) -> np.ndarray:
        """Σ over all N agents of (Δ̃_i if sampled else 0) + the agent's noise share, (d,).

        θ goes to all N agents. An agent in ``agent_ids`` sends its update, clipped and
        noised as ``training`` says; every other agent sends its noise share
        N(0, training.noise_std²) alone. The server learns the total only, not an update
        nor who took part. The input shift, if any, goes down with θ as for
        :meth:`LocalUpdates.local_updates`. Counts N·d floats each way (plus the shift's
        floats down to each agent), one round.
        """


class PrivateHeads(Capability):
    """FedAUXfdp (fedaux-fdp.txt): agents release output-perturbed logistic heads."""

    description: ClassVar[str] = "private FedAUX heads"

    @abstractmethod
    def private_heads(
        self, features: HeadFeatures, request: HeadRequest, progress: Progress = NO_PROGRESS
    ) -> list[ReleasedHeads]:
        """Ship the public feature map h̃ to every agent; each releases its perturbed heads.

        One communication round: h̃ (and the negative-data indices) down, each agent's
        class head (C·(d+1) floats) and scoring head (d+1) up. The agents fit and perturb
        inside their boundary (:func:`fedvote.agents.private_heads.private_heads`).
        """


class PersonalisedModels(Capability):
    """PriFedSync (federated-f-dp-prifedsync.txt): personalised models by local noisy SGD."""

    description: ClassVar[str] = "personalised local models"

    @abstractmethod
    def private_local_models(
        self, helpers: np.ndarray, agent_ids: np.ndarray, training: NoisyTraining
    ) -> np.ndarray:
        """One synchronisation round: client ``agent_ids[j]`` gets helper ``helpers[j]`` (m, d).

        Each runs Algorithm 2 (K steps of noisy SGD or Adam, per-sample clip C, noise
        N(0, 4C²σ²)) from its helper on its own records and sends back its private model,
        (m, d). Counts d·m floats each way and one round, also when m = 0.
        """


class MultiLabelTeacherVotes(Capability):
    """Agents train multi-label (BCE) teachers and send τ-clipped votes (``pate-fl-multilabel``).

    Agent side: :mod:`fedvote.agents.multilabel_votes`; in process:
    :class:`fedvote.transport.local.multilabel.MultiLabelSkills`.
    """

    description: ClassVar[str] = "multi-label teacher votes"

    @abstractmethod
    def train_multilabel_teachers(
        self, config: TrainingConfig, task: AttributeTask, progress: Progress = NO_PROGRESS
    ) -> None:
        """Every agent trains a teacher of ``task``'s A attributes (sigmoid outputs, BCE) on its records."""

    @abstractmethod
    def multilabel_vote_sum(
        self, query_indices: np.ndarray, tau: int, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """Sum of the agents' noisy τ-clipped votes on ``query_indices``, ``sums`` (Q, A); one round.

        Each agent sends the indicator of its teacher's top-τ attributes among those with
        probability > 1/2, plus N(0, noise_std²). ``None`` (nothing released) when fewer than
        ``min_responders`` answered.
        """


class MultiLabelUpdates(Capability):
    """Agents train local updates with BCE on A attributes (``dp-fedavg-multilabel``)."""

    description: ClassVar[str] = "multi-label (BCE) local updates"

    @abstractmethod
    def trains_multilabel(self, training: LocalTraining) -> bool:
        """Whether a round of ``training`` runs the BCE path (a ``MultiLabelLocalTraining``)."""


class SimulationDiagnostics(Capability):
    """Noiseless functions of the agents' private data: an in-process simulation's, never a release.

    Never required by a method; used only where a transport has it.
    """

    description: ClassVar[str] = "simulation diagnostics"

    @abstractmethod
    def teacher_accuracies(self, test: LabeledData) -> np.ndarray:
        """Simulation-only diagnostic: each teacher's accuracy on ``test``, (N,). Not a release.

        The runner passes a seeded sample of at most
        :data:`~fedvote.analysis.DIAGNOSTIC_TEST_SAMPLE` test points
        (:func:`~fedvote.analysis.diagnostic_test_sample`); with n = 1000 each accuracy has
        standard error ≤ 0.016 as an estimate of the whole test set's.
        """

    @abstractmethod
    def clean_vote_histograms(self, query_indices: np.ndarray) -> np.ndarray:
        """Simulation-only diagnostic: the noiseless vote sums Σᵢ fᵢ(x) of ``query_indices``, (Q, C).

        Not a release and not communication: in a deployment these sums exist nowhere. They
        feed the data-dependent analysis (:mod:`fedvote.privacy.data_dependent`).
        """

    @abstractmethod
    def client_accuracies(
        self,
        models: np.ndarray,
        agent_ids: np.ndarray,
        test: LabeledData,
        *,
        per_client: int,
        layer_sizes: tuple[int, ...],
        input_shift: tuple[float, ...] | None = None,
    ) -> np.ndarray:
        """Simulation-only diagnostic: ``models[j]``'s accuracy on client ``agent_ids[j]``'s test set.

        ``input_shift`` (in,) is subtracted from the test records, as from the training ones.

        A client's test set is ``per_client`` records of ``test`` with the labels it trained
        on (:func:`fedvote.data.client_holdout.client_test_indices`). Not a release: it reads
        the clients' label sets, which a deployment would evaluate client-side.
        """


# Every capability, in the order messages list them.
CAPABILITIES: tuple[type[Capability], ...] = (
    TeacherVotes,
    DomainAdaptedTeachers,
    LabelRelease,
    KnnVotes,
    WeightedVotes,
    AgentBehaviours,
    LocalUpdates,
    SecureUpdateSum,
    PrivateHeads,
    PersonalisedModels,
    MultiLabelTeacherVotes,
    MultiLabelUpdates,
    SimulationDiagnostics,
)


def missing_capabilities(required: Iterable[type], transport: Transport) -> list[type]:
    """The capabilities in ``required`` that ``transport`` does not declare, in order, once each."""
    missing: list[type] = []
    for capability in required:
        if not isinstance(transport, capability) and capability not in missing:
            missing.append(capability)
    return missing


def describe(capabilities: Sequence[type]) -> str:
    """``"teacher votes"``, ``"teacher votes and kNN votes"``, ``"a, b and c"``."""
    names = [getattr(c, "description", c.__name__) for c in capabilities]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def check_capabilities(method: Method, transport: Transport) -> None:
    """Refuse, before anything is charged or trained, a transport that lacks a skill ``method`` needs.

    Raises :class:`~fedvote.errors.ConfigError` on ``method``, one line naming both:
    ``"pate-fl needs label-only release (Confident-GNMax) which FlowerTransport cannot serve"``.
    """
    missing = missing_capabilities(method.requirements(), transport)
    if missing:
        raise ConfigError(
            "method", f"{method.name} needs {describe(missing)} which {type(transport).__name__} cannot serve"
        )
