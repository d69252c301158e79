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

**Adaptive clipping** (``clipping="adaptive"``; Andrew et al., NeurIPS 2021,
:mod:`fedvote.privacy.adaptive_clipping`). The clip starts at S and each round moves
geometrically toward the ``clip_quantile`` γ of the sampled updates' norms:
C_{t+1} = C_t·exp(−η(b̃_t − γ)), b̃_t the noisy fraction of updates with norm ≤ C_t and
η = η_C·min(1, (qN/20)/σ_b) (:func:`fedvote.privacy.adaptive_clipping.clip_step`: the paper's
η_C at the paper's count noise σ_b = qN/20, less where the count is noisier). Each
sampled agent's release carries its centred bit as one more coordinate, and the noise of the
updates (multiplier σ_Δ) and of the count (std σ_b) together are one Gaussian of multiplier
z = σ (σ_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2)): the events, the calibration and the headline ε are those
of the fixed clip with multiplier z, and they cover the count. The clip history is a function
of the released counts (public). The server's step is the noised sum times S/C_t (a public
factor: post-processing), so that the step keeps the scale the fixed clip S gave it — a
server learning rate tied to the clip. Andrew et al. tune a server learning rate per run; with
θ moved by the raw sum, the clip's growth toward the median norm (≈ 12·S on digits) grew the
step and the noise with it, and the model diverged (digits, ε = 4, 3 seeds: accuracy 0.10–0.14,
clip 550–4900 after 100 rounds; with the S/C_t step 0.77–0.81). Under the S/C_t step an agent
adds S·Δ_i/max(C_t, ‖Δ_i‖) and the noise is σ_Δ·S whatever C_t: a clip above an update's norm
only shrinks that update, so where the fixed S is already below every norm (digits, MNIST:
‖Δ‖ ≈ 4–15·S throughout) the adaptive clip cannot beat it and the count's share of z⁻² is
pure cost; hence the small default share and the damped step (``adaptive_clipping``). The
two variants draw common random numbers: at the same seeds the same sampling coins and the same
standard normals on every update coordinate (the clip bit's noise from a stream of its own:
``count_coordinates`` of :meth:`~fedvote.agents.agent.Agent.release`), so they differ only by
the clip's path and σ_Δ/z; measured, the adaptive run then matches the fixed clip at multiplier
σ_Δ (18 digits seeds exactly, MNIST seeds 0–2 to one test image; ``docs/privacy.md``). Not with
``distributed-unmasked`` (its ε per agent share has no such analysis here) nor with DANN local
updates.

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from fedvote.agents.local_updates import ClipCountTraining, DiscreteTraining
from fedvote.aggregation.secure_noise import (
    MAX_EXACT_SIGMA_SQUARED,
    csprng_seeded_generator,
    secure_gaussian,
)
from fedvote.aggregation.secure_sum import FixedPoint
from fedvote.aggregation.voting import noise_share_std
from fedvote.errors import ConfigError
from fedvote.methods.cohort import planned_sampling_rate
from fedvote.methods.gradient import GradientMethod, privacy_generator
from fedvote.methods.options.gradient import CLIPPINGS, NOISE_PLACEMENTS, DpFedAvgOptions
from fedvote.models.local_training import LocalTraining, LocalUpdates, flat_parameters
from fedvote.models.zoo import build_model
from fedvote.privacy import adaptive_clipping, discrete_sum
from fedvote.privacy.events import LevelEvents, dp_fedavg_discrete_events, dp_fedavg_events
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport import capabilities
from fedvote.transport.base import Transport

if TYPE_CHECKING:
    from collections.abc import Callable

    from fedvote.config import RunConfig
    from fedvote.data.federation import PublicMetadata, ServerData
    from fedvote.methods.base import Method, MethodOutcome

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
# The adaptive clip never falls below this fraction of its start S (a public clamp: post-processing).
_MIN_CLIP_FRACTION = 1e-3
# The stream tag of the server's count noise (``--noise server --clipping adaptive``): apart from the
# loop's generator (tag 0x6AD: the sampling coins and the updates' noise), so that both are the
# fixed clip's draws at the same noise seed.
_SERVER_COUNT_TAG = 0xC0C8


@dataclass(eq=False)
class _ClipHistory:
    """One run's adaptive clips C_0, C_1, … (the server's state; public: from released counts)."""

    clips: list[float] = field(default_factory=list)
    fractions: list[float] = field(default_factory=list)
    count_rng: np.random.Generator | None = None  # the server's count noise (noise="server")


@dataclass(frozen=True)
class DpFedAvg(GradientMethod):
    """DP-FedAvg with noise multiplier ``sigma``; defaults T = 100, E = 20, S = 0.08, q planned.

    q not given: with a target ε, :func:`fedvote.methods.cohort.planned_sampling_rate` (0.2 for
    N = 50 or 100 at ε = 4, the paper's 0.05 from N = 2,000 up); with ``--sigma``, the paper's 0.05.

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
    audit_release = "fedavg-run"
    audit_secure_noise = True

    clip_norm: float = 0.08
    noise: str = "distributed"
    num_agents: int | None = None
    min_responders: int | None = None
    clipping: str = "fixed"
    clip_quantile: float = 0.5
    clip_learning_rate: float = adaptive_clipping.DEFAULT_CLIP_LEARNING_RATE
    clip_count_stddev: float | None = None
    model_floats: int | None = None  # d, for --secure-noise's discrete events (with_public sets it)
    # Where q came from: "given" (--sampling-rate), "planned" (cohort.planned_sampling_rate, from the
    # target ε) or "paper" (neither: --sigma given, the paper's 0.05).
    sampling_rate_rule: str = "paper"
    _history: _ClipHistory = field(default_factory=_ClipHistory, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_clipping()
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

    def _check_clipping(self) -> None:
        """Refuse an adaptive clip this run cannot account or carry (one line naming the flag)."""
        if self.clipping not in CLIPPINGS:
            raise ConfigError("clipping", f"must be one of {', '.join(CLIPPINGS)}, got {self.clipping!r}")
        if not 0.0 < self.clip_quantile < 1.0:
            raise ConfigError("clip_quantile", f"must lie in (0, 1), got {self.clip_quantile}")
        if not (self.clip_learning_rate > 0 and math.isfinite(self.clip_learning_rate)):
            raise ConfigError("clip_learning_rate", f"must be > 0, got {self.clip_learning_rate}")
        count = self.clip_count_stddev
        if count is not None and not (count > 0 and math.isfinite(count)):
            raise ConfigError("clip_count_stddev", f"must be > 0, got {count}")
        if self.secure_noise and self.noise != "distributed":
            raise ConfigError(
                "secure_noise",
                "applies to DP-FedAvg's --noise distributed (integer shares through the secure sum), "
                f"not {self.noise!r}",
            )
        if self.secure_noise and self.clipping == "adaptive":
            raise ConfigError(
                "secure_noise", "its discrete shares are not combined with --clipping adaptive yet"
            )
        if self.clipping != "adaptive":
            return
        if self.name != "dp-fedavg":
            raise ConfigError("clipping", f"adaptive applies to dp-fedavg, not to {self.name}")
        if self.noise == "distributed-unmasked":
            raise ConfigError(
                "clipping", "adaptive applies to --noise distributed or server, not distributed-unmasked"
            )
        if self.local_da != "none":
            raise ConfigError(
                "clipping", "adaptive clipping counts plain local updates; not with --local-da dann"
            )
        if count is not None and self.sigma > 0 and not count > self.sigma / 2.0:
            raise ConfigError(
                "clip_count_stddev",
                f"must exceed z/2 = {self.sigma / 2.0:g} (the noise multiplier z = {self.sigma:g} covers "
                f"the count and the updates together), got {count:g}",
            )

    @classmethod
    def from_config(
        cls, config: RunConfig, *, sigma: float, queries: int, min_responders: int
    ) -> DpFedAvg:
        """As every gradient method; records whether ``--sampling-rate`` was given (else it is planned)."""
        method = super().from_config(config, sigma=sigma, queries=queries, min_responders=min_responders)
        assert isinstance(method, DpFedAvg)
        if cls.options_from(config).sampling_rate is None:
            return method
        return dataclasses.replace(method, sampling_rate_rule="given")

    def with_calibrated_settings(self, calibrate: Callable[[Method], float]) -> DpFedAvg:
        """The planned q where none was given (:func:`fedvote.methods.cohort.planned_sampling_rate`)."""
        if self.sampling_rate_rule != "paper" or self.num_agents is None:
            return self
        rate = planned_sampling_rate(
            self.num_agents, lambda q: calibrate(dataclasses.replace(self, sampling_rate=q))
        )
        return dataclasses.replace(self, sampling_rate=rate, sampling_rate_rule="planned")

    def discrete(self) -> bool:
        """Whether the noise is the distributed discrete Gaussian (``--secure-noise``, σ > 0)."""
        return self.secure_noise and self.sigma > 0

    def with_public(self, public: PublicMetadata) -> DpFedAvg:
        """The model (:meth:`GradientMethod.with_public`); with ``--secure-noise`` d (its floats) and N."""
        planned = super().with_public(public)
        assert isinstance(planned, DpFedAvg)
        if not planned.secure_noise:
            return planned
        model = build_model(planned.model, tuple(public.example_shape), public.num_classes)
        return dataclasses.replace(planned, model_floats=int(flat_parameters(model).shape[0]),
                                   num_agents=planned.num_agents or public.num_agents)

    def discrete_plan(self) -> discrete_sum.DiscretePlan:
        """γ, B, σ_l², t, d and the largest value sent, from public values (``docs/privacy.md``)."""
        if self.model_floats is None or self.num_agents is None:
            raise ConfigError("secure_noise", "the discrete shares need d and N (planned by with_public)")
        return discrete_sum.plan_discrete_sum(
            self.sigma, self.clip_norm, self.model_floats, self.responders(self.num_agents)
        )

    def count_std(self, num_agents: int) -> float:
        """σ_b of the adaptive clip's count (``clip_count_stddev``, or the default from q·N and z)."""
        if self.clip_count_stddev is not None:
            return self.clip_count_stddev
        if self.sigma == 0:
            return 0.0
        return adaptive_clipping.default_count_std(self.sigma, self.sampling_rate * num_agents)

    def update_multiplier(self, num_agents: int) -> float:
        """The multiplier of the updates' noise: z (fixed clip), σ_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2) (adaptive)."""
        if self.clipping != "adaptive" or self.sigma == 0:
            return self.sigma
        return adaptive_clipping.update_noise_multiplier(self.sigma, self.count_std(num_agents))

    def clip_step(self, num_agents: int) -> float:
        """η: the clip's geometric step, η_C scaled to the count's noise (adaptive_clipping.clip_step)."""
        return adaptive_clipping.clip_step(
            self.clip_learning_rate, self.count_std(num_agents), self.sampling_rate * num_agents
        )

    def current_clip(self) -> float:
        """C_t: S, or this run's latest adaptive clip."""
        return self._history.clips[-1] if self._history.clips else self.clip_norm

    def _largest_clip(self, num_agents: int) -> float:
        """The largest C whose stacked release (and 40σ of its share) the fixed-point range holds."""
        multiplier = self.update_multiplier(num_agents)
        ratio = multiplier / (2.0 * self.count_std(num_agents)) if self.sigma > 0 else 0.5
        return FixedPoint().bound / (math.sqrt(1.0 + ratio**2) + _SHARE_TAIL_SIGMAS * multiplier)

    def run(
        self,
        server: ServerData,
        transport: Transport,
        ledger: PrivacyLedger,
        progress: Progress = NO_PROGRESS,
    ) -> MethodOutcome:
        """The gradient loop; with an adaptive clip, on a copy holding this run's own clip history."""
        if self.discrete() and (self.model_floats is None or self.num_agents != transport.num_agents):
            d = int(flat_parameters(self.initial_model(server)).shape[0])  # as with_public plans it
            return dataclasses.replace(self, model_floats=d, num_agents=transport.num_agents).run(
                server, transport, ledger, progress
            )
        if self.clipping != "adaptive":
            return super().run(server, transport, ledger, progress)
        method = dataclasses.replace(self)  # a fresh _ClipHistory
        method._history.clips.append(self.clip_norm)
        return GradientMethod.run(method, server, transport, ledger, progress)

    def planned_events(self) -> LevelEvents:
        """All T rounds, as :func:`fedvote.privacy.events.dp_fedavg_events` states them.

        With an adaptive clip the same events: the update noise σ_Δ and the count's σ_b make
        one Gaussian of multiplier z = σ (:mod:`fedvote.privacy.adaptive_clipping`).
        """
        return self._events(self.rounds)

    def round_events(self) -> LevelEvents:
        """One round's release."""
        return self._events(1)

    def _events(self, rounds: int) -> LevelEvents:
        if self.discrete():
            plan = self.discrete_plan()
            return dp_fedavg_discrete_events(
                self.sampling_rate, plan.share_variance, plan.shares, plan.norm_bound, plan.dimension, rounds
            )
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
        if self.discrete():
            plan = self.discrete_plan()
            if plan.share_variance > MAX_EXACT_SIGMA_SQUARED:
                raise ConfigError(
                    "sigma",
                    f"each discrete share would need σ_l² = {plan.share_variance}, beyond the exact "
                    f"sampler's {MAX_EXACT_SIGMA_SQUARED} (lower sigma or raise --min-responders)",
                )
            if transport.num_agents * plan.largest_value >= 2**53:
                raise ConfigError("secure_sum", f"{transport.num_agents} agents' integer sum could overflow")

    def responders(self, num_agents: int) -> int:
        """t: the honest agents whose shares must carry the noise σS (``--min-responders``, default N)."""
        return num_agents if self.min_responders is None else self.min_responders

    def noise_share(self, sampled: int, num_agents: int) -> float:
        """The std each contributing agent adds: σS/√t (distributed), σS/√m_t (unmasked), else 0.

        Distributed: any t honest shares add up to variance σ²S², the noise the events
        assume, as :func:`fedvote.aggregation.voting.noise_share_std` does for votes.
        """
        if self.noise == "distributed":
            total = self.update_multiplier(num_agents) * self.current_clip()
            return noise_share_std(total, self.responders(num_agents))
        if self.noise == "distributed-unmasked" and sampled > 0:
            return self.sigma * self.clip_norm / math.sqrt(sampled)
        return 0.0

    def round_training(
        self, round_index: int, learning_rate: float, sampled: int, num_agents: int
    ) -> LocalTraining:
        """E SGD iterations, update clipped to S (or C_t), plus the agent's noise share (:meth:`noise_share`).

        Adaptive: a :class:`~fedvote.agents.local_updates.ClipCountTraining`, the clip bit scaled
        by σ_Δ·C_t/σ_b so that the one share covers it.
        """
        settings: dict[str, object] = dict(
            model=self.model,
            steps=self.local_steps,
            learning_rate=learning_rate,
            batch_size=self.batch_size,
            round_index=round_index,
            clip_norm=self.current_clip(),
            noise_std=self.noise_share(sampled, num_agents),
            min_responders=self.responders(num_agents) if self.noise == "distributed" else None,
        )
        if self.discrete():
            plan = self.discrete_plan()
            settings["noise_std"] = 0.0
            return DiscreteTraining(
                **settings,  # type: ignore[arg-type]
                granularity=plan.granularity,
                norm_bound=plan.norm_bound,
                share_variance=plan.share_variance,
                largest_value=plan.largest_value,
            )
        if self.clipping != "adaptive":
            return LocalTraining(**settings)  # type: ignore[arg-type]
        return ClipCountTraining(**settings, count_scale=self._count_scale(num_agents))  # type: ignore[arg-type]

    def _count_scale(self, num_agents: int) -> float:
        """σ_Δ·C_t/σ_b (non-private: C_t): the factor on the centred bit (adaptive_clipping.count_scale)."""
        if self.sigma == 0:
            return self.current_clip()
        return adaptive_clipping.count_scale(
            self.update_multiplier(num_agents), self.current_clip(), self.count_std(num_agents)
        )

    def _observe_count(self, total: np.ndarray, num_agents: int, scale: float) -> np.ndarray:
        """Split the (d + 1,) noised sum: move the clip by its count (Andrew et al.); the (d,) updates."""
        noisy_count = float(total[-1]) / scale  # Σ (b_i − ½) + N(0, σ_b²)
        expected = self.sampling_rate * num_agents
        fraction = adaptive_clipping.estimated_fraction(noisy_count, expected)
        clip = adaptive_clipping.next_clip(
            self.current_clip(), fraction, self.clip_quantile, self.clip_step(num_agents)
        )
        low, high = self.clip_norm * _MIN_CLIP_FRACTION, self._largest_clip(num_agents)
        self._history.fractions.append(fraction)
        self._history.clips.append(min(max(clip, low), high))  # public clamps: post-processing
        return total[:-1]

    def round_step(
        self,
        theta: np.ndarray,
        chosen: np.ndarray,
        training: LocalTraining,
        transport: Transport,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """Distributed noise: θ + (secure sum of all N agents' releases)/(qN); else as Algorithms 3/5.

        Adaptive clip: the sum's last coordinate is the noisy count, which moves the clip.
        """
        n = transport.num_agents
        if self.noise != "distributed" and self.clipping != "adaptive":
            return super().round_step(theta, chosen, training, transport, rng)
        if self.noise == "distributed":
            assert isinstance(transport, capabilities.SecureUpdateSum)  # required by requirements()
            total = transport.secure_update_sum(theta, chosen, training)  # (d,) or (d + 1,): the sum only
        else:
            assert isinstance(transport, capabilities.LocalUpdates)  # check_capabilities refused any other
            total = self._noised_sum(transport.local_updates(theta, chosen, training), training, rng, n)
        if isinstance(training, DiscreteTraining):
            total = total * training.granularity  # the integer sum back to update units
        if isinstance(training, ClipCountTraining):
            clip = self.current_clip()  # C_t, the clip this round's training used
            total = self._observe_count(total, n, training.count_scale)
            total = total * (self.clip_norm / clip)  # the step in units of S: see the docstring
        return theta + total / (self.sampling_rate * n)

    def aggregate(
        self, theta: np.ndarray, received: LocalUpdates, rng: np.random.Generator, num_agents: int
    ) -> np.ndarray:
        """θ + (Σ Δ̃_i + noise) / (q·N); the server adds the noise unless the agents did."""
        training = LocalTraining(model=self.model, steps=1, learning_rate=1.0, clip_norm=self.clip_norm)
        total = self._noised_sum(received, training, rng, num_agents)
        return theta + total / (self.sampling_rate * num_agents)

    def _noised_sum(
        self, received: LocalUpdates, training: LocalTraining, rng: np.random.Generator, num_agents: int
    ) -> np.ndarray:
        """Σ Δ̃_i (width,), plus N(0, (σ·C)²) by the server unless the agents added it (m_t = 0: zeros).

        With the adaptive clip's count (width d + 1) the d update coordinates take the fixed clip's
        draws from ``rng`` and the count's from the run's separate count stream, so that the
        loop's generator (the sampling coins too) advances as in the fixed-clip run.
        """
        total = received.updates.astype(np.float64).sum(axis=0)  # (width,); zeros when m_t = 0
        agents_added_noise = self.noise != "server" and received.updates.shape[0] > 0
        if self.sigma > 0 and not agents_added_noise:
            assert training.clip_norm is not None
            std = self.update_multiplier(num_agents) * training.clip_norm
            count = 1 if isinstance(training, ClipCountTraining) else 0
            head = total[: total.shape[0] - count]  # a view: the updates' coordinates
            if self.secure_noise:  # rng is CSPRNG-seeded (GradientMethod.run)
                head += secure_gaussian(rng, std, head.shape)
            else:
                head += rng.normal(0.0, std, size=head.shape)
            if count:
                total[-count:] += self._server_count_noise(std, count)
        return total

    def _server_count_noise(self, std: float, count: int) -> np.ndarray:
        """N(0, std²) on the count's ``count`` coordinates from the run's count stream, (count,)."""
        if self._history.count_rng is None:  # made on first use; run() starts every run a fresh history
            self._history.count_rng = (
                csprng_seeded_generator() if self.secure_noise
                else privacy_generator(self.noise_seed, _SERVER_COUNT_TAG)
            )
        if self.secure_noise:
            return secure_gaussian(self._history.count_rng, std, (count,))
        return self._history.count_rng.normal(0.0, std, size=count)

    def _reported_share(self, num_agents: int) -> float | None:
        """Each agent's noise std: σS/√t (distributed), None (unmasked: σS/√m_t varies), 0 (server)."""
        if self.noise == "distributed-unmasked" or self.clipping == "adaptive" or self.discrete():
            return None
        return self.noise_share(0, num_agents)

    def _adaptive_details(self, num_agents: int) -> dict[str, object]:
        """The adaptive clip's values: σ_b, σ_Δ, γ, η_C, the step η used and the clips C_0..C_T (public)."""
        if self.clipping != "adaptive":
            return {"clipping": "fixed"}
        return {
            "clipping": "adaptive",
            "clip_quantile": self.clip_quantile,
            "clip_learning_rate": self.clip_learning_rate,
            "clip_step": self.clip_step(num_agents),
            "clip_count_stddev": self.count_std(num_agents),
            "update_noise_multiplier": self.update_multiplier(num_agents),
            "clip_norms": list(self._history.clips),
            "clip_fractions": list(self._history.fractions),
            "noise_share_note": "each share is σ_Δ·C_t/√t, C_t the round's clip (clip_norms)",
        }

    def details(self, transport: Transport) -> dict[str, object]:
        """The values the accounting used (q, σ, S, T), the noise placement and whom ε holds against."""
        return {
            "noise_multiplier": self.sigma,
            "clip_norm": self.clip_norm,
            "noise": self.noise,
            "noise_share_std": self._reported_share(transport.num_agents),
            "min_responders": self.responders(transport.num_agents) if self.noise == "distributed" else None,
            "update_denominator": self.sampling_rate * transport.num_agents,
            "sampling_rate_rule": self.sampling_rate_rule,
            "epsilon_holds_against": HOLDS_AGAINST[self.noise],
            **self._adaptive_details(transport.num_agents),
            **self._discrete_details(),
        }

    def _discrete_details(self) -> dict[str, object]:
        """The discrete path's public values (γ, B, σ_l², t, d, the largest value sent)."""
        if not self.discrete():
            return {}
        plan = self.discrete_plan()
        return {"discrete_noise": dataclasses.asdict(plan)}
