"""In-process transport: agents are objects; the vote sum is computed in memory.

:class:`LocalTransport` builds the agents and composes one mixin per skill, each in its own
module of this package: ``teachers`` (teacher votes, DANN teachers, Confident-GNMax),
``knn`` (kNN votes), ``weighted`` (reputation-weighted votes, agent behaviours), ``updates``
(local updates and their secure sum), ``heads`` (FedAUXfdp's private heads),
``personalised`` (PriFedSync's client models) and ``multilabel``; ``shared`` holds what
they share (the agents, the (secure) sum of releases). The simulation diagnostics, which
read every skill's state, are here.
"""

from __future__ import annotations

import secrets

import numpy as np
import torch

from fedvote.agents import teacher_votes
from fedvote.agents.agent import Agent
from fedvote.aggregation.secure_noise import csprng_seeded_generator
from fedvote.aggregation.secure_sum import FixedPoint
from fedvote.data.federation import Federation, LabeledData
from fedvote.errors import ConfigError
from fedvote.models.precision import compute_device
from fedvote.transport.base import agent_noise_seeds, agent_training_seeds
from fedvote.transport.capabilities import SimulationDiagnostics
from fedvote.transport.local.heads import PrivateHeadSkills
from fedvote.transport.local.knn import KnnVoteSkills
from fedvote.transport.local.multilabel import MultiLabelSkills
from fedvote.transport.local.personalised import PersonalisedModelSkills
from fedvote.transport.local.teachers import TeacherVoteSkills
from fedvote.transport.local.updates import LocalUpdateSkills
from fedvote.transport.local.weighted import WeightedVoteSkills


class LocalTransport(
    TeacherVoteSkills,
    KnnVoteSkills,
    WeightedVoteSkills,
    LocalUpdateSkills,
    PrivateHeadSkills,
    PersonalisedModelSkills,
    MultiLabelSkills,
    SimulationDiagnostics,
):
    """Runs every agent of ``federation`` in this process; it serves every capability.

    Parameters
    ----------
    federation : Federation
        Supplies each agent's private data and the public pool.
    seed : int
        Seeds the teachers' training (initialisation and batch order).
    noise_seed : int or None
        Seeds the privacy noise, for reproducible simulations only. ``None`` (default)
        draws it from OS entropy, so no seed printed anywhere predicts the noise.
    batched : bool
        Train all teachers as one vectorised ensemble and compute all agents' votes in
        one tensor operation (default), when the agents share an architecture; else
        (or with ``False``) loop over agents one model at a time. Both give the same
        teachers up to floating-point rounding, and the same noise: each agent still
        adds its own noise share from its own generator.
    device : str or torch.device
        Where the batched ensemble trains and votes, and the batched clients of the gradient
        methods train: ``"auto"`` (default) is CUDA when PyTorch sees a GPU, else the CPU;
        or name one, e.g. ``"cpu"``. Only where the arithmetic runs: every noise draw is
        still made on the CPU from its agent's own generator and every release leaves
        through its agent. A GPU rounds differently (cuDNN's TF32
        convolutions), so its teachers differ slightly from the CPU's
        (``benchmarks/bench_cnn_gpu.py`` measures how much).
    secure_sum : bool
        Sum the agents' noisy releases through the pairwise-mask secure-sum protocol
        (:mod:`fedvote.aggregation.secure_sum`, fresh OS-random seeds every round), so the
        server-side view is masked vectors and their total; the decoded sum equals the
        plain sum up to the fixed-point resolution 2^-24 per agent. Default ``False``.
    secure_noise : bool
        Every agent draws its noise as ``--secure-noise`` says
        (:class:`~fedvote.agents.agent.Agent`): integer votes + exact discrete Gaussian
        shares from the OS CSPRNG (their sums are then exact integers), other releases from
        a generator seeded by ``os.urandom``. Refused with ``noise_seed``. Default ``False``.

    """

    def __init__(
        self,
        federation: Federation,
        *,
        seed: int = 0,
        noise_seed: int | None = None,
        batched: bool = True,
        device: str | torch.device = "auto",
        secure_sum: bool = False,
        secure_noise: bool = False,
    ):
        super().__init__()
        if secure_noise and noise_seed is not None:
            raise ConfigError("secure_noise", "draws from the OS CSPRNG, unseedable: drop --noise-seed")
        self._secure_codec = FixedPoint() if secure_sum else None
        if self._secure_codec is not None:
            self._secure_codec.check_capacity(federation.num_agents)
        entropy = noise_seed if noise_seed is not None else secrets.randbits(128)
        self._noise_entropy = entropy  # PriFedSync's batched clients draw from it too
        training_seeds = agent_training_seeds(seed, federation.num_agents)
        self._agents = [
            Agent(
                agent_id=i,
                data=data,
                public_features=federation.public.features,
                num_classes=federation.num_classes,
                noise_rng=(
                    csprng_seeded_generator()
                    if secure_noise
                    else np.random.default_rng(agent_noise_seeds(entropy, i))
                ),
                seed=training_seeds[i],
                secure_noise=secure_noise,
            )
            for i, data in enumerate(federation.agents)
        ]
        self._num_classes = federation.num_classes
        self._agent_public_access = federation.agent_public_access
        # The in-process simulator holds every agent's data anyway; the batched path
        # trains from it directly and installs each trained teacher in its agent.
        self._private = federation.agents
        self._public_features = federation.public.features
        self._training_seeds = training_seeds
        self._batched = batched
        self._device = compute_device(device)  # float32: the batched teachers and clients
        # Each skill's state, built by its first call (the skill modules declare them).
        self._ensemble = None
        self._knn = None
        self._weighted = None
        self._records = None
        self._batched_clients = None
        self._batched_updates = None

    def teacher_accuracies(self, test: LabeledData) -> np.ndarray:
        """Each teacher's accuracy on ``test``, (N,) — a simulation diagnostic, not a release.

        The runner passes a sample of at most
        :data:`~fedvote.analysis.DIAGNOSTIC_TEST_SAMPLE` test points. Batched teachers are
        evaluated by the ensemble's one forward, the one their votes come from
        (``ModelEnsemble.predict``): 100 random MNIST CNNs on 1,000 images, 2 threads, 2-core
        AMD EPYC, 1.8-2.0 s against 7.7-9.4 s one installed teacher after another, the same
        labels. Teachers trained one by one are looped. Nothing is sent, counted or drawn
        from any noise stream.
        """
        if self._knn is not None and self._ensemble is None:  # kNN agents (prepare_knn)
            return self._knn_accuracies(test)
        if self.multilabel_trained:  # multi-label teachers: the task's accuracy
            return self._multilabel_teacher_accuracies(test)
        if self._ensemble is None:
            return np.array([agent.teacher_accuracy(test) for agent in self._agents])
        predictions = self._ensemble.predict(test.features).cpu().numpy()  # (N, T)
        return np.mean(predictions == test.labels[None, :], axis=1)

    def clean_vote_histograms(self, query_indices: np.ndarray) -> np.ndarray:
        """Simulation-only diagnostic: the noiseless vote sums Σᵢ fᵢ(x) of ``query_indices``, (Q, C).

        The teachers' one-hot votes, or the kNN votes after :meth:`prepare_knn`. Not a
        release and not communication: in a deployment these sums exist nowhere. They
        feed the data-dependent analysis (:mod:`fedvote.privacy.data_dependent`).
        """
        queries = np.asarray(query_indices, dtype=np.int64)
        if self.multilabel_trained:  # the τ-clipped votes, (Q, A)
            return self._clean_multilabel_votes(queries)
        if self._knn is not None and self._ensemble is None:  # kNN agents (prepare_knn)
            if self._knn.index is not None:
                return self._knn.index.votes(self._knn.public[queries]).sum(axis=0)  # (Q, C)
            return np.sum([voter.noisy_votes(queries, 0.0) for voter in self._knn.voters], axis=0)
        if self._ensemble is None:  # noise_std 0 adds no noise and draws nothing
            return np.sum([teacher_votes.noisy_votes(agent, queries, 0.0) for agent in self._agents], axis=0)
        labels = self._ensemble.predict(self._public_features[queries]).cpu().numpy()  # (N, Q)
        return np.eye(self._num_classes, dtype=np.float64)[labels].sum(axis=0)  # (Q, C)
