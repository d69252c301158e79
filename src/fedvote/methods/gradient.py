"""What the gradient-based baselines share: options, the server's loop, its randomness.

FedAvg, DP-FedAvg and DP-FedSGD all run T rounds of: sample agents (Poisson, rate q),
send them the global θ, let each train locally from θ and send back an update, and
move θ by an aggregate of the updates. They differ in what an agent does to its update
(nothing; clip to S and add its noise share; DP-SGD) and in how the server aggregates
(data-size weighted mean; sum plus noise over the fixed q·N). :class:`GradientMethod`
holds the loop; each method supplies the round's :class:`LocalTraining`, its aggregate
and its events.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from fedvote.data.federation import ServerData
from fedvote.errors import ConfigError
from fedvote.methods.base import Method, MethodOutcome
from fedvote.models.local_training import (
    LocalTraining,
    LocalUpdates,
    flat_parameters,
    load_flat_parameters,
)
from fedvote.models.zoo import MODEL_NAMES, build_model
from fedvote.privacy.events import LevelEvents
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import Transport

if TYPE_CHECKING:
    from fedvote.config import RunConfig

# DP-FedAvg's noise placements (:mod:`fedvote.methods.dp_fedavg`): every agent adds a share
# and the updates are summed by secure aggregation (default); Algorithm 5 as the paper
# writes it (the server sees each noisy update); the server adds the noise (Algorithm 3).
NOISE_PLACEMENTS: tuple[str, ...] = ("distributed", "distributed-unmasked", "server")


@dataclass(frozen=True)
class GradientOptions:
    """Settings of the gradient-based baselines (``RunConfig.gradient``).

    ``None`` means the method's own default (its class docstring says which, and its
    result's ``details`` record the values used).

    Parameters
    ----------
    rounds : int or None
        T, communication rounds.
    sampling_rate : float or None
        q, the probability that an agent takes part in a round (Poisson sampling).
    local_steps : int or None
        E, local (DP-)SGD iterations per round.
    clip_norm : float or None
        S, the L2 bound on an agent's whole update (DP-FedAvg).
    per_sample_clip : float or None
        C, the per-record gradient clip of DP-SGD (DP-FedSGD).
    learning_rate : float or None
        Local SGD step size in round 0.
    lr_decay : float or None
        The step size of round t is ``learning_rate · lr_decay**t``.
    batch_size : int or None
        Local mini-batch size of plain SGD (FedAvg, DP-FedAvg).
    batch_sampling_rate : float or None
        DP-SGD's Poisson rate q_b: each record joins each local batch with this
        probability (DP-FedSGD; the same for every agent).
    noise : str
        DP-FedAvg's noise placement: ``"distributed"`` (every agent adds N(0, σ²S²/N) and
        the server learns only the secure sum; the sample stays hidden),
        ``"distributed-unmasked"`` (Algorithm 5 as written: each sampled agent adds
        N(0, σ²S²/m_t) and the server sees every noisy update) or ``"server"``
        (Algorithm 3: a trusted server adds N(0, σ²S²)).
    model : str
        Architecture of the global model (:data:`fedvote.models.zoo.MODEL_NAMES`).

    """

    rounds: int | None = None
    sampling_rate: float | None = None
    local_steps: int | None = None
    clip_norm: float | None = None
    per_sample_clip: float | None = None
    learning_rate: float | None = None
    lr_decay: float | None = None
    batch_size: int | None = None
    batch_sampling_rate: float | None = None
    noise: str = "distributed"
    model: str = "mlp"

    def __post_init__(self) -> None:
        _validate(
            rounds=self.rounds,
            sampling_rate=self.sampling_rate,
            local_steps=self.local_steps,
            clip_norm=self.clip_norm,
            per_sample_clip=self.per_sample_clip,
            learning_rate=self.learning_rate,
            lr_decay=self.lr_decay,
            batch_size=self.batch_size,
            batch_sampling_rate=self.batch_sampling_rate,
            noise=self.noise,
            model=self.model,
        )

    def overrides(self) -> dict[str, Any]:
        """The options given (not ``None``), as keyword arguments of a gradient method."""
        names = (
            "rounds", "sampling_rate", "local_steps", "clip_norm", "per_sample_clip",
            "learning_rate", "lr_decay", "batch_size", "batch_sampling_rate",
        )  # fmt: skip
        given: dict[str, Any] = {n: getattr(self, n) for n in names if getattr(self, n) is not None}
        given["noise"] = self.noise
        given["model"] = self.model
        return given


def _validate(**values: object) -> None:
    """Refuse out-of-range gradient settings (``None`` = not given)."""
    checks: dict[str, tuple[str, object]] = {
        "rounds": ("an integer >= 1", lambda v: isinstance(v, int) and v >= 1),
        "local_steps": ("an integer >= 1", lambda v: isinstance(v, int) and v >= 1),
        "batch_size": ("an integer >= 1", lambda v: isinstance(v, int) and v >= 1),
        "sampling_rate": ("in (0, 1]", lambda v: 0.0 < v <= 1.0),
        "batch_sampling_rate": ("in (0, 1]", lambda v: 0.0 < v <= 1.0),
        "clip_norm": ("> 0", lambda v: v > 0 and math.isfinite(v)),
        "per_sample_clip": ("> 0", lambda v: v > 0 and math.isfinite(v)),
        "learning_rate": ("> 0", lambda v: v > 0 and math.isfinite(v)),
        "lr_decay": ("in (0, 1]", lambda v: 0.0 < v <= 1.0),
    }
    for name, value in values.items():
        if value is None:
            continue
        if name == "noise":
            if value not in NOISE_PLACEMENTS:
                raise ConfigError("noise", f"must be one of {', '.join(NOISE_PLACEMENTS)}, got {value!r}")
            continue
        if name == "model":
            if value not in MODEL_NAMES:
                raise ConfigError("model", f"unknown model {value!r}; choose from {', '.join(MODEL_NAMES)}")
            continue
        what, ok = checks[name]
        if not ok(value):  # type: ignore[operator]
            raise ConfigError(name, f"must be {what}, got {value!r}")


def privacy_generator(noise_seed: int | None, tag: int) -> np.random.Generator:
    """The simulation's privacy randomness of the loop (agent sampling, server noise).

    Seeded only for a reproducible simulation (``--noise-seed``; a comparison or sweep
    derives each run's seed, :mod:`fedvote.noise_seeds`); otherwise from OS entropy, so
    that no printed seed predicts which agents were sampled — the amplification by
    sampling assumes the adversary does not know it. With DP-FedAvg's distributed noise
    the sampling draws stand for the agents' own coins: nothing the server's side
    receives depends on them except through the secure sum.
    """
    entropy = noise_seed if noise_seed is not None else secrets.randbits(128)
    return np.random.default_rng(np.random.SeedSequence([entropy, tag]))


@dataclass(frozen=True)
class GradientMethod(Method):
    """The server's loop shared by FedAvg, DP-FedAvg and DP-FedSGD.

    Round t = 0..T−1: every agent is sampled independently with probability q (from the
    privacy generator); the round is charged to the ledger; :meth:`round_step` exchanges
    θ and updates — by default θ goes to the m_t sampled agents, who send back updates
    (:meth:`Transport.local_updates`), and θ moves by :meth:`aggregate` (DP-FedAvg's
    distributed noise sums every agent's release securely instead). The local step size
    is ``learning_rate · lr_decay**t``.
    """

    calibration_level: ClassVar[str | None] = "agent"
    # GradientOptions fields a method does not use; from_config drops them.
    unused_options: ClassVar[tuple[str, ...]] = ()

    sigma: float = 0.0
    rounds: int = 100
    sampling_rate: float = 0.05
    local_steps: int = 20
    learning_rate: float = 0.1
    lr_decay: float = 0.99
    batch_size: int = 32
    model: str = "mlp"
    seed: int = 0
    noise_seed: int | None = None

    @classmethod
    def from_config(
        cls, config: RunConfig, *, sigma: float, queries: int, min_responders: int
    ) -> GradientMethod:
        """The method with ``config.gradient``'s settings and noise multiplier ``sigma``.

        Q and t do not apply; a method with nothing to calibrate (FedAvg) keeps σ = 0.
        """
        options = {k: v for k, v in config.gradient.overrides().items() if k not in cls.unused_options}
        if cls.calibration_level is not None:
            options["sigma"] = sigma
        fields = {f.name for f in dataclasses.fields(cls)}
        if "delta" in fields:
            options["delta"] = config.privacy.delta
        if "num_agents" in fields:
            options["num_agents"] = config.federation.agents
        method = cls(seed=config.seed, noise_seed=config.privacy.noise_seed, **options)
        method.check_accountant(config.privacy.accountant)
        return method

    def check_accountant(self, accountant: str) -> None:
        """Refuse, before any training, an accountant that cannot account this method's events."""

    def with_sigma(self, sigma: float) -> GradientMethod:
        """The same run with noise multiplier ``sigma`` (FedAvg adds no noise: unchanged)."""
        if self.calibration_level is None:
            return self
        return dataclasses.replace(self, sigma=sigma)

    def __post_init__(self) -> None:
        if not self.sigma >= 0:
            raise ConfigError("sigma", f"must be >= 0, got {self.sigma}")
        _validate(
            rounds=self.rounds,
            sampling_rate=self.sampling_rate,
            local_steps=self.local_steps,
            learning_rate=self.learning_rate,
            lr_decay=self.lr_decay,
            batch_size=self.batch_size,
            model=self.model,
        )

    @abstractmethod
    def round_events(self) -> LevelEvents:
        """The events of one round (charged before its updates are used)."""

    @abstractmethod
    def round_training(
        self, round_index: int, learning_rate: float, sampled: int, num_agents: int
    ) -> LocalTraining:
        """What each of the ``sampled`` agents (of ``num_agents``) does in round ``round_index``."""

    @abstractmethod
    def aggregate(
        self, theta: np.ndarray, received: LocalUpdates, rng: np.random.Generator, num_agents: int
    ) -> np.ndarray:
        """The next global θ from θ (d,), the round's updates and the number N of agents."""

    def round_step(
        self,
        theta: np.ndarray,
        chosen: np.ndarray,
        training: LocalTraining,
        transport: Transport,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """One round's exchange: the ``chosen`` agents' updates come back, θ moves by :meth:`aggregate`."""
        received = transport.local_updates(theta, chosen, training)
        return self.aggregate(theta, received, rng, transport.num_agents)

    def details(self, transport: Transport) -> dict[str, object]:
        """Method-specific result keys (the values the accounting used)."""
        return {}

    def check_transport(self, transport: Transport) -> None:
        """Refuse, before the first round, a transport this run cannot use as its accounting assumes."""

    def learning_rate_at(self, round_index: int) -> float:
        """The local step size of round ``round_index``."""
        return self.learning_rate * self.lr_decay**round_index

    def initial_model(self, server: ServerData) -> torch.nn.Module:
        """θ⁰: the architecture ``model`` initialised from ``seed``."""
        generator = torch.Generator().manual_seed(self.seed)
        return build_model(self.model, server.example_shape, server.num_classes, generator=generator)

    def run(
        self,
        server: ServerData,
        transport: Transport,
        ledger: PrivacyLedger,
        progress: Progress = NO_PROGRESS,
    ) -> MethodOutcome:
        """T rounds of sample → local training → aggregate; the last θ is the student."""
        self.check_transport(transport)
        model = self.initial_model(server)
        theta = flat_parameters(model)  # (d,) float32
        rng = privacy_generator(self.noise_seed, 0x6AD)
        n = transport.num_agents
        sampled_per_round: list[int] = []
        with progress.step(f"{self.name}: {self.rounds} rounds", total=self.rounds) as bar:
            for t in range(self.rounds):
                chosen = np.flatnonzero(rng.random(n) < self.sampling_rate)  # Poisson sampling
                ledger.charge(self.round_events())
                training = self.round_training(t, self.learning_rate_at(t), int(chosen.shape[0]), n)
                theta = self.round_step(theta, chosen, training, transport, rng).astype(np.float32)
                sampled_per_round.append(int(chosen.shape[0]))
                bar.advance()
        load_flat_parameters(model, theta)
        model.eval()
        return MethodOutcome(
            student=model,
            query_indices=np.zeros(0, dtype=np.int64),
            pseudo_labels=np.zeros(0, dtype=np.int64),
            details={
                **self.details(transport),
                "rounds": self.rounds,
                "sampling_rate": self.sampling_rate,
                "mean_sampled_agents": float(np.mean(sampled_per_round)) if sampled_per_round else 0.0,
                "model_floats": int(theta.shape[0]),
                "local_steps_per_round": self.local_steps,
                "learning_rate": self.learning_rate,
                "lr_decay": self.lr_decay,
            },
        )


def weighted_mean_update(received: LocalUpdates) -> np.ndarray:
    """Σ n_i Δ_i / Σ n_i over the received updates (zeros when none, or no records), (d,)."""
    weights = received.records.astype(np.float64)
    d = received.updates.shape[1]
    if received.updates.shape[0] == 0 or weights.sum() == 0:
        return np.zeros(d, dtype=np.float64)
    return (weights[:, None] * received.updates.astype(np.float64)).sum(axis=0) / weights.sum()
