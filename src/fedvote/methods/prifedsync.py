"""PriFedSync: personalised federated learning with record-level differential privacy.

``federated-f-dp-prifedsync.txt``, Algorithm 1. In each of R synchronisation rounds the
server Poisson-samples clients with probability p; a sampled client i pulls its helper
model h̃⁽ⁱ⁾ = F_i(w̃_global), runs K steps of DP-SGD (or noisy Adam, Section 3.4) from it
and sends its private model w̃⁽ⁱ⁾; the server moves w̃_global ← (1 − η)·w̃_global +
η·mean of the received models. F_i is the identity (one global model, FedAvg-like) or the
interpolation of eq. 2.1, F_i(w̃_global) = (1 − α)·w̃⁽ⁱ⁾ + α·w̃_global, with w̃⁽ⁱ⁾ the
client's latest private model (the server holds it: it is what the client sent). No
trusted server: only noised models leave a client.

**Local training** (:mod:`fedvote.models.batched_dp_sgd`): DP-SGD with **Poisson
batches** — each record of client j is in a step's batch with probability q_j = B/n_j —
per-sample clip C, N(0, σ²C²) on the sum, divided by the expected batch size B (Abadi et
al. 2016; Opacus). Not the paper's Algorithm 2 (fixed-size batches, N(0, 4C²σ²)), whose
only tractable analysis is Theorem 2's CLT; with Poisson batches dp-accounting's PLD is
exact for the steps actually run.

**Accounting** (record level: one record of one client replaced, the paper's S'ʲ). The
headline ``privacy.instance.epsilon``, the ``--epsilon`` calibration target and the ledger
charge are one proven upper bound: dp-accounting's PLD of
``replace_one(SelfComposed(PoissonSampled(B/n_min, Gaussian(σ)), K·R))``
(:func:`fedvote.privacy.events.prifedsync_events`), R the configured ``--rounds``,
charged in full before the first round whatever round the run stops at. It holds for weak
and strong federated DP alike (everything any client receives is post-processing of
client j's K·R noisy steps). Its statements (``privacy.statements``) repeat it, add the ε of the rounds
actually run ("ex post, not a guarantee") and Theorem 2's μ (weak and strong) as the
paper's figure, labelled "asymptotic (CLT), not a bound" — never a headline, target or charge.

**Stopping and evaluation.** ``target_accuracy`` stops at the first round whose released
global model reaches it on the server's labelled *public* validation set (the public pool
by default: PriFedSync never queries it; or ``validation_size`` points of it, or
``validation_file``) — post-processing of released models on public data, read by nothing
else. Each client's accuracy on a test set drawn from its own (private) label frequencies
(:mod:`fedvote.data.client_holdout`, the paper's protocol) is a simulation diagnostic under
the outcome's ``diagnostics``: not private, never released by a deployment, read by no
control flow.

**Model.** A perceptron (``--gradient-model mlp``: 784 → 128 → 10 on MNIST, or
``logistic``), trained for all sampled clients at once (the paper's CNN is not supported).

Defaults follow the paper's MNIST setting: p = 0.5, B = 16, K = 38, C = 1, η = 1,
interpolation with α = 0.1, noisy Adam with γ = 0.001; R = 200 rounds. σ is the DP-SGD noise
multiplier (std σC): the paper's σ = 1 (std 2C) is σ = 2 here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from fedvote.data.federation import LabeledData, PublicMetadata, ServerData
from fedvote.data.validation import ValidationNeed
from fedvote.errors import ConfigError
from fedvote.methods.base import Method, MethodOutcome
from fedvote.methods.gradient import privacy_generator
from fedvote.methods.options.gradient import HELPERS, PriFedSyncOptions
from fedvote.models.batched_dp_sgd import NoisyTraining, perceptron_layer_sizes
from fedvote.models.local_training import flat_parameters, load_flat_parameters
from fedvote.models.shifted_input import ShiftedInput
from fedvote.models.training import predict_labels
from fedvote.models.zoo import MODEL_NAMES, build_model
from fedvote.privacy.accountant import epsilon_for, make_accountant
from fedvote.privacy.events import LevelEvents, prifedsync_events
from fedvote.privacy.fdp import federated_mu, gdp_epsilon, prifedsync_mu
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.results import PrivacyStatement, finite_or_none
from fedvote.transport.base import Transport
from fedvote.transport.capabilities import PersonalisedModels, SimulationDiagnostics

if TYPE_CHECKING:
    from fedvote.config import RunConfig

CLT_NOTE = (
    "asymptotic (CLT), not a bound: Theorem 2's limit as KR → ∞ for the paper's Algorithm 2 "
    "(fixed-size batches, N(0, 4C²σ_paper²)) at the same noise std, σ_paper = σ/2; "
    "never the headline, the calibration target or a ledger charge"
)
EX_POST_NOTE = (
    "ex post, not a guarantee: the ε of the rounds actually run; the guarantee of a run "
    "that may stop early is that of --rounds"
)
DIAGNOSTIC_NOTE = (
    "each client's test set follows its private label frequencies: the accuracies on it are "
    "noiseless functions of private data, never released by a deployment and read by no control flow"
)


# Below this many records in the smallest client (20 × the paper's batch B = 16), PriFedSync
# trains full-batch by default (:meth:`PriFedSync.with_client_size_defaults`).
SMALL_CLIENT_RECORDS = 320


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


def client_sampling_generator(noise_seed: int | None) -> np.random.Generator:
    """The server's stream for Algorithm 1's Poisson client sampling (one ``random(m)`` per round)."""
    return privacy_generator(noise_seed, 0x9F5)


def reaches_target(target: float | None, public_accuracy: float | None) -> bool:
    """The stop rule: the released global model's *public* validation accuracy reached ``target``.

    Reads nothing but that accuracy (post-processing of a released model on public data),
    so stopping costs no privacy; the run's guarantee stays that of its configured rounds.
    """
    return target is not None and public_accuracy is not None and public_accuracy >= target


@dataclass(frozen=True)
class PriFedSync(Method):
    """PriFedSync (Algorithm 1) with DP-SGD on Poisson batches, noise multiplier ``sigma`` (std σC).

    ``agent_records`` are the clients' record counts n_j (public metadata): the client
    with the fewest has the largest batch rate B/n_j and bounds every record. Set by
    :meth:`with_agent_records` before accounting. ``accountant`` must be able to account
    replace-one Poisson-subsampled Gaussians (``pld``); others are refused up front.
    """

    name = "prifedsync"
    requires: ClassVar[tuple[type, ...]] = (PersonalisedModels,)
    calibration_level: ClassVar[str | None] = "instance"
    options_type: ClassVar[type | None] = PriFedSyncOptions
    audit_release = "trainer-run"

    sigma: float = 1.0
    rounds: int = 200
    sampling_rate: float = 0.5
    local_steps: int = 38
    batch_size: int = 16
    per_sample_clip: float = 1.0
    learning_rate: float = 0.001
    model: str = "mlp"
    optimizer: str = "adam"
    options: PriFedSyncOptions = field(default_factory=PriFedSyncOptions)
    delta: float = 1e-3
    accountant: str = "pld"
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
        _check_accountant(self.accountant)

    @classmethod
    def from_config(
        cls, config: RunConfig, *, sigma: float, queries: int, min_responders: int
    ) -> PriFedSync:
        """The method from ``config.options``; Q does not apply, and ``--min-responders`` is refused.

        Each client adds its whole DP-SGD noise to its own steps (no shares of a sum), so a
        t would be recorded without anything honouring it (issue 42, defect 4).
        """
        if config.privacy.min_responders is not None:
            raise ConfigError(
                "min_responders",
                f"does not apply to {cls.name}: each client adds its whole DP-SGD noise, not a share",
            )
        options: PriFedSyncOptions = cls.options_from(config)
        return cls(
            sigma=sigma,
            options=options,
            delta=config.privacy.delta,
            accountant=config.privacy.accountant,
            seed=config.seed,
            noise_seed=config.privacy.noise_seed,
            **options.overrides(),
        )

    @classmethod
    def validation_need(cls, config: RunConfig) -> ValidationNeed:
        """The labelled public validation set of the stop rule (its only data).

        A file (``validation_file``), a slice of the public pool (``validation_size``), or
        by default the whole pool: PriFedSync never queries it. Its labels stand for a
        labelling the server had made of public data.
        """
        options: PriFedSyncOptions = cls.options_from(config)
        return ValidationNeed(file=options.validation_file, size=options.validation_size)

    def with_public(self, public: PublicMetadata) -> PriFedSync:
        """The method knowing the clients' record counts (Theorem 2's μ_max and the rate B/n_min).

        Small clients also change the defaults of local training
        (:meth:`with_client_size_defaults`); record counts are public metadata.
        """
        if public.agent_records is None:
            return self
        return self.with_agent_records(np.asarray(public.agent_records)).with_client_size_defaults()

    def with_client_size_defaults(self) -> PriFedSync:
        """Full-batch local training when the smallest client holds fewer than :data:`SMALL_CLIENT_RECORDS`.

        Chosen from the record counts alone (public metadata), never from data or accuracy.
        Per-record DP-SGD adds noise of std σC to a batch's summed gradients, and σ grows
        with √(steps) at a fixed ε, so what decides the signal-to-noise ratio of the global
        model is n·√m / σ₁ (n records per client, m clients, σ₁ the noise of one step) and
        the model's dimension (the noise's norm grows with √d). With a few dozen records,
        the paper's B = 16 Poisson batches over K·R = 7,600 steps drown every gradient; one
        full-batch step per round (B = n_min, so the smallest client's rate is 1 and its
        steps compose as plain Gaussians), every client every round (each is charged every
        round anyway), 100 rounds, a logistic model and noisy SGD at 0.3 keep it (Adam's
        per-coordinate scaling of a noise-dominated gradient is close to its sign, which the
        server's average no longer denoises). A setting the user gave is kept.
        """
        smallest = self._min_records()
        if smallest >= SMALL_CLIENT_RECORDS:
            return self
        chosen: dict[str, Any] = {
            "batch_size": smallest,
            "local_steps": 1,
            "rounds": 100,
            "sampling_rate": 1.0,
            "model": "logistic",
            "optimizer": "sgd",
            "learning_rate": 0.3,
        }
        given = self.options.overrides()
        if "learning_rate" in given:
            given["optimizer"] = self.optimizer  # a step size the user chose is for the optimizer they had
        return dataclasses.replace(self, **{name: chosen[name] for name in chosen if name not in given})

    @property
    def instance_adjacency(self) -> str:
        """Replace-one record of one client, weak and strong federated DP, over the configured rounds."""
        return (
            "replace-one record of one client (weak and strong federated DP): the smallest "
            f"client's K·R DP-SGD steps with Poisson batches, R = {self.rounds} configured rounds"
        )

    @property
    def instance_bound(self) -> str:
        """The bound behind the instance ε."""
        return "replace-one Poisson-subsampled Gaussian DP-SGD, PLD (proven upper bound)"

    def with_sigma(self, sigma: float) -> PriFedSync:
        """The same method with noise multiplier ``sigma``."""
        return dataclasses.replace(self, sigma=sigma)

    def with_agent_records(self, records: np.ndarray) -> PriFedSync:
        """The same method knowing the clients' record counts n_j (for the largest rate B/n_j)."""
        return dataclasses.replace(self, agent_records=tuple(int(n) for n in records))

    # --- accounting -------------------------------------------------------------------

    def _min_records(self) -> int:
        if self.agent_records is None:
            raise ConfigError("agents", "prifedsync needs the clients' record counts (with_agent_records)")
        return min(self.agent_records)

    def events_for(self, rounds: int) -> LevelEvents:
        """``rounds`` rounds of K Poisson DP-SGD steps of the smallest client (instance level)."""
        rate = self.batch_size / self._min_records()
        return prifedsync_events(self.sigma, rate, self.local_steps, rounds)

    def planned_events(self) -> LevelEvents:
        """The configured R rounds: what is calibrated, charged up front and reported."""
        return self.events_for(self.rounds)

    def proven_epsilon(self, rounds: int) -> float | None:
        """The proven record-level ε at δ of ``rounds`` rounds (None when unbounded)."""
        epsilon = epsilon_for(self.events_for(rounds).instance, self.delta, self.accountant)
        return finite_or_none(epsilon)

    def clt_figure(self, rounds: int, clients: int) -> dict[str, Any]:
        """Theorem 2's μ (weak, strong) at ``rounds``: the paper's figure, labelled asymptotic.

        Algorithm 2's noise N(0, 4C²σ_paper²) equals ours, N(0, σ²C²), at σ_paper = σ/2.
        """
        n_min = self._min_records()
        paper_sigma = self.sigma / 2.0
        mu = None
        if self.sigma > 0:
            mu = prifedsync_mu(paper_sigma, self.batch_size, n_min, self.local_steps, rounds)
        strong = federated_mu(mu, clients, strong=True) if mu is not None else None

        def epsilon(value: float | None) -> float | None:
            return gdp_epsilon(value, self.delta) if value is not None else None

        return {
            "note": CLT_NOTE,
            "theorem": (
                "Theorem 2: C_{B/n}(G_{1/σ_paper})^{⊗KR} → G_μ, "
                "μ = √2·c·√(e^{σ⁻²}Φ(1.5/σ) + 3Φ(−0.5/σ) − 2), c = (B/n)·√(KR)"
            ),
            "paper_sigma": paper_sigma,
            "rounds": rounds,
            "weak": {"mu": mu, "epsilon": epsilon(mu)},
            "strong": {"mu": strong, "epsilon": epsilon(strong)},
        }

    def record_statements(self, rounds_run: int, records: np.ndarray) -> tuple[PrivacyStatement, ...]:
        """What PriFedSync states beside the headline (instance level: one record of one client replaced).

        The headline is dp-accounting's PLD of the smallest client's K·R Poisson DP-SGD steps
        under replace-one, R = ``rounds`` (configured), and holds for weak and strong
        federated DP alike (first statement). Then the same bound for the ``rounds_run``
        actually run when the run stopped early (ex post), and Theorem 2's μ, weak and
        strong (:meth:`clt_figure`: an approximation, never a bound).
        """
        method = self.with_agent_records(records)
        proven = method.proven_epsilon(self.rounds)
        mechanism = (
            f"dp-accounting PLD ({self.accountant}) of replace_one(SelfComposed(PoissonSampled(B/n_min, "
            f"Gaussian(σ)), K·R)), R = {self.rounds} configured rounds"
        )
        statements = [
            PrivacyStatement(
                name="weak and strong federated DP (configured rounds)",
                level="instance",
                epsilon=proven,
                delta=self.delta,
                source=(
                    f"{mechanism}; strong: every model any client receives is post-processing of client "
                    "j's K·R noisy steps (federated f-DP paper, Definitions 3.5 and 3.6)"
                ),
            )
        ]
        if rounds_run != self.rounds:
            statements.append(
                PrivacyStatement(
                    name=f"ε of the {rounds_run} rounds run",
                    level="instance",
                    epsilon=method.proven_epsilon(rounds_run),
                    delta=self.delta,
                    source=EX_POST_NOTE,
                    kind="ex post",
                )
            )
        clt = method.clt_figure(self.rounds, int(records.shape[0]))
        for federated in ("weak", "strong"):
            statements.append(
                PrivacyStatement(
                    name=f"Theorem 2 (CLT), {federated} federated f-DP",
                    level="instance",
                    epsilon=clt[federated]["epsilon"],
                    delta=self.delta,
                    mu=clt[federated]["mu"],
                    source=f"{clt['theorem']}; {CLT_NOTE}",
                    kind="approximation",
                )
            )
        return tuple(statements)

    def record_mechanism(self, rounds_run: int, records: np.ndarray) -> dict[str, Any]:
        """The mechanism the instance-level figures cover, as result.json records it (public settings)."""
        n_min = self.with_agent_records(records)._min_records()
        return {
            "level": "record: one record of one client replaced (federated DP, Definitions 3.5 and 3.6)",
            "mechanism": (
                "DP-SGD, Poisson batches at q_j = B/n_j, per-sample clip C, N(0, σ²C²) on the sum, "
                "divided by B; K steps in each of R rounds, every client charged every round"
            ),
            "rounds": self.rounds,
            "rounds_run": rounds_run,
            "local_steps": self.local_steps,
            "batch_size": self.batch_size,
            "min_client_records": n_min,
            "batch_rate": self.batch_size / n_min,
            "clients": int(records.shape[0]),
            "sigma": self.sigma,
            "noise_std_per_step": self.sigma * self.per_sample_clip,
            "paper_sigma": self.sigma / 2.0,
        }

    # --- the run ------------------------------------------------------------------------

    def initial_model(self, server: ServerData) -> torch.nn.Module:
        """w₀: the architecture ``model`` initialised from ``seed`` (a perceptron)."""
        generator = torch.Generator().manual_seed(self.seed)
        return build_model(self.model, server.example_shape, server.num_classes, generator=generator)

    def _training(self, sizes: tuple[int, ...], shift: tuple[float, ...] | None) -> NoisyTraining:
        return NoisyTraining(
            layer_sizes=sizes,
            steps=self.local_steps,
            batch_size=self.batch_size,
            clip=self.per_sample_clip,
            sigma=self.sigma,
            learning_rate=self.learning_rate,
            optimizer=self.optimizer,
            input_shift=shift,
        )

    def input_shift(self, server: ServerData) -> tuple[float, ...] | None:
        """The public pool's mean input (in,), or None (``--no-center-inputs``); it costs no privacy."""
        if not self.options.center_inputs or len(server.public_features) == 0:
            return None
        pool = server.public_features.reshape(len(server.public_features), -1).astype(np.float64)
        return tuple(float(v) for v in pool.mean(axis=0))

    def run(
        self,
        server: ServerData,
        transport: Transport,
        ledger: PrivacyLedger,
        progress: Progress = NO_PROGRESS,
    ) -> MethodOutcome:
        """Algorithm 1 for up to R rounds; the whole R is charged first, whenever the run stops."""
        assert isinstance(transport, PersonalisedModels)  # check_capabilities refused any other
        options = self.options
        validation = server.validation
        if options.target_accuracy is not None and validation is None:
            raise ConfigError("target_accuracy", "needs a labelled public validation set (none was prepared)")
        model = self.initial_model(server)
        sizes = perceptron_layer_sizes(model)
        start = flat_parameters(model)  # (d,) float32
        shift = self.input_shift(server)
        released = model if shift is None else ShiftedInput(shift, model)  # what sees the inputs
        training = self._training(sizes, shift)  # validated before the charge
        records = transport.record_counts()  # (m,)
        method = self.with_agent_records(records)  # refuses B > the smallest client's n
        ledger.charge(method.planned_events())  # every configured round, before any release
        rng = client_sampling_generator(self.noise_seed)
        m = transport.num_agents
        local = np.tile(start, (m, 1))  # (m, d): each client's latest private model w̃⁽ⁱ⁾
        global_model = start.copy()  # (d,): w̃_global
        history: list[dict[str, Any]] = []  # released global model on public data
        diagnostics: list[dict[str, Any]] = []  # private: never read below
        reached: int | None = None
        with progress.step(f"{self.name}: up to {self.rounds} rounds", total=self.rounds) as bar:
            for r in range(1, self.rounds + 1):
                chosen = np.flatnonzero(rng.random(m) < self.sampling_rate)  # Poisson sampling
                if chosen.size:
                    helpers = helper_models(local[chosen], global_model, options.helper, options.alpha)
                    private = transport.private_local_models(helpers, chosen, training)  # (|Ω|, d)
                    local[chosen] = private
                    mean = private.astype(np.float64).mean(axis=0)
                    eta = options.server_rate
                    global_model = ((1.0 - eta) * global_model + eta * mean).astype(np.float32)
                load_flat_parameters(model, global_model)
                public = _public_accuracy(released, validation)
                history.append({"round": r, "sampled": int(chosen.size), "global": public})
                diagnostics.append(
                    self._client_diagnostics(r, transport, server, local, global_model, sizes, shift)
                )
                bar.advance()
                if reaches_target(options.target_accuracy, public):
                    reached = r
                    break
        load_flat_parameters(model, global_model)
        released.eval()
        return MethodOutcome(
            student=released,
            query_indices=np.zeros(0, dtype=np.int64),
            pseudo_labels=np.zeros(0, dtype=np.int64),
            details=self._details(history, reached, records, sizes, validation, start.shape[0]),
            statements=self.record_statements(len(history), records),
            diagnostics={
                "client_test_sets": DIAGNOSTIC_NOTE,
                "client_accuracies": {key: diagnostics[-1][key] for key in ("personalised", "global")},
                "client_accuracy_history": diagnostics,
                "client_test_size": options.client_test_size,
            },
        )

    def _client_diagnostics(
        self,
        round_index: int,
        transport: Transport,
        server: ServerData,
        local: np.ndarray,
        global_model: np.ndarray,
        sizes: tuple[int, ...],
        shift: tuple[float, ...] | None,
    ) -> dict[str, Any]:
        """Mean accuracy of the personalised and global models on the clients' own test sets (private).

        None where the transport has no :class:`~fedvote.transport.capabilities.SimulationDiagnostics`
        (in a deployment the clients' test sets are theirs).
        """
        if not isinstance(transport, SimulationDiagnostics):
            return {"round": round_index, "personalised": None, "global": None}
        everyone = np.arange(local.shape[0])
        per_client = self.options.client_test_size
        personal = transport.client_accuracies(
            local, everyone, server.test, per_client=per_client, layer_sizes=sizes, input_shift=shift
        )
        shared = transport.client_accuracies(
            np.broadcast_to(global_model, local.shape),
            everyone,
            server.test,
            per_client=per_client,
            layer_sizes=sizes,
            input_shift=shift,
        )
        return {"round": round_index, "personalised": float(personal.mean()), "global": float(shared.mean())}

    def _details(
        self,
        history: list[dict[str, Any]],
        reached: int | None,
        records: np.ndarray,
        sizes: tuple[int, ...],
        validation: LabeledData | None,
        model_floats: int,
    ) -> dict[str, Any]:
        """The outcome's details: the mechanism its figures cover and the public history."""
        options = self.options
        rounds_run = len(history)
        return {
            "privacy_mechanism": self.record_mechanism(rounds_run, records),
            "agent_level": "not private: record-level clipping bounds no client's whole data (null)",
            "rounds": rounds_run,
            "max_rounds": self.rounds,
            "target_accuracy": options.target_accuracy,
            "round_reached": reached,
            "stop_rule": "released global model's accuracy on the labelled public validation set",
            "validation_size": None if validation is None else len(validation),
            "accuracy_history": history,
            "helper": options.helper,
            "alpha": options.alpha,
            "server_rate": options.server_rate,
            "optimizer": self.optimizer,
            "sampling_rate": self.sampling_rate,
            "local_steps_per_round": self.local_steps,
            "batch_size": self.batch_size,
            "batch_sampling": "poisson: each record with probability B/n_j per step",
            "per_sample_clip": self.per_sample_clip,
            "noise_std_per_step": self.sigma * self.per_sample_clip,
            "learning_rate": self.learning_rate,
            "layer_sizes": list(sizes),
            "input_centring": "public pool mean" if self.options.center_inputs else None,
            "mean_sampled_agents": float(np.mean([h["sampled"] for h in history])),
            "model_floats": model_floats,
        }


def _public_accuracy(model: torch.nn.Module, validation: LabeledData | None) -> float | None:
    """Accuracy of the released ``model`` on the public ``validation`` set (None: none)."""
    if validation is None:
        return None
    return float(np.mean(predict_labels(model, validation.features) == validation.labels))


def _check_accountant(kind: str) -> None:
    """Refuse, before anything runs, an accountant that cannot account PriFedSync's steps."""
    probe = prifedsync_events(1.0, 0.5, 1, 1).instance
    if not make_accountant(kind).supports(probe):
        raise ConfigError(
            "accountant",
            f"{kind} cannot account prifedsync's replace-one Poisson-subsampled Gaussian steps; use pld",
        )
