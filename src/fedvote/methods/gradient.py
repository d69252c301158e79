"""What the gradient-based baselines share: the server's loop, its randomness.

FedAvg, DP-FedAvg and DP-FedSGD all run T rounds of: sample agents (Poisson, rate q),
send them the global θ, let each train locally from θ and send back an update, and
move θ by an aggregate of the updates. They differ in what an agent does to its update
(nothing; clip to S and add its noise share; DP-SGD) and in how the server aggregates
(data-size weighted mean; sum plus noise over the fixed q·N). :class:`GradientMethod`
holds the loop; each method supplies the round's :class:`LocalTraining`, its aggregate
and its events. Their settings (``--rounds``, …) are options, in the light
:mod:`fedvote.methods.options.gradient`.
"""

from __future__ import annotations

import dataclasses
import secrets
from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from fedvote.aggregation.secure_noise import csprng_seeded_generator
from fedvote.data.federation import PublicMetadata, ServerData
from fedvote.errors import ConfigError
from fedvote.methods.base import Method, MethodOutcome
from fedvote.methods.options.gradient import check_gradient_settings
from fedvote.models.config import LINEAR_TEACHER_MIN_FEATURES
from fedvote.models.local_training import (
    LocalTraining,
    LocalUpdates,
    flat_parameters,
    load_flat_parameters,
)
from fedvote.models.shifted_input import ShiftedInput, public_mean_shift
from fedvote.models.zoo import build_model
from fedvote.privacy.events import LevelEvents
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport import capabilities
from fedvote.transport.base import Transport

if TYPE_CHECKING:
    from fedvote.config import RunConfig


def privacy_generator(noise_seed: int | None, tag: int) -> np.random.Generator:
    """The simulation's privacy randomness of the loop (agent sampling, server noise).

    Seeded only for a reproducible simulation (``--noise-seed``; a comparison or sweep
    derives each run's seed, :mod:`fedvote.privacy.noise_seeds`); otherwise from OS entropy, so
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
    (:meth:`~fedvote.transport.capabilities.LocalUpdates.local_updates`), and θ moves by
    :meth:`aggregate` (DP-FedAvg's distributed noise sums every agent's release securely
    instead). The local step size is ``learning_rate · lr_decay**t``.

    With ``center_inputs`` every round's :class:`LocalTraining` carries the public pool's mean
    input (:meth:`input_shift`): each agent subtracts it from its records before training,
    θ⁰ is initialised as usual, and the released model applies it
    (:class:`~fedvote.models.shifted_input.ShiftedInput`). A public constant: no event changes.
    Off by default here (FedAvg, DP-FedAvg: results recorded before it rerun exactly); DP-FedSGD
    turns it on (``docs/defaults.md``).

    The model, unless ``--gradient-model`` gave one (``model_from_public`` False), is chosen
    from public metadata by :meth:`with_public`: a method that noises its updates trains a
    logistic model on vectors of at least :data:`LINEAR_TEACHER_MIN_FEATURES` features (public
    feature maps such as ``--input-features patch``): the noise grows with the model's
    floats, and a linear head on such features has the fewest (``docs/defaults.md``).
    """

    calibration_level: ClassVar[str | None] = "agent"

    sigma: float = 0.0
    rounds: int = 100
    sampling_rate: float = 0.05
    local_steps: int = 20
    learning_rate: float = 0.1
    lr_decay: float = 0.99
    batch_size: int = 32
    model: str = "mlp"
    center_inputs: bool = False
    seed: int = 0
    noise_seed: int | None = None
    secure_noise: bool = False
    local_da: str = "none"
    model_from_public: bool = True  # False when --gradient-model was given: never replaced
    model_rule: str = "default"  # why the model is the one it is (with_public; result.json)

    @classmethod
    def from_config(
        cls, config: RunConfig, *, sigma: float, queries: int, min_responders: int
    ) -> GradientMethod:
        """The method with its options' settings (``config.options``) and noise multiplier ``sigma``.

        Q and t do not apply; a method with nothing to calibrate (FedAvg) keeps σ = 0.
        """
        settings = cls.options_from(config)
        options = settings.overrides()
        center = getattr(settings, "center_inputs", None)  # not in overrides(): PriFedSync has its own
        if center is not None:
            options["center_inputs"] = center
        if cls.calibration_level is not None:
            options["sigma"] = sigma
        fields = {f.name for f in dataclasses.fields(cls)}
        if "num_agents" in fields:
            options["num_agents"] = config.federation.agents
        method = cls(
            seed=config.seed,
            noise_seed=config.privacy.noise_seed,
            secure_noise=config.privacy.secure_noise,
            model_from_public="model" not in options,
            **options,
        )
        method.check_accountant(config.privacy.accountant)
        return method.with_min_responders(config.privacy.min_responders)

    def check_accountant(self, accountant: str) -> None:
        """Refuse, before any training, an accountant that cannot account this method's events."""

    def with_public(self, public: PublicMetadata) -> GradientMethod:
        """The model chosen from the example shape (public) unless the user gave one.

        A method that noises its updates trains a logistic model on vectors of at least
        :data:`LINEAR_TEACHER_MIN_FEATURES` features; otherwise the configured model (the MLP by
        default). FedAvg adds no noise and keeps it. The events do not depend on the model
        (the clip bounds each update whatever its floats), so ε is unchanged.
        """
        shape = tuple(public.example_shape)
        if not self.model_from_public or self.calibration_level is None or len(shape) != 1:
            return self
        if shape[0] < LINEAR_TEACHER_MIN_FEATURES:
            return self
        rule = f"feature vectors: {shape[0]} >= {LINEAR_TEACHER_MIN_FEATURES} features, noised updates"
        return dataclasses.replace(self, model="logistic", model_rule=rule)

    def model_choice(self) -> str:
        """Why the trained model is the one it is (result.json's ``details.model_choice``)."""
        return "given (--gradient-model)" if not self.model_from_public else self.model_rule

    def with_min_responders(self, min_responders: int | None) -> GradientMethod:
        """The method honouring ``--min-responders`` t; refused here (None, the flag not given, passes).

        t is the number of honest agents whose noise shares must add up to the noise the
        accounting assumes (``docs/privacy.md``, "Distributed noise"). Only noise split into
        shares of a sum can honour it (DP-FedAvg's distributed noise overrides this); FedAvg
        adds none, DP-FedSGD's agents each add their whole DP-SGD noise to their own steps.
        Accepting the flag and ignoring it would record a t the noise does not honour.
        """
        if min_responders is None:
            return self
        why = "it adds no noise" if self.calibration_level is None else "its noise is not split into shares"
        raise ConfigError(
            "min_responders",
            f"does not apply to {self.name}: {why} (t counts the honest agents whose shares make the noise)",
        )

    def with_sigma(self, sigma: float) -> GradientMethod:
        """The same run with noise multiplier ``sigma`` (FedAvg adds no noise: unchanged)."""
        if self.calibration_level is None:
            return self
        return dataclasses.replace(self, sigma=sigma)

    def __post_init__(self) -> None:
        if not self.sigma >= 0:
            raise ConfigError("sigma", f"must be >= 0, got {self.sigma}")
        check_gradient_settings(
            rounds=self.rounds,
            sampling_rate=self.sampling_rate,
            local_steps=self.local_steps,
            learning_rate=self.learning_rate,
            lr_decay=self.lr_decay,
            batch_size=self.batch_size,
            model=self.model,
        )
        if not isinstance(self.center_inputs, bool):
            raise ConfigError("center_inputs", f"must be true or false, got {self.center_inputs!r}")
        check_gradient_settings(local_da=self.local_da)
        if self.local_da == "dann" and self.model == "logistic":
            raise ConfigError(
                "gradient_model", "--local-da dann adapts a hidden representation: use mlp or cnn"
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
        assert isinstance(transport, capabilities.LocalUpdates)  # check_capabilities refused any other
        received = transport.local_updates(theta, chosen, training)
        return self.aggregate(theta, received, rng, transport.num_agents)

    def details(self, transport: Transport) -> dict[str, object]:
        """Method-specific result keys (the values the accounting used)."""
        return {}

    def events_of_round(self, round_index: int) -> LevelEvents:
        """What round ``round_index`` charges before its updates are used (default: :meth:`round_events`)."""
        return self.round_events()

    def participants(self, round_index: int, num_agents: int, rng: np.random.Generator) -> np.ndarray:
        """The agents taking part in round ``round_index``: Poisson sampling at rate q (default).

        Drawn from the privacy generator ``rng`` (the sample must stay unknown to the adversary
        for the amplification the events assume). DP-FTRL overrides it: no sampling.
        """
        return np.flatnonzero(rng.random(num_agents) < self.sampling_rate)

    def participation_details(self) -> dict[str, object]:
        """How agents took part, for result.json (default: the Poisson rate q)."""
        return {"sampling_rate": self.sampling_rate}

    def check_transport(self, transport: Transport) -> None:
        """Refuse, before the first round, a transport this run cannot use as its accounting assumes."""

    def learning_rate_at(self, round_index: int) -> float:
        """The local step size of round ``round_index``."""
        return self.learning_rate * self.lr_decay**round_index

    def initial_model(self, server: ServerData) -> torch.nn.Module:
        """θ⁰: the architecture ``model`` initialised from ``seed`` (with ``--local-da dann``, and G_d)."""
        generator = torch.Generator().manual_seed(self.seed)
        model = build_model(self.model, server.example_shape, server.num_classes, generator=generator)
        if self.local_da != "dann":
            return model
        from fedvote.models.dann import DannConfig, DannNet

        return DannNet(model, tuple(server.example_shape), DannConfig().domain_hidden, generator)

    def dann_scale(self, round_index: int) -> float | None:
        """FedAvg+DA's reversal scale λ in round t: 2/(1+exp(-10 t/T))-1 (Ganin et al.); None without DA."""
        if self.local_da != "dann":
            return None
        from fedvote.models.dann import adaptation_weight

        return adaptation_weight(round_index / self.rounds)

    def input_shift(self, server: ServerData) -> tuple[float, ...] | None:
        """The public pool's mean input (in,) with ``center_inputs``, else None; it costs no privacy."""
        if not self.center_inputs:
            return None
        return public_mean_shift(server.public_features)

    def run(
        self,
        server: ServerData,
        transport: Transport,
        ledger: PrivacyLedger,
        progress: Progress = NO_PROGRESS,
    ) -> MethodOutcome:
        """T rounds of sample → local training → aggregate; the last θ (after the shift) is the student."""
        self.check_transport(transport)
        model = self.initial_model(server)
        theta = flat_parameters(model)  # (d,) float32
        shift = self.input_shift(server)  # (in,) public, sent down with θ every round
        released = model if shift is None else ShiftedInput(shift, model)  # what sees the inputs
        rng = csprng_seeded_generator() if self.secure_noise else privacy_generator(self.noise_seed, 0x6AD)
        n = transport.num_agents
        sampled_per_round: list[int] = []
        with progress.step(f"{self.name}: {self.rounds} rounds", total=self.rounds) as bar:
            for t in range(self.rounds):
                chosen = self.participants(t, n, rng)
                ledger.charge(self.events_of_round(t))
                training = self.round_training(t, self.learning_rate_at(t), int(chosen.shape[0]), n)
                if shift is not None:
                    training = dataclasses.replace(training, input_shift=shift)
                if self.local_da == "dann":
                    training = dataclasses.replace(training, dann_scale=self.dann_scale(t))
                theta = self.round_step(theta, chosen, training, transport, rng).astype(np.float32)
                sampled_per_round.append(int(chosen.shape[0]))
                bar.advance()
        load_flat_parameters(model, theta)
        released.eval()
        return MethodOutcome(
            student=released,
            query_indices=np.zeros(0, dtype=np.int64),
            pseudo_labels=np.zeros(0, dtype=np.int64),
            details={
                **self.details(transport),
                "rounds": self.rounds,
                **self.participation_details(),
                "mean_sampled_agents": float(np.mean(sampled_per_round)) if sampled_per_round else 0.0,
                "model_floats": int(theta.shape[0]),
                "local_steps_per_round": self.local_steps,
                "learning_rate": self.learning_rate,
                "lr_decay": self.lr_decay,
                "model": self.model,
                "model_choice": self.model_choice(),
                "center_inputs": self.center_inputs,
                "input_centring": None if shift is None else "public pool mean",
                "local_da": self.local_da,
            },
        )


def weighted_mean_update(received: LocalUpdates) -> np.ndarray:
    """Σ n_i Δ_i / Σ n_i over the received updates (zeros when none, or no records), (d,)."""
    weights = received.records.astype(np.float64)
    d = received.updates.shape[1]
    if received.updates.shape[0] == 0 or weights.sum() == 0:
        return np.zeros(d, dtype=np.float64)
    return (weights[:, None] * received.updates.astype(np.float64)).sum(axis=0) / weights.sum()
