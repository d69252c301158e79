"""SecAgg+ settings for noisy vote histograms: clipping range, quantisation, threshold.

Flower's SecAgg+ (``SecAggPlusWorkflow`` / ``secaggplus_mod``) sums integer vectors. Each
agent clips its (already noised) vote histogram to [−c, c], maps it onto the integer grid
{0, …, T} with stochastic rounding — step Δ = 2c/T — and masks it; the server unmasks
only the sum modulo M = 2³². This module chooses c, T and the Shamir threshold for vote
histograms and bounds what clipping and rounding cost (``docs/privacy.md``, "Secure
aggregation on Flower"). Pure functions: no Flower import.

* **Clipping** never happens except with probability p ≤ N·K·2·Φ̄(k), K the number of
  vote coordinates per agent (queries × classes): a vote coordinate lies in [0, 1] and
  its noise share has std s = σ/√t, so c = 1 + k·s leaves k standard deviations of room
  on either side. A mechanism that equals the Gaussian one except on an event of
  probability ≤ p is (ε, δ + (1 + e^ε)·p)-DP when the Gaussian one is (ε, δ)-DP.
* **Quantisation** happens after each agent's noise. Given the noisy sum S, the released
  value depends on the agents' noisy votes only through their positions modulo Δ; with
  Gaussian noise of std s ≫ Δ those are uniform up to a factor (1 ± η) whatever the
  data (the lattice smoothing argument), so each released coordinate costs at most
  ln((1 + η)/(1 − η)) of ε on top of the Gaussian mechanism's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.stats import norm

from fedvote.errors import ConfigError

MODULUS_RANGE = 2**32  # Flower's default modulus M; SecAgg+ masks live in Z_M
# The vote of one agent on one query has every coordinate in [0, VOTE_BOUND]: a one-hot
# vote (PATE-FL) or the mean of k one-hot labels (Private-kNN-FL).
VOTE_BOUND = 1.0
DEFAULT_CLIP_SIGMAS = 20.0


@dataclass(frozen=True)
class SecAggSettings:
    """What a vote round gives Flower's ``SecAggPlusWorkflow``, and what it costs.

    Parameters
    ----------
    clipping_range : float
        c: every coordinate of an agent's noisy vote is clipped to [−c, c].
    quantization_range : int
        T: [−c, c] is mapped onto the integers {0, …, T}.
    modulus_range : int
        M = 2³²: the sum of up to N values in {0, …, T} must stay below M.
    reconstruction_threshold : int
        Shamir threshold: the server can unmask a sum only while at least this many
        agents take part, so a round with fewer than t responders reveals nothing.
    noise_std : float
        s = σ/√t, one agent's noise share.
    num_agents : int
        N, the number of agents that may take part in a round.
    clip_sigmas : float
        k: c = 1 + k·s.

    """

    clipping_range: float
    quantization_range: int
    modulus_range: int
    reconstruction_threshold: int
    noise_std: float
    num_agents: int
    clip_sigmas: float

    @property
    def step(self) -> float:
        """Δ = 2c/T, the quantisation step of one agent's value."""
        return 2.0 * self.clipping_range / self.quantization_range

    def sum_error_bound(self, responders: int) -> float:
        """Largest error of one coordinate of the unmasked sum: each agent rounds by < Δ."""
        return responders * self.step

    def clip_probability(self, coordinates: int) -> float:
        """Probability that any agent clips any of ``coordinates`` vote coordinates (union bound).

        0 without noise: votes lie in [0, 1] ⊂ [−c, c].
        """
        if self.noise_std == 0.0 or coordinates == 0:
            return 0.0
        log_p = math.log(2.0 * self.num_agents * coordinates) + float(norm.logsf(self.clip_sigmas))
        return math.exp(min(log_p, 0.0))

    def delta_slack(self, coordinates: int, epsilon: float) -> float:
        """δ added by clipping: (1 + e^ε)·p (p from :meth:`clip_probability`)."""
        p = self.clip_probability(coordinates)
        if p == 0.0:
            return 0.0
        if not epsilon < 700.0:  # e^ε overflows (or ε is infinite): no useful bound
            return math.inf
        return p * (1.0 + math.exp(epsilon))

    def rounding_eta(self) -> float:
        """η: how far from uniform the agents' positions modulo Δ can be, given the sum.

        Poisson summation for the periodised Gaussian of the honest agents' noisy values
        given their sum (covariance s²(I − 11ᵀ/n), smallest eigenvalue s²/n, n ≤ N):
        |density·Δⁿ⁻¹ − 1| ≤ (1 + 2e^(−a)/(1 − e^(−a)))ⁿ⁻¹ − 1 with a = 2π²s²/(nΔ²).
        Infinite without noise (nothing to smooth).
        """
        if self.noise_std == 0.0:
            return math.inf
        n = max(self.num_agents, 2)
        a = 2.0 * math.pi**2 * self.noise_std**2 / (n * self.step**2)
        per_axis = 2.0 * math.exp(-a) / -math.expm1(-a) if a < 745 else 0.0
        return math.expm1((n - 1) * math.log1p(per_axis))

    def epsilon_slack(self, coordinates: int) -> float:
        """ε added by rounding after the noise over ``coordinates`` released coordinates."""
        eta = self.rounding_eta()
        if coordinates == 0:
            return 0.0
        if not eta < 1.0:
            return math.inf
        return coordinates * (math.log1p(eta) - math.log1p(-eta))

    def as_dict(self) -> dict[str, float | int]:
        """JSON-ready settings (the ``secagg`` entry of a deployment's result)."""
        return {
            "clipping_range": self.clipping_range,
            "quantization_range": self.quantization_range,
            "modulus_range": self.modulus_range,
            "reconstruction_threshold": self.reconstruction_threshold,
            "noise_share_std": self.noise_std,
            "clip_sigmas": self.clip_sigmas,
            "quantization_step": self.step,
        }


def quantization_range_for(num_agents: int) -> int:
    """T = 2^(32 − ⌈log₂(N + 1)⌉), at most 2³⁰, for N agents.

    N values in {0, …, T} (and the N unit weights, each T) then sum below M = 2³², and
    one value fits Flower's int32 rounding.
    """
    if num_agents < 1:
        raise ConfigError("num_agents", f"must be at least 1, got {num_agents}")
    bits = 32 - math.ceil(math.log2(num_agents + 1))
    return 2 ** min(bits, 30)


def secagg_settings(
    noise_std: float,
    num_agents: int,
    min_responders: int,
    *,
    clip_sigmas: float = DEFAULT_CLIP_SIGMAS,
) -> SecAggSettings:
    """SecAgg+ settings for vote histograms with noise share ``noise_std`` = σ/√t.

    Parameters
    ----------
    noise_std : float
        s, each agent's noise share (0: the non-private reference).
    num_agents : int
        N; SecAgg+ needs at least 2.
    min_responders : int
        t; the Shamir threshold is max(t, 2) (at most N), so no sum of fewer than t
        agents' votes is ever unmasked.
    clip_sigmas : float
        k in c = 1 + k·s (default 20: p ≤ N·K·5.5e-89).

    """
    if num_agents < 2:
        raise ConfigError("agents", f"SecAgg+ needs at least 2 agents, got {num_agents}")
    if not 1 <= min_responders <= num_agents:
        raise ConfigError("min_responders", f"must lie in [1, {num_agents}], got {min_responders}")
    if not noise_std >= 0.0:
        raise ConfigError("noise_std", f"must be >= 0, got {noise_std}")
    if not clip_sigmas > 0.0:
        raise ConfigError("clip_sigmas", f"must be > 0, got {clip_sigmas}")
    return SecAggSettings(
        clipping_range=VOTE_BOUND + clip_sigmas * noise_std,
        quantization_range=quantization_range_for(num_agents),
        modulus_range=MODULUS_RANGE,
        reconstruction_threshold=min(max(min_responders, 2), num_agents),
        noise_std=float(noise_std),
        num_agents=num_agents,
        clip_sigmas=float(clip_sigmas),
    )
