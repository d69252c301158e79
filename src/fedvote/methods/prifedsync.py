"""PriFedSync: personalised federated learning with record-level federated f-DP.

``federated-f-dp-prifedsync.txt``, Algorithm 1 with Algorithm 2 as local training. In each
of R synchronisation rounds the server Poisson-samples clients with probability p; a
sampled client i pulls its helper model h̃⁽ⁱ⁾ = F_i(w̃_global), runs K steps of noisy SGD
(or noisy Adam, Section 3.4) from it — batches of B records drawn uniformly, per-sample
gradients clipped to C, N(0, 4C²σ²) on every step's sum — and sends its private model
w̃⁽ⁱ⁾; the server moves w̃_global ← (1 − η)·w̃_global + η·mean of the received models.
F_i is the identity (one global model, FedAvg-like) or the interpolation of eq. 2.1,
F_i(w̃_global) = (1 − α)·w̃⁽ⁱ⁾ + α·w̃_global, with w̃⁽ⁱ⁾ the client's latest private model
(the server holds it: it is what the client sent). The helper is computed from the
current w̃_global when the client is sampled — Algorithm 1's "pulls a helper model"; with
F_i = identity this is FedAvg. No trusted server: only noised models leave a client.

**Accounting** (Theorem 2; record level, replace-one record of one client). Every client
is charged K steps in every round (a client that was not sampled took none, so this is an
upper bound — the one Theorem 2 states). Client j's μ_j is the CLT
μ = √2·(B/n_j)·√(KR)·√(e^{σ⁻²}Φ(1.5/σ) + 3Φ(−0.5/σ) − 2); weak federated GDP holds with
μ_max = max_j μ_j (the client with the fewest records), strong with √(m−1)·μ_max. The
result's ``privacy.record`` gives both with their exact (ε, δ), and the PLD ε of the same
DP-SGD steps (Poisson sampling at B/n standing in for fixed-size batches, replace-one).
The CLT is Theorem 2's limit, not a finite-sample bound; the PLD figure is the rigorous
one for Poisson batches. ``privacy.instance`` is the weak record-level ε (one record of
one client); the agent level is not private (null).

**Evaluation.** Each client is tested on ``client_test_size`` records of the labels it
trained on (:mod:`fedvote.data.client_test`), with its own latest private model
("personalised") and with w̃_global ("global"); the mean over clients is reported per
round. ``target_accuracy`` stops at the first round whose mean reaches it (Table 1).

**Model.** A perceptron (``--gradient-model mlp``: 784 → 128 → 10 on MNIST, or
``logistic``), trained for all sampled clients at once
(:mod:`fedvote.models.batched_dp_sgd`; the paper's CNN is not supported).

Defaults are the paper's MNIST setting: p = 0.5, σ = 1, B = 16, K = 38, C = 1, η = 1,
interpolation with α = 0.1, noisy Adam with γ = 0.001; R = 200 rounds at most.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from fedvote.data.federation import ServerData
from fedvote.errors import ConfigError
from fedvote.methods.base import Method, MethodOutcome
from fedvote.methods.gradient import privacy_generator
from fedvote.methods.options import method_option
from fedvote.models.batched_dp_sgd import OPTIMIZERS, NoisyTraining, perceptron_layer_sizes
from fedvote.models.local_training import flat_parameters, load_flat_parameters
from fedvote.models.zoo import MODEL_NAMES, build_model
from fedvote.privacy.events import LevelEvents, prifedsync_events
from fedvote.privacy.fdp import federated_mu, gdp_epsilon, prifedsync_mu, replace_one_dp_sgd_epsilon
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import Transport

if TYPE_CHECKING:
    from fedvote.config import RunConfig

HELPERS: tuple[str, ...] = ("identity", "interpolate")
TARGET_MODELS: tuple[str, ...] = ("personalised", "global")


@dataclass(frozen=True)
class PriFedSyncOptions:
    """PriFedSync's own settings (``fedvote run --method prifedsync`` flags)."""

    helper: str = method_option(
        "interpolate",
        "PriFedSync helper F_i: identity (one global model) or interpolate (eq. 2.1)",
        choices=HELPERS,
    )
    alpha: float = method_option(0.1, "PriFedSync: α of the interpolated helper (1−α)·w⁽ⁱ⁾ + α·w̃_global")
    server_rate: float = method_option(1.0, "PriFedSync: server step η of w̃_global")
    optimizer: str = method_option("adam", "PriFedSync: local noisy optimizer", choices=OPTIMIZERS)
    target_accuracy: float | None = method_option(
        None, "PriFedSync: stop at the first round whose mean client test accuracy reaches this"
    )
    target_model: str = method_option(
        "personalised",
        "PriFedSync: whose mean client accuracy --target-accuracy reads",
        choices=TARGET_MODELS,
    )
    client_test_size: int = method_option(200, "PriFedSync: test records per client (its own labels)")

    def __post_init__(self) -> None:
        if self.helper not in HELPERS:
            raise ConfigError("helper", f"must be one of {', '.join(HELPERS)}, got {self.helper!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ConfigError("alpha", f"must lie in [0, 1], got {self.alpha}")
        if not 0.0 < self.server_rate <= 1.0:
            raise ConfigError("server_rate", f"must lie in (0, 1], got {self.server_rate}")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError("optimizer", f"must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.target_accuracy is not None and not 0.0 < self.target_accuracy <= 1.0:
            raise ConfigError("target_accuracy", f"must lie in (0, 1], got {self.target_accuracy}")
        if self.target_model not in TARGET_MODELS:
            raise ConfigError(
                "target_model", f"must be one of {', '.join(TARGET_MODELS)}, got {self.target_model!r}"
            )
        if isinstance(self.client_test_size, bool) or self.client_test_size < 1:
            raise ConfigError("client_test_size", f"must be an integer >= 1, got {self.client_test_size}")


def helper_models(
    local: np.ndarray, global_model: np.ndarray, helper: str, alpha: float
) -> np.ndarray:
    """F_i(w̃_global) for clients with latest private models ``local`` (m, d): (m, d).

    ``identity``: w̃_global for everyone; ``interpolate``: (1 − α)·w̃⁽ⁱ⁾ + α·w̃_global
    (eq. 2.1 of the PriFedSync paper).
    """
    if helper == "identity":
        return np.broadcast_to(global_model, local.shape).copy()
    if helper == "interpolate":
        return ((1.0 - alpha) * local + alpha * global_model).astype(local.dtype)
    raise ConfigError("helper", f"must be one of {', '.join(HELPERS)}, got {helper!r}")


@dataclass(frozen=True)
class PriFedSync(Method):
    """PriFedSync (Algorithms 1 and 2) with noise scale ``sigma`` (σ; noise N(0, 4C²σ²)).

    ``agent_records`` are the clients' record counts n_j (public metadata): Theorem 2's
    μ_max is that of the smallest. Set by :meth:`with_agent_records` before accounting.
    """

    name = "prifedsync"
    calibration_level: ClassVar[str | None] = "instance"
    options_type: ClassVar[type | None] = PriFedSyncOptions
    # GradientOptions this method does not read; giving one is refused.
    unused_options: ClassVar[tuple[str, ...]] = ("clip_norm", "lr_decay", "batch_sampling_rate")

    sigma: float = 1.0
    rounds: int = 200
    sampling_rate: float = 0.5
    local_steps: int = 38
    batch_size: int = 16
    per_sample_clip: float = 1.0
    learning_rate: float = 0.001
    model: str = "mlp"
    options: PriFedSyncOptions = field(default_factory=PriFedSyncOptions)
    delta: float = 1e-3
    seed: int = 0
    noise_seed: int | None = None
    agent_records: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not self.sigma >= 0 or not math.isfinite(self.sigma):
            raise ConfigError("sigma", f"must be a finite number >= 0, got {self.sigma}")
        for name in ("rounds", "local_steps", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"must be an integer >= 1, got {value!r}")
        if not 0.0 < self.sampling_rate <= 1.0:
            raise ConfigError("sampling_rate", f"must lie in (0, 1], got {self.sampling_rate}")
        if not self.per_sample_clip > 0 or not math.isfinite(self.per_sample_clip):
            raise ConfigError("per_sample_clip", f"must be > 0, got {self.per_sample_clip}")
        if not self.learning_rate > 0:
            raise ConfigError("learning_rate", f"must be > 0, got {self.learning_rate}")
        if self.model not in MODEL_NAMES:
            raise ConfigError("model", f"unknown model {self.model!r}; choose from {', '.join(MODEL_NAMES)}")
        if self.agent_records is not None and self.batch_size > min(self.agent_records):
            smallest = min(self.agent_records)
            raise ConfigError(
                "batch_size", f"B = {self.batch_size} exceeds the smallest client's {smallest} records"
            )

    @classmethod
    def from_config(
        cls, config: RunConfig, *, sigma: float, queries: int, min_responders: int
    ) -> PriFedSync:
        """The method from ``config.gradient`` and ``config.options``; Q and t do not apply."""
        given = config.gradient.overrides()
        for name in cls.unused_options:
            if name in given:
                raise ConfigError(name, "is not used by prifedsync")
        keep = (
            "rounds", "sampling_rate", "local_steps", "batch_size", "per_sample_clip",
            "learning_rate", "model",
        )  # fmt: skip
        return cls(
            sigma=sigma,
            options=config.method_options(),
            delta=config.privacy.delta,
            seed=config.seed,
            noise_seed=config.privacy.noise_seed,
            **{k: v for k, v in given.items() if k in keep},
        )

    def with_sigma(self, sigma: float) -> PriFedSync:
        """The same method with noise scale ``sigma``."""
        return dataclasses.replace(self, sigma=sigma)

    def with_agent_records(self, records: np.ndarray) -> PriFedSync:
        """The same method knowing the clients' record counts n_j (for μ_max)."""
        return dataclasses.replace(self, agent_records=tuple(int(n) for n in records))

    # --- accounting -------------------------------------------------------------------

    def round_mu(self, records: int) -> float:
        """Theorem 2's μ of one round (K steps) for a client of ``records`` records; ∞ at σ = 0."""
        if self.sigma == 0:
            return math.inf
        return prifedsync_mu(self.sigma, self.batch_size, records, self.local_steps, 1)

    def _min_records(self) -> int:
        if self.agent_records is None:
            raise ConfigError("agents", "prifedsync needs the clients' record counts (with_agent_records)")
        return min(self.agent_records)

    def planned_events(self) -> LevelEvents:
        """R rounds of the smallest client's Theorem 2 μ (instance); agent level non-private."""
        return prifedsync_events(self.round_mu(self._min_records()), self.rounds)

    def record_privacy(self, rounds: int, records: np.ndarray) -> dict[str, Any]:
        """``privacy.record`` after ``rounds`` rounds: weak and strong federated GDP (Theorem 2).

        ``weak.mu`` = μ_max (CLT), ``strong.mu`` = √(m−1)·μ_max, each with its exact ε at
        δ; ``weak.epsilon_pld`` is the PLD ε of the same K·R steps (Poisson batches at
        B/n_min standing in for fixed-size ones, replace-one).
        """
        n_min = int(np.min(records))
        clients = int(records.shape[0])
        steps = self.local_steps * rounds
        private = self.sigma > 0
        mu = prifedsync_mu(self.sigma, self.batch_size, n_min, self.local_steps, rounds) if private else None
        strong = federated_mu(mu, clients, strong=True) if mu is not None else None

        def epsilon(value: float | None) -> float | None:
            return gdp_epsilon(value, self.delta) if value is not None else None

        pld = None
        if private:
            pld = replace_one_dp_sgd_epsilon(self.sigma, self.batch_size / n_min, steps, self.delta)
        return {
            "level": "record: one record of one client replaced (federated f-DP, Definitions 3.5 and 3.6)",
            "bound": "Theorem 2 (CLT of C_{B/n}(G_{1/σ})^{⊗KR}; asymptotic as KR → ∞)",
            "delta": self.delta,
            "rounds": rounds,
            "local_steps": self.local_steps,
            "batch_size": self.batch_size,
            "min_client_records": n_min,
            "clients": clients,
            "sigma": self.sigma,
            "clt_mu": mu,
            "weak": {"mu": mu, "epsilon": epsilon(mu), "epsilon_pld": pld},
            "strong": {"mu": strong, "epsilon": epsilon(strong)},
        }

    # --- the run ------------------------------------------------------------------------

    def initial_model(self, server: ServerData) -> torch.nn.Module:
        """w₀: the architecture ``model`` initialised from ``seed`` (a perceptron)."""
        generator = torch.Generator().manual_seed(self.seed)
        return build_model(self.model, server.example_shape, server.num_classes, generator=generator)

    def run(
        self,
        server: ServerData,
        transport: Transport,
        ledger: PrivacyLedger,
        progress: Progress = NO_PROGRESS,
    ) -> MethodOutcome:
        """Algorithm 1 for up to R rounds (fewer when the target accuracy is reached)."""
        options = self.options
        model = self.initial_model(server)
        sizes = perceptron_layer_sizes(model)
        start = flat_parameters(model)  # (d,) float32
        records = transport.record_counts()  # (m,)
        smallest = int(records.min())
        if self.batch_size > smallest:
            raise ConfigError(
                "batch_size", f"B = {self.batch_size} exceeds the smallest client's {smallest} records"
            )
        method = self if self.agent_records is not None else self.with_agent_records(records)
        round_events = prifedsync_events(method.round_mu(int(records.min())), 1)
        training = NoisyTraining(
            layer_sizes=sizes,
            steps=self.local_steps,
            batch_size=self.batch_size,
            clip=self.per_sample_clip,
            sigma=self.sigma,
            learning_rate=self.learning_rate,
            optimizer=options.optimizer,
        )
        rng = privacy_generator(self.noise_seed, 0x9F5)
        m = transport.num_agents
        everyone = np.arange(m)
        local = np.tile(start, (m, 1))  # (m, d): each client's latest private model w̃⁽ⁱ⁾
        global_model = start.copy()  # (d,): w̃_global
        history: list[dict[str, float | int]] = []
        reached: int | None = None
        with progress.step(f"{self.name}: up to {self.rounds} rounds", total=self.rounds) as bar:
            for r in range(1, self.rounds + 1):
                chosen = np.flatnonzero(rng.random(m) < self.sampling_rate)  # Poisson sampling
                ledger.charge(round_events)
                if chosen.size:
                    helpers = helper_models(local[chosen], global_model, options.helper, options.alpha)
                    private = transport.private_local_models(helpers, chosen, training)  # (|Ω|, d)
                    local[chosen] = private
                    mean = private.astype(np.float64).mean(axis=0)
                    eta = options.server_rate
                    global_model = ((1.0 - eta) * global_model + eta * mean).astype(np.float32)
                personal = transport.client_accuracies(
                    local, everyone, server.test, per_client=options.client_test_size, layer_sizes=sizes
                )
                shared = transport.client_accuracies(
                    np.broadcast_to(global_model, local.shape),
                    everyone,
                    server.test,
                    per_client=options.client_test_size,
                    layer_sizes=sizes,
                )
                entry = {
                    "round": r,
                    "sampled": int(chosen.size),
                    "personalised": float(personal.mean()),
                    "global": float(shared.mean()),
                }
                history.append(entry)
                bar.advance()
                score = entry["personalised"] if options.target_model == "personalised" else entry["global"]
                if options.target_accuracy is not None and score >= options.target_accuracy:
                    reached = r
                    break
        rounds_run = len(history)
        load_flat_parameters(model, global_model)
        model.eval()
        last = history[-1]
        return MethodOutcome(
            student=model,
            query_indices=np.zeros(0, dtype=np.int64),
            pseudo_labels=np.zeros(0, dtype=np.int64),
            details={
                "privacy_record": method.record_privacy(rounds_run, records),
                "instance_adjacency_of_epsilon": (
                    "replace-one record of one client: weak federated GDP, μ_max of Theorem 2 (CLT)"
                ),
                "agent_level": "not private: record-level clipping bounds no client's whole data (null)",
                "rounds": rounds_run,
                "max_rounds": self.rounds,
                "target_accuracy": options.target_accuracy,
                "target_model": options.target_model,
                "round_reached": reached,
                "client_accuracy": {"personalised": last["personalised"], "global": last["global"]},
                "accuracy_history": history,
                "helper": options.helper,
                "alpha": options.alpha,
                "server_rate": options.server_rate,
                "optimizer": options.optimizer,
                "sampling_rate": self.sampling_rate,
                "local_steps_per_round": self.local_steps,
                "batch_size": self.batch_size,
                "per_sample_clip": self.per_sample_clip,
                "noise_std_per_step": 2.0 * self.per_sample_clip * self.sigma,
                "learning_rate": self.learning_rate,
                "layer_sizes": list(sizes),
                "mean_sampled_agents": float(np.mean([h["sampled"] for h in history])),
                "model_floats": int(start.shape[0]),
                "client_test_size": options.client_test_size,
            },
        )
