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

Together: when the Gaussian mechanism is (ε, δ)-DP, the deployed one is
(ε + ε_q, e^(ε_q)·δ + (1 + e^(ε + ε_q))·p)-DP, ε_q the rounding's ε (:meth:`deployed`).
That is the headline of a Flower run (:func:`secagg_privacy`); clip settings whose
clipping term exceeds 1 % of δ are refused before the run (:meth:`check_clip_slack`).

**Secure noise** (``integer``, the default of ``fedvote deploy``): each agent's noisy vote
is an integer (a one-hot vote plus its exact discrete Gaussian share N_Z(0, s²)), so c is
an integer ⌈1 + k·s⌉ and T = 2c: the grid step is Δ = 1 and Flower's quantisation maps
every integer to itself (its stochastic rounding of an integer draws no coin that
changes it). Nothing is rounded: ε_q = 0 exactly, and the unmasked sum is the exact
integer sum. Clipping is bounded by the discrete Gaussian's sub-Gaussian tail
(P[Z ≥ x] ≤ e^(−x²/(2s²)), CKS20), p ≤ N·K·2e^(−k²/2). No wrap: N values of at most
2c (and the N unit weights, T each) must sum below M = 2³², so N·2c < 2³² is required
(:func:`secagg_settings` refuses larger σ·N).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from scipy.stats import norm

from fedvote.errors import ConfigError
from fedvote.privacy.accountant import epsilon_bound
from fedvote.privacy.events import LEVELS, LevelEvents
from fedvote.results import LevelPrivacy, PrivacyReport

MODULUS_RANGE = 2**32  # Flower's default modulus M; SecAgg+ masks live in Z_M
# The vote of one agent on one query has every coordinate in [0, VOTE_BOUND]: a one-hot
# vote (PATE-FL) or the mean of k one-hot labels (Private-kNN-FL).
VOTE_BOUND = 1.0
DEFAULT_CLIP_SIGMAS = 20.0
# The most that clipping may add to δ, as a share of δ: settings that could add more are
# refused before anything is trained, released or charged.
MAX_CLIP_SLACK_SHARE = 0.01
DISCRETE_LABEL = (
    "the discrete Gaussian mechanism on exact integer vote sums (CKS20; KLS21 for t > 1 shares); "
    "SecAgg+ sums those integers exactly (no rounding: epsilon_slack 0), so the headline differs "
    "only by clipping's delta_slack"
)
GAUSSIAN_LABEL = (
    "the Gaussian mechanism on exact vote sums, before SecAgg+ clips and quantises them: not the "
    "deployment's guarantee, which is privacy.<level>.epsilon (ε + epsilon_slack) at privacy.delta "
    "(δ + delta_slack)"
)


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
    integer : bool
        Secure noise: integer votes with discrete Gaussian shares, c an integer, T = 2c
        (step 1), nothing rounded. Default False (real-valued Gaussian shares).

    """

    clipping_range: float
    quantization_range: int
    modulus_range: int
    reconstruction_threshold: int
    noise_std: float
    num_agents: int
    clip_sigmas: float
    integer: bool = False

    @property
    def step(self) -> float:
        """Δ = 2c/T, the quantisation step of one agent's value."""
        return 2.0 * self.clipping_range / self.quantization_range

    def sum_error_bound(self, responders: int) -> float:
        """Largest error of one coordinate of the unmasked sum: each agent rounds by < Δ (0: integers)."""
        if self.integer:
            return 0.0
        return responders * self.step

    def clip_probability(self, coordinates: int) -> float:
        """Probability that any agent clips any of ``coordinates`` vote coordinates (union bound).

        0 without noise: votes lie in [0, 1] ⊂ [−c, c].
        """
        if self.noise_std == 0.0 or coordinates == 0:
            return 0.0
        log_p = math.log(2.0 * self.num_agents * coordinates) + self._log_tail(self.clip_sigmas)
        return math.exp(min(log_p, 0.0))

    def _log_tail(self, k: float) -> float:
        """The log of P[share > k·s]: log Φ̄(k), or the discrete Gaussian's sub-Gaussian −k²/2 (CKS20)."""
        return -0.5 * k * k if self.integer else float(norm.logsf(k))

    def clip_slack(self, coordinates: int, epsilon: float) -> float:
        """δ added by clipping: (1 + e^(ε + ε_q))·p, ε the Gaussian mechanism's ε.

        ε_q (:meth:`epsilon_slack`) is the rounding's ε: clipping is applied to the
        quantised mechanism, which is (ε + ε_q)-DP in its ε part. 0 when nothing can be
        clipped (p = 0: no noise).
        """
        p = self.clip_probability(coordinates)
        if p == 0.0:
            return 0.0
        total = epsilon + self.epsilon_slack(coordinates)
        if not total < 700.0:  # e^ε overflows (or ε is infinite): no useful bound
            return math.inf
        return p * (1.0 + math.exp(total))

    def delta_slack(self, coordinates: int, epsilon: float, delta: float) -> float:
        """Everything SecAgg+ adds to a Gaussian (ε, δ)'s δ: (e^(ε_q) − 1)·δ + :meth:`clip_slack`.

        Rounding multiplies the conditional law of the output given the noisy sum by at
        most e^(ε_q), δ included; clipping then adds (1 + e^(ε + ε_q))·p.
        """
        clip = self.clip_slack(coordinates, epsilon)
        rounding = self.epsilon_slack(coordinates)
        if rounding == 0.0:
            return clip
        return math.expm1(rounding) * delta + clip

    def deployed(self, coordinates: int, epsilon: float, delta: float) -> tuple[float, float]:
        """(ε, δ) of the deployed mechanism when the Gaussian one is (ε, δ)-DP.

        (ε + ε_q, δ + :meth:`delta_slack`), over ``coordinates`` released coordinates per agent.
        """
        epsilon_slack = self.epsilon_slack(coordinates)
        return epsilon + epsilon_slack, delta + self.delta_slack(coordinates, epsilon, delta)

    def min_clip_sigmas(self, coordinates: int, epsilon: float, delta: float) -> float:
        """The smallest k whose clipping slack stays within :data:`MAX_CLIP_SLACK_SHARE` of δ."""
        factor = 2.0 * self.num_agents * max(coordinates, 1)
        total = epsilon + self.epsilon_slack(coordinates)
        if not total < 700.0:
            return math.inf
        allowed = MAX_CLIP_SLACK_SHARE * delta / (factor * (1.0 + math.exp(total)))
        if self.integer:  # 2NK·e^(−k²/2)·(1 + e^ε) ≤ 1 % of δ
            return math.sqrt(max(-2.0 * math.log(allowed), 0.0))
        return float(norm.isf(allowed))

    def check_clip_slack(self, coordinates: int, epsilon: float, delta: float) -> None:
        """Refuse a clipping range whose δ slack, at ``epsilon``, exceeds 1 % of ``delta``.

        Called before a run with its planned coordinates (queries × classes) and its
        planned ε: the slack only grows with both, so what the run releases stays within.
        """
        slack = self.clip_slack(coordinates, epsilon)
        if slack <= MAX_CLIP_SLACK_SHARE * delta:
            return
        needed = self.min_clip_sigmas(coordinates, epsilon, delta)
        advice = (
            f"use at least {math.ceil(needed * 100.0) / 100.0:g}"
            if math.isfinite(needed)
            else "no clipping range bounds it at this ε"
        )
        raise ConfigError(
            "clip_sigmas",
            f"{self.clip_sigmas:g} lets SecAgg+ clipping add {slack:.3g} to δ = {delta:g} "
            f"(ε = {epsilon:.4g}, {self.num_agents} agents x {coordinates} coordinates), more than "
            f"{MAX_CLIP_SLACK_SHARE:.0%} of δ; {advice}",
        )

    def rounding_eta(self) -> float:
        """η: how far from uniform the agents' positions modulo Δ can be, given the sum.

        Poisson summation for the periodised Gaussian of the honest agents' noisy values
        given their sum (covariance s²(I − 11ᵀ/n), smallest eigenvalue s²/n, n ≤ N):
        |density·Δⁿ⁻¹ − 1| ≤ (1 + 2e^(−a)/(1 − e^(−a)))ⁿ⁻¹ − 1 with a = 2π²s²/(nΔ²).
        Infinite without noise (nothing to smooth); 0 for integer votes (nothing is rounded).
        """
        if self.integer:
            return 0.0
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
            "integer": self.integer,
        }


def check_secagg_plan(
    planned: LevelEvents,
    *,
    queries: int,
    settings: SecAggSettings,
    num_classes: int,
    delta: float,
    accountant: str,
) -> None:
    """Refuse, before a Flower run trains, releases or charges anything, too tight a clip.

    ``planned`` are the run's planned releases (every query released) and ``queries``
    their number. The clipping slack grows with the coordinates each agent releases and
    with ε, so the check takes the most the run can reach: queries × classes coordinates
    at the larger level's planned ε (the ε the ledger would report, at ``delta`` by
    ``accountant``). A non-private plan (no finite ε) claims nothing and is not checked.
    """
    epsilons = [epsilon_bound(planned.at(level), delta, accountant) for level in LEVELS]
    finite = [e for e in epsilons if math.isfinite(e)]
    if finite:
        settings.check_clip_slack(queries * num_classes, max(finite), delta)


def secagg_privacy(
    report: PrivacyReport, settings: SecAggSettings, coordinates: int
) -> tuple[PrivacyReport, dict[str, Any]]:
    """The privacy a Flower run states: the Gaussian mechanism's, plus SecAgg+'s slack.

    ``report`` is the Gaussian mechanism's (ε at both levels, at δ), computed from the
    ledger as for an in-process run; ``coordinates`` is what each agent released
    (released queries × classes). Returns the headline report — every finite ε raised
    by ε_q, and δ raised by the slack at the larger ε, so that both levels hold at the one
    reported δ — and the ``flower.secagg`` entry: the settings, p, both slacks and the
    Gaussian-only figures, labelled. A run with no finite ε claims nothing to add to.
    """
    gaussian = {"agent": report.agent.epsilon, "instance": report.instance.epsilon}
    finite = [e for e in gaussian.values() if e is not None and math.isfinite(e)]
    epsilon_slack = settings.epsilon_slack(coordinates)
    delta_slack = settings.delta_slack(coordinates, max(finite), report.delta) if finite else 0.0
    entry: dict[str, Any] = {
        **settings.as_dict(),
        "coordinates": coordinates,
        "clip_probability": settings.clip_probability(coordinates),
        "epsilon_slack": epsilon_slack if finite else None,
        "delta_slack": delta_slack,
        "sum_error_bound": settings.sum_error_bound(settings.num_agents),
        "gaussian_mechanism": {
            "agent_epsilon": gaussian["agent"],
            "instance_epsilon": gaussian["instance"],
            "delta": report.delta,
            "label": DISCRETE_LABEL if settings.integer else GAUSSIAN_LABEL,
        },
    }
    if not finite:
        return report, entry

    def raised(level: LevelPrivacy) -> LevelPrivacy:
        if level.epsilon is None:
            return level
        return dataclasses.replace(level, epsilon=level.epsilon + epsilon_slack)

    headline = dataclasses.replace(
        report,
        delta=report.delta + delta_slack,
        agent=raised(report.agent),
        instance=raised(report.instance),
    )
    return headline, entry


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
    integer: bool = False,
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
    integer : bool
        Secure noise: c = ⌈1 + k·s⌉, T = 2c (step 1: integers pass unrounded), refused
        when N·2c ≥ 2³² (the sum could wrap the modulus).

    """
    if num_agents < 2:
        raise ConfigError("agents", f"SecAgg+ needs at least 2 agents, got {num_agents}")
    if not 1 <= min_responders <= num_agents:
        raise ConfigError("min_responders", f"must lie in [1, {num_agents}], got {min_responders}")
    if not noise_std >= 0.0:
        raise ConfigError("noise_std", f"must be >= 0, got {noise_std}")
    if not (math.isfinite(clip_sigmas) and clip_sigmas > 0.0):
        raise ConfigError("clip_sigmas", f"must be a finite number > 0, got {clip_sigmas}")
    clipping_range = VOTE_BOUND + clip_sigmas * noise_std
    quantization_range = quantization_range_for(num_agents)
    if integer:  # an integer clip and a grid of step 1: integers pass unrounded
        clip = math.ceil(clipping_range)
        if num_agents * 2 * clip >= MODULUS_RANGE:
            raise ConfigError(
                "sigma",
                f"integer vote sums of {num_agents} agents in [-{clip}, {clip}] could wrap SecAgg+'s "
                f"modulus 2^32 (N·2c ≥ 2^32): lower σ or --clip-sigmas",
            )
        clipping_range, quantization_range = float(clip), 2 * clip
    return SecAggSettings(
        clipping_range=clipping_range,
        quantization_range=quantization_range,
        modulus_range=MODULUS_RANGE,
        reconstruction_threshold=min(max(min_responders, 2), num_agents),
        noise_std=float(noise_std),
        num_agents=num_agents,
        clip_sigmas=float(clip_sigmas),
        integer=integer,
    )
