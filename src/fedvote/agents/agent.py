"""An agent of the federation; its public surface is the privacy boundary.

Everything an :class:`Agent` returns through its public methods is already noised
(its share of the noise, :meth:`Agent.noisy_votes`) or is a simulation-only
diagnostic explicitly named so. The same class runs in-process (LocalTransport) and
on a node of its own (the Flower transport).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedvote.agents.behaviour import HONEST, Behaviour
from fedvote.aggregation.knn import knn_votes, resolve_k
from fedvote.aggregation.validation import validate_vote
from fedvote.aggregation.voting import WeightRule, accuracy_bin, one_hot_votes
from fedvote.data.federation import LabeledData
from fedvote.errors import ConfigError
from fedvote.models.features import FeatureExtractor
from fedvote.models.local_training import (
    LocalTraining,
    clip_to_norm,
    dp_sgd_steps,
    flat_parameters,
    load_flat_parameters,
    sgd_steps,
)
from fedvote.models.logistic_heads import (
    HeadFeatures,
    HeadRequest,
    ReleasedHeads,
    fit_binary_head,
    fit_multinomial_head,
    fit_sgd_head,
    head_norm_bound,
    project_to_ball,
)
from fedvote.models.training import TrainingConfig, fit_classifier, predict_labels
from fedvote.models.zoo import build_model


class Agent:
    """One agent: its private labelled data, a copy of the public pool, its teacher.

    Parameters
    ----------
    agent_id : int
        Index of the agent in the federation.
    data : LabeledData
        The agent's private records; never leaves the agent.
    public_features : np.ndarray
        The public pool (P, *shape); queries arrive as indices into it.
    num_classes : int
        Number of classes C.
    noise_rng : np.random.Generator
        Source of this agent's privacy noise (seeded only for reproducible simulations).
    seed : int
        Seeds the teacher's initialisation and batch order.

    """

    def __init__(
        self,
        *,
        agent_id: int,
        data: LabeledData,
        public_features: np.ndarray,
        num_classes: int,
        noise_rng: np.random.Generator,
        seed: int,
        behaviour: Behaviour = HONEST,
    ) -> None:
        self.agent_id = agent_id
        self._data = data
        self._public_features = public_features
        self._num_classes = num_classes
        self._noise_rng = noise_rng
        self._seed = seed
        self._teacher: nn.Module | None = None
        self._knn: _KnnState | None = None
        self.set_behaviour(behaviour)
        self._weight: float | None = None

    @property
    def num_records(self) -> int:
        """Size of the private dataset (public metadata, as in the papers' settings)."""
        return len(self._data)

    def train_teacher(self, config: TrainingConfig) -> None:
        """Train the local teacher f_i on the private data (Algorithm 1, line 2)."""
        generator = torch.Generator().manual_seed(self._seed)
        model = build_model(
            config.model,
            tuple(self._data.features.shape[1:]),
            self._num_classes,
            generator=generator,
        )
        self._teacher = fit_classifier(
            model, self._data.features, self._data.labels, config, generator
        )

    def install_teacher(self, teacher: nn.Module) -> None:
        """Take ``teacher`` as f_i: a model trained for this agent on its own private data.

        For in-process transports that train every agent's teacher at once (the batched
        ensemble of :class:`fedvote.transport.LocalTransport`); the result is the teacher
        :meth:`train_teacher` would have produced, up to floating-point rounding.
        """
        self._teacher = teacher.eval()

    def teacher_checkpoint(self) -> dict[str, torch.Tensor]:
        """A copy of the teacher's weights, for this agent's own node to keep between messages.

        Not a release: a transport that handles each message in a fresh process (Flower's
        ClientApp) keeps it in the node-local state and gives it back through
        :meth:`install_teacher`; it never leaves the agent's node.
        """
        return {name: value.detach().clone() for name, value in self._require_teacher().state_dict().items()}

    def noisy_votes(self, query_indices: np.ndarray, noise_std: float) -> np.ndarray:
        """The agent's release for these queries: one-hot votes + N(0, noise_std²), (Q, C).

        Algorithm 1, line 5, with noise_std = σ/√t (the agent's share of the noise).
        """
        votes = one_hot_votes(self._predict(query_indices), self._num_classes)  # (Q, C)
        return self.add_noise_share(votes, noise_std, num_queries=len(query_indices), one_hot=True)

    def add_noise_share(
        self,
        votes: np.ndarray,
        noise_std: float,
        *,
        num_queries: int | None = None,
        bound: float = 1.0,
        one_hot: bool = False,
    ) -> np.ndarray:
        """Release votes its teacher cast in a batch: ``votes`` + N(0, noise_std²), (Q, C).

        A transport that evaluates every teacher in one tensor operation (LocalTransport's
        ensemble) hands each agent its own clean votes (Q, C); the agent adds its noise
        share from its own generator, drawing exactly what :meth:`noisy_votes` would.
        Every vote leaves the agent through here, and is first validated
        (:func:`fedvote.aggregation.validation.validate_vote`: shape (Q, C), finite,
        non-negative, rows totalling at most ``bound``, one non-zero entry per row when
        ``one_hot``); a malformed vote raises :class:`fedvote.errors.VoteRejected`.
        Returns a new array; ``votes`` is left as it was.
        """
        checked = validate_vote(
            votes,
            agent_id=self.agent_id,
            num_classes=self._num_classes,
            num_queries=num_queries,
            bound=bound,
            one_hot=one_hot,
        )  # (Q, C) float64, a copy
        return self._add_noise(checked, noise_std)

    def noise_share(self, shape: tuple[int, ...], noise_std: float) -> np.ndarray:
        """N(0, noise_std²) of ``shape`` from this agent's own generator.

        What an agent with nothing to contribute sends into a sum (DP-FedAvg's unsampled agents).
        """
        return self._add_noise(np.zeros(shape), noise_std)

    def _add_noise(self, values: np.ndarray, noise_std: float) -> np.ndarray:
        """``values`` + N(0, noise_std²) from this agent's own generator, a new float64 array."""
        noised = np.array(values, dtype=np.float64)  # a copy
        if noise_std > 0:
            noised += self._noise_rng.normal(0.0, noise_std, size=noised.shape)
        return noised

    def teacher_accuracy(self, test: LabeledData) -> float:
        """Simulation-only diagnostic: the teacher's accuracy on the test set (not a release)."""
        teacher = self._require_teacher()
        return float(np.mean(predict_labels(teacher, test.features) == test.labels))

    def _predict(self, query_indices: np.ndarray) -> np.ndarray:
        return self.behave(predict_labels(self._require_teacher(), self._public_features[query_indices]))

    def _require_teacher(self) -> nn.Module:
        if self._teacher is None:
            raise RuntimeError(f"agent {self.agent_id} has no teacher yet; call train_teacher first")
        return self._teacher

    # --- Bad teachers and reputation-weighted voting (reputation-weighted-pate.txt) ---------

    def set_behaviour(self, behaviour: Behaviour) -> None:
        """Simulation: make this agent ``behaviour`` (honest, random, constant, adversarial).

        Its behaviour stream is seeded from the agent's seed, apart from its privacy noise.
        """
        self._behaviour = behaviour
        self._behaviour_rng = np.random.default_rng(np.random.SeedSequence([self._seed, 0xBE4A]))

    def behave(self, predictions: np.ndarray) -> np.ndarray:
        """The labels (Q,) this agent votes given its teacher's ``predictions`` (Q,).

        Honest agents vote their predictions; bad ones post-process them
        (:class:`fedvote.agents.behaviour.Behaviour`). A transport that predicts with every
        teacher at once hands each agent its own predictions through here.
        """
        if self._behaviour.honest:
            return np.asarray(predictions, dtype=np.int64)
        return self._behaviour.act(predictions, self._num_classes, self._behaviour_rng)

    def _validation_accuracy(self, validation: LabeledData) -> float:
        """Accuracy of the labels this agent would vote on the public validation set (private)."""
        voted = self.behave(predict_labels(self._require_teacher(), validation.features))
        return float(np.mean(voted == validation.labels))

    def noisy_accuracy_bin(self, validation: LabeledData, bins: int, noise_std: float) -> np.ndarray:
        """The agent's share of the accuracy summary: one-hot bin of its accuracy + noise, (B,).

        Its validation accuracy a_i ∈ [0, 1] (on the *public* labelled ``validation`` set,
        but a function of its private teacher) falls in bin ⌊a_i·B⌋ of ``bins`` equal bins;
        the one-hot bin plus N(0, noise_std²) leaves the agent (L2 sensitivity 1 under
        zero-out, √2 under replace-one). The sum over agents is released once, so that each
        agent can compute a relative weight (percentile, rank, z-score) by post-processing.
        """
        share = np.zeros(bins, dtype=np.float64)  # (B,)
        share[accuracy_bin(self._validation_accuracy(validation), bins)] = 1.0
        return self._add_noise(share, noise_std)

    def set_weight(self, validation: LabeledData | None, rule: WeightRule) -> None:
        """Fix the agent's vote weight w_i ∈ [w_min, w_max] from ``rule``, kept inside the agent.

        w_i is a function of the agent's own validation accuracy and of public values (the
        rule and the released summary): the server never sees it (Sec. 3.2.1, step 4, with
        the weight computed agent-side). ``validation`` may be None for ``one-vote``.
        """
        if rule.scheme == "one-vote":
            self._weight = 1.0
            return
        if validation is None:
            raise ConfigError("validation_size", f"the {rule.scheme} scheme needs a labelled validation set")
        weight = rule.weight(self._validation_accuracy(validation))
        self._weight = min(max(weight, rule.min_weight), rule.max_weight)

    def weighted_noisy_votes(self, query_indices: np.ndarray, noise_std: float) -> np.ndarray:
        """The agent's weighted release: w_i · one-hot vote + N(0, noise_std²), (Q, C)."""
        votes = one_hot_votes(self._predict(query_indices), self._num_classes)  # (Q, C)
        return self.add_weighted_noise_share(votes, noise_std)

    def add_weighted_noise_share(self, votes: np.ndarray, noise_std: float) -> np.ndarray:
        """As :meth:`add_noise_share` for votes its teacher cast in a batch, scaled by w_i first."""
        if self._weight is None:
            raise RuntimeError(f"agent {self.agent_id} has no vote weight yet; call set_weight first")
        weighted = self._weight * np.asarray(votes, dtype=np.float64)  # (Q, C)
        # A row is w_i·e_y: one non-zero entry of w_i ≤ w_max (none when w_i = 0).
        return self.add_noise_share(weighted, noise_std, bound=self._weight, one_hot=self._weight > 0)

    # --- Private-kNN-FL (Algorithm 2): the agent's "teacher" is a kNN vote in φ-space ---

    def prepare_knn(
        self,
        extractor: FeatureExtractor,
        *,
        k: int | None = None,
        k_fraction: float = 0.05,
        public_embedding: np.ndarray | None = None,
        record_embedding: np.ndarray | None = None,
    ) -> int:
        """Embed the private records with the public φ; returns the k this agent uses.

        ``k`` fixed, or ``round(k_fraction · n)`` (at least 1) of this agent's n records
        (:func:`fedvote.aggregation.knn.resolve_k`). The returned k is public metadata (it
        is a function of the public record count) that the server needs for accounting.
        ``public_embedding`` is φ(public pool), (P, d), when the transport computed it once
        for every agent (it is public); otherwise the agent computes it itself.
        ``record_embedding`` is φ(own records), (n, d), for in-process transports that
        embed every agent's data at once (as :meth:`install_teacher` takes a teacher).
        """
        agent_k = resolve_k(self.num_records, k, k_fraction)
        pool = public_embedding
        if pool is None:
            pool = extractor.transform(self._public_features)
        if pool.shape != (self._public_features.shape[0], extractor.dim):
            raise ConfigError(
                "public_embedding",
                f"expected ({self._public_features.shape[0]}, {extractor.dim}), got {tuple(pool.shape)}",
            )
        records = record_embedding
        if records is None:
            records = extractor.transform(self._data.features)
        if records.shape != (self.num_records, extractor.dim):
            raise ConfigError(
                "record_embedding",
                f"expected ({self.num_records}, {extractor.dim}), got {tuple(records.shape)}",
            )
        self._knn = _KnnState(
            extractor=extractor,
            k=agent_k,
            records=np.asarray(records, dtype=np.float32),
            public=np.asarray(pool, dtype=np.float32),
        )
        return agent_k

    def knn_noisy_votes(self, query_indices: np.ndarray, noise_std: float) -> np.ndarray:
        """The agent's kNN release: mean one-hot label of each query's k nearest own records.

        Algorithm 2, line 5: (1/k) Σ_j e_{y_j} + N(0, noise_std²), (Q, C), noise_std = σ/√t.
        Ties at the k-th distance go to the lower record index.
        """
        knn = self._require_knn()
        votes = knn_votes(
            knn.public[query_indices], knn.records, self._data.labels, knn.k, self._num_classes
        )  # (Q, C)
        return self.add_noise_share(votes, noise_std, num_queries=len(query_indices))

    def knn_accuracy(self, test: LabeledData) -> float:
        """Simulation-only diagnostic: accuracy of the noiseless kNN vote's argmax on ``test``."""
        knn = self._require_knn()
        votes = knn_votes(
            knn.extractor.transform(test.features), knn.records, self._data.labels, knn.k, self._num_classes
        )
        return float(np.mean(np.argmax(votes, axis=1) == test.labels))

    def _require_knn(self) -> _KnnState:
        if self._knn is None:
            raise RuntimeError(f"agent {self.agent_id} has no kNN index yet; call prepare_knn first")
        return self._knn

    # --- Gradient-based baselines (FedAvg, DP-FedAvg, DP-FedSGD) --------------------------

    def local_update(self, global_params: np.ndarray, training: LocalTraining) -> np.ndarray:
        """The agent's update Δ = θ' − θ from the global θ (d,) after local training, (d,) float32.

        Plain SGD for ``training.steps`` iterations (FedAvg, Algorithm 4), then — when the
        round asks — Δ clipped to norm S and noised with N(0, noise_std²) from this agent's
        own generator (DP-FedAvg, Algorithm 6). With ``training.dp_sgd`` the local steps are
        DP-SGD through Opacus instead, its Poisson batches and noise also drawn from this
        agent's privacy randomness (DP-FedSGD). Only the update leaves the agent.
        """
        shape = tuple(self._data.features.shape[1:])
        model = build_model(
            training.model, shape, self._num_classes, generator=torch.Generator().manual_seed(0)
        )
        start = np.asarray(global_params, dtype=np.float32)
        load_flat_parameters(model, start)
        if training.dp_sgd is not None:
            privacy_generator = torch.Generator().manual_seed(int(self._noise_rng.integers(2**62)))
            dp_sgd_steps(
                model,
                self._data.features,
                self._data.labels,
                steps=training.steps,
                learning_rate=training.learning_rate,
                spec=training.dp_sgd,
                generator=privacy_generator,
            )
        else:
            order_seed = np.random.SeedSequence([self._seed, 0x56D0, training.round_index])
            sgd_steps(
                model,
                self._data.features,
                self._data.labels,
                steps=training.steps,
                learning_rate=training.learning_rate,
                batch_size=training.batch_size,
                generator=torch.Generator().manual_seed(int(order_seed.generate_state(1)[0])),
            )
        update = flat_parameters(model) - start  # (d,)
        if training.clip_norm is not None:
            update = clip_to_norm(update, training.clip_norm)
        if training.noise_std > 0:
            noise = self._noise_rng.normal(0.0, training.noise_std, size=update.shape)
            update = (update.astype(np.float64) + noise).astype(np.float32)
        return update

    # --- FedAUXfdp (fedaux-fdp.txt): logistic heads on a frozen public h₀, output-perturbed ---

    def private_heads(
        self, features: HeadFeatures, request: HeadRequest, *, embedded: np.ndarray | None = None
    ) -> ReleasedHeads:
        """Fit this agent's heads on h̃(own records) and release them perturbed (steps 2 and 3).

        Scoring head (when ``request.negative_indices`` is given): binary logistic regression,
        own records (label 1) against the public negatives D⁻ (label 0), sensitivity
        2/(λ·(nᵢ + |D⁻|)) — only the nᵢ private records can be replaced. Class head: the
        C-class regularised optimum, sensitivity 2√2/(λ·nᵢ) (or Theorem 1's 2√C/(λ·nᵢ),
        ``request.class_bound``); or FedAUX+F's SGD head. A regularised head is projected
        into the ball ‖β‖ ≤ √(2 log K/λ), which its exact optimum satisfies anyway
        (:func:`head_norm_bound`), then noised with N(0, σᵢ²), σᵢ = multiplier·Δᵢ from the
        request (the std the ledger was charged for), from this agent's own generator. Only
        the perturbed heads leave. ``embedded`` is h₀(own records), (nᵢ, d), when a
        transport computed it in one pass.
        """
        n = self.num_records
        if embedded is None:
            own = features.transform(self._data.features)  # (nᵢ, d + 1)
        else:
            own = features.from_embedding(embedded)
        lam = request.regularization
        if request.class_head == "sgd":
            class_head = fit_sgd_head(
                own, self._data.labels, num_classes=request.num_classes, epochs=request.sgd_epochs,
                seed=self._seed + request.seed,
            )
        else:
            class_head = project_to_ball(
                fit_multinomial_head(
                    own, self._data.labels, num_classes=request.num_classes, regularization=lam
                ),
                head_norm_bound(request.num_classes, lam),
            )  # (C, d + 1)
            class_std = request.class_noise_std(n)  # multiplier·Δᵢ, the std the ledger charged
            if class_std is not None:
                class_head = class_head + self._noise_rng.normal(0.0, class_std, size=class_head.shape)
        score_head = None
        if request.negative_indices is not None:
            negatives = features.transform(self._public_features[request.negative_indices])  # (|D⁻|, d + 1)
            x = np.vstack([own, negatives])
            y = np.concatenate([np.ones(n), np.zeros(negatives.shape[0])])
            score_head = project_to_ball(fit_binary_head(x, y, regularization=lam), head_norm_bound(2, lam))
            score_std = request.score_noise_std(n)  # multiplier·2/(λ·(nᵢ + |D⁻|))
            if score_std is not None:
                score_head = score_head + self._noise_rng.normal(0.0, score_std, size=score_head.shape)
        return ReleasedHeads(class_head=class_head, score_head=score_head, num_records=n)


@dataclass(frozen=True, eq=False)
class _KnnState:
    """What an agent keeps for kNN voting: φ, its k, φ(own records) (n, d), φ(pool) (P, d)."""

    extractor: FeatureExtractor
    k: int
    records: np.ndarray
    public: np.ndarray
