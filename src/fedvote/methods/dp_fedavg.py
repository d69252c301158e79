"""DP-FedAvg: Algorithms 3 and 5 of the voting paper's appendix (Geyer et al. 2017).

Round t: every agent takes part with probability q (Poisson sampling, m_t agents); each
sampled agent runs E local SGD iterations from θ_t and clips its update to L2 norm S,
Δ̃_i = Δ_i / max(1, ‖Δ_i‖/S). The sum Σ Δ̃_i then carries N(0, σ²S²), placed as
``noise`` says, and θ_{t+1} = θ_t + (Σ Δ̃_i + noise) / (q·N).

* ``noise="distributed"`` (default; Algorithm 5 with secure aggregation). *Every* agent
  takes part in every round's secure sum (:mod:`fedvote.aggregation.secure_sum`, pairwise
  masks, in process): a sampled agent sends Δ̃_i + N(0, σ²S²/t), any other agent its share
  N(0, σ²S²/t) alone, where t is ``--min-responders`` (default N, the voting methods' rule
  :func:`fedvote.aggregation.voting.noise_share_std`), so the total carries N(0, σ²S²·N/t)
  whoever was sampled (also when m_t = 0) — at least N(0, σ²S²) from any t honest shares.
  The server receives N uniformly masked vectors and learns only their sum: neither an
  individual update nor *who* was sampled. Each agent draws its own coin
  (in simulation: from the privacy generator, never shown to the server's aggregation
  code) and θ goes to every agent. Cost: N·d floats up and down per round instead of m_t·d.
* ``noise="distributed-unmasked"`` (Algorithm 5 as the paper writes it): each sampled
  agent adds N(0, σ²S²/m_t) to its own Δ̃_i and sends it in the clear; the server sees
  every noisy update and who was sampled. When m_t = 0 the server adds N(0, σ²S²) itself.
* ``noise="server"`` (Algorithm 3): sampled agents send Δ̃_i; a *trusted* server adds
  N(0, σ²S²) to the sum.

**The fixed denominator q·N.** The paper's Algorithms 3/5 divide by m_t. The Poisson-
subsampled Gaussian analysis needs the released quantity to be the noised sum scaled by
a *public constant*; dividing by the random m_t changes the sensitivity with m_t. McMahan
et al. (2018, "Learning differentially private recurrent language models") fix the
denominator at its expectation q·N, which is what is done here.

**Accounting** (:func:`fedvote.privacy.events.dp_fedavg_events`; ``docs/privacy.md``,
"Gradient-based baselines"). Who the figure holds against is part of it:

* ``distributed`` — against the server *and* every observer of the models: the server's
  whole view is the masked vectors (uniform whatever the updates) and the sum, the same
  noised sum an observer can compute from θ_{t+1}; the sample is hidden from both, so
  amplification by Poisson sampling holds. Agent level (zero-out of one agent):
  T rounds of PoissonSampled(q, Gaussian(σ)). Instance level (replace one record): the
  record moves one sampled agent's clipped update from a to b, ‖a‖, ‖b‖ ≤ S, so each round
  is dp-accounting's REPLACE_ONE pair (1−q)N(0, σ²) + qN(∓1, σ²) in units of S:
  ``replace_one(SelfComposed(PoissonSampled(q, Gaussian(σ)), T))``.
* ``server`` — the same events, against observers of the released models only: the
  trusted server sees every clipped update without noise (against it ε = ∞).
* ``distributed-unmasked`` — against the server, which sees agent i's update with noise
  σS/√m_t (m_t ≤ N) and the sample: no sampling credit; T rounds of Gaussian(σ/√N) at
  the agent level (sensitivity S) and Gaussian(σ/(2√N)) at the instance level (2S).

**The paper's σ = 0.06.** The appendix uses (S = 0.08, σ = 0.06, q = 0.05). Read as
Algorithm 3 writes it, N(0, σ²S²), σ = 0.06 *is* the noise multiplier; with q = 0.05
and T = 100 rounds its ε at δ = 10⁻³ is ≈ 1.8·10³ (PLD) — no meaningful privacy. Read as
an absolute noise std (0.06 on a sum of updates clipped to 0.08), the multiplier is
0.06/0.08 = 0.75, which gives ε ≈ 4.2 at T = 100 (δ = 10⁻³, PLD) — close to the
paper's operating point ε ≈ 4.3, which suggests this is the intended reading. Neither is taken as a
default: ``sigma`` here is always the noise multiplier, and fedvote calibrates it to the
requested agent-level ε at fixed T (the CLI's ``--epsilon``), or takes it from
``--sigma``. S = 0.08 and q = 0.05 are kept (the paper's values).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedvote.aggregation.secure_noise import secure_gaussian
from fedvote.aggregation.secure_sum import FixedPoint
from fedvote.aggregation.voting import noise_share_std
from fedvote.errors import ConfigError
from fedvote.methods.gradient import GradientMethod
from fedvote.methods.options.gradient import NOISE_PLACEMENTS, DpFedAvgOptions
from fedvote.models.local_training import LocalTraining, LocalUpdates
from fedvote.privacy.events import LevelEvents, dp_fedavg_events
from fedvote.transport import capabilities
from fedvote.transport.base import Transport

# Who each placement's ε holds against (result.json's ``details.epsilon_holds_against``).
HOLDS_AGAINST: dict[str, str] = {
    "distributed": "the server and every observer of the released models "
    "(secure aggregation: the server learns only the noised sum, not who was sampled)",
    "distributed-unmasked": "the server (it sees every agent's noisy update and who was sampled; "
    "no credit for sampling)",
    "server": "observers of the released models only; the server is trusted "
    "(it sees every clipped update without noise: against it ε = ∞)",
}

# Far tail of an agent's noise share, in standard deviations, that the fixed-point range must hold.
_SHARE_TAIL_SIGMAS = 40.0


@dataclass(frozen=True)
class DpFedAvg(GradientMethod):
    """DP-FedAvg with noise multiplier ``sigma``; defaults T = 100, q = 0.05, E = 20, S = 0.08.

    ``sigma`` is the noise multiplier σ (noise std on the sum = σ·S); 0 runs clipped
    FedAvg without noise (non-private). ``noise`` is ``"distributed"`` (default: shares
    from every agent, secure aggregation, sample hidden), ``"distributed-unmasked"``
    (Algorithm 5 as written) or ``"server"`` (Algorithm 3). ``num_agents`` is N, needed
    before the run only by ``"distributed-unmasked"``, whose ε depends on it.
    ``min_responders`` is t, the honest agents whose shares must carry σS between them
    (None: all N); only distributed noise takes it (:meth:`with_min_responders`).
    """

    name = "dp-fedavg"
    requires: ClassVar[tuple[type, ...]] = (capabilities.LocalUpdates,)
    calibration_level: ClassVar[str | None] = "agent"
    options_type: ClassVar[type | None] = DpFedAvgOptions

    clip_norm: float = 0.08
    noise: str = "distributed"
    num_agents: int | None = None
    min_responders: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.min_responders is not None and self.min_responders < 1:
            raise ConfigError("min_responders", f"must be at least 1, got {self.min_responders}")
        if not self.clip_norm > 0 or not math.isfinite(self.clip_norm):
            raise ConfigError("clip_norm", f"must be > 0, got {self.clip_norm}")
        if self.noise not in NOISE_PLACEMENTS:
            raise ConfigError("noise", f"must be one of {', '.join(NOISE_PLACEMENTS)}, got {self.noise!r}")
        if self.num_agents is not None and self.num_agents < 1:
            raise ConfigError("agents", f"must be at least 1, got {self.num_agents}")
        if self.noise == "distributed-unmasked" and self.num_agents is None and self.sigma > 0:
            raise ConfigError("noise", "distributed-unmasked needs the number of agents N for its ε")
        largest = self.clip_norm * (1.0 + _SHARE_TAIL_SIGMAS * self.sigma)
        if self.noise == "distributed" and largest > FixedPoint().bound:
            raise ConfigError(
                "clip_norm",
                f"S·(1 + {_SHARE_TAIL_SIGMAS:g}σ) = {largest:g} exceeds the secure sum's fixed-point "
                f"range ±{FixedPoint().bound:g}",
            )

    def planned_events(self) -> LevelEvents:
        """All T rounds, as :func:`fedvote.privacy.events.dp_fedavg_events` states them."""
        return self._events(self.rounds)

    def round_events(self) -> LevelEvents:
        """One round's release."""
        return self._events(1)

    def _events(self, rounds: int) -> LevelEvents:
        visible = self.num_agents if self.noise == "distributed-unmasked" else None
        return dp_fedavg_events(self.sampling_rate, self.sigma, rounds, visible_to_server=visible)

    def check_accountant(self, accountant: str) -> None:
        """Replace-one of a Poisson-subsampled Gaussian (the instance level) needs the PLD accountant."""
        subsampled = self.noise != "distributed-unmasked" and self.sampling_rate < 1 and self.sigma > 0
        if subsampled and accountant != "pld":
            raise ConfigError(
                "accountant",
                f"DP-FedAvg's instance level is replace-one of a Poisson-subsampled Gaussian, which "
                f"only the pld accountant computes; got {accountant!r}",
            )

    def requirements(self) -> tuple[type, ...]:
        """Local updates; with distributed noise also a secure sum of every agent's release."""
        if self.noise == "distributed":
            return (*self.requires, capabilities.SecureUpdateSum)
        return self.requires

    def with_min_responders(self, min_responders: int | None) -> DpFedAvg:
        """Distributed noise honours t (each share σS/√t); the other placements refuse the flag.

        With ``server`` the trusted server adds all the noise; with ``distributed-unmasked``
        the server sees each update with its own share σS/√m_t, and its ε (no sampling
        credit) does not count on other agents' shares. Neither splits σS among t honest agents.
        """
        if min_responders is None:
            return dataclasses.replace(self, min_responders=None)
        if self.noise != "distributed":
            raise ConfigError(
                "min_responders",
                f"applies to DP-FedAvg's --noise distributed (shares of a secure sum), not to {self.noise!r}",
            )
        return dataclasses.replace(self, min_responders=min_responders)

    def check_transport(self, transport: Transport) -> None:
        """The unmasked ε needs the true N; t at most N (a secure update sum: :meth:`requirements`)."""
        if self.noise == "distributed-unmasked" and self.num_agents != transport.num_agents:
            raise ConfigError(
                "agents",
                f"accounted for {self.num_agents} agents but the transport holds {transport.num_agents}",
            )
        if self.min_responders is not None and self.min_responders > transport.num_agents:
            raise ConfigError(
                "min_responders", f"t = {self.min_responders} exceeds the {transport.num_agents} agents"
            )

    def responders(self, num_agents: int) -> int:
        """t: the honest agents whose shares must carry the noise σS (``--min-responders``, default N)."""
        return num_agents if self.min_responders is None else self.min_responders

    def noise_share(self, sampled: int, num_agents: int) -> float:
        """The std each contributing agent adds: σS/√t (distributed), σS/√m_t (unmasked), else 0.

        Distributed: any t honest shares add up to variance σ²S², the noise the events
        assume, as :func:`fedvote.aggregation.voting.noise_share_std` does for votes.
        """
        if self.noise == "distributed":
            return noise_share_std(self.sigma * self.clip_norm, self.responders(num_agents))
        if self.noise == "distributed-unmasked" and sampled > 0:
            return self.sigma * self.clip_norm / math.sqrt(sampled)
        return 0.0

    def round_training(
        self, round_index: int, learning_rate: float, sampled: int, num_agents: int
    ) -> LocalTraining:
        """E SGD iterations, update clipped to S, plus the agent's noise share (:meth:`noise_share`)."""
        return LocalTraining(
            model=self.model,
            steps=self.local_steps,
            learning_rate=learning_rate,
            batch_size=self.batch_size,
            round_index=round_index,
            clip_norm=self.clip_norm,
            noise_std=self.noise_share(sampled, num_agents),
            min_responders=self.responders(num_agents) if self.noise == "distributed" else None,
        )

    def round_step(
        self,
        theta: np.ndarray,
        chosen: np.ndarray,
        training: LocalTraining,
        transport: Transport,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """Distributed noise: θ + (secure sum of all N agents' releases)/(qN); else as Algorithms 3/5."""
        if self.noise != "distributed":
            return super().round_step(theta, chosen, training, transport, rng)
        assert isinstance(transport, capabilities.SecureUpdateSum)  # required by requirements()
        total = transport.secure_update_sum(theta, chosen, training)  # (d,): the sum, nothing else
        return theta + total / (self.sampling_rate * transport.num_agents)

    def aggregate(
        self, theta: np.ndarray, received: LocalUpdates, rng: np.random.Generator, num_agents: int
    ) -> np.ndarray:
        """θ + (Σ Δ̃_i + noise) / (q·N); the server adds the noise unless the agents did."""
        total = received.updates.astype(np.float64).sum(axis=0)  # (d,); zeros when m_t = 0
        if received.updates.shape[0] == 0:
            total = np.zeros(theta.shape[0], dtype=np.float64)
        agents_added_noise = self.noise != "server" and received.updates.shape[0] > 0
        if self.sigma > 0 and not agents_added_noise:
            std = self.sigma * self.clip_norm
            if self.secure_noise:  # rng is CSPRNG-seeded (GradientMethod.run)
                total += secure_gaussian(rng, std, total.shape)
            else:
                total += rng.normal(0.0, std, size=total.shape)
        return theta + total / (self.sampling_rate * num_agents)

    def _reported_share(self, num_agents: int) -> float | None:
        """Each agent's noise std: σS/√t (distributed), None (unmasked: σS/√m_t varies), 0 (server)."""
        if self.noise == "distributed-unmasked":
            return None
        return self.noise_share(0, num_agents)

    def details(self, transport: Transport) -> dict[str, object]:
        """The values the accounting used (q, σ, S, T), the noise placement and whom ε holds against."""
        return {
            "noise_multiplier": self.sigma,
            "clip_norm": self.clip_norm,
            "noise": self.noise,
            "noise_share_std": self._reported_share(transport.num_agents),
            "min_responders": self.responders(transport.num_agents) if self.noise == "distributed" else None,
            "update_denominator": self.sampling_rate * transport.num_agents,
            "epsilon_holds_against": HOLDS_AGAINST[self.noise],
        }
