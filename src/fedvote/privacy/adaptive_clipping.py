"""Adaptive clipping to a privately estimated quantile (Andrew et al., NeurIPS 2021): pure math.

Each round t every sampled agent i clips its update to the current norm C_t and also reports
one bit b_i = 1[‖Δ_i‖ ≤ C_t]. The server releases, besides the noised sum of clipped updates,
the noised count of the bits; its estimate of the fraction of agents at or below C_t is

    b̃_t = (Σ_i (b_i − ½) + N(0, σ_b²)) / (q·N) + ½

(the bits centred, so that one agent moves the sum by at most ½, and over the fixed
denominator q·N as the updates are), and the clip follows the geometric rule of the paper's
Algorithm 1 / eq. (2):

    C_{t+1} = C_t · exp(−η_C (b̃_t − γ)),

which moves C_t toward the γ-quantile of the update norms.

**Privacy** (the paper's Theorem 1 / §3.1). The pair (Σ clipped updates + N(0, σ_Δ²C_t²I),
Σ (b_i − ½) + N(0, σ_b²)) is one Gaussian mechanism on the stacked vector: dividing the first
part by σ_Δ·C_t and the second by σ_b gives unit noise and a per-agent contribution of squared
norm at most σ_Δ⁻² + (2σ_b)⁻². So the round is exactly a Gaussian mechanism of noise
multiplier z with

    z⁻² = σ_Δ⁻² + (2σ_b)⁻²,   i.e.   σ_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2),

and T rounds of it with Poisson sampling are the events of fixed-clip DP-FedAvg with
multiplier z (:func:`fedvote.privacy.events.dp_fedavg_events`), whatever C_t is (C_t is a
function of earlier releases only: adaptive composition). A replaced record moves one agent's
stacked vector between two points of that norm ball, as for the fixed clip.

fedvote sends the bit inside the same vector as the update: coordinate d+1 carries
(b_i − ½)·σ_Δ·C_t/σ_b, so that one noise std σ_Δ·C_t/√t per share covers both parts
(:func:`count_scale`); the server divides it back out.

**Defaults where the paper's count is infeasible** (few agents a round). The paper pairs
η_C = 0.2 with σ_b = m/20 (m the expected agents a round; its experiments m ≈ 100 with z ≲ 1):
then the count takes (2σ_b)⁻² = 100/m² ≈ 1 % of z⁻² ("a negligible amount of privacy budget"),
and the noise in the clip's log-step, η_C·σ_b/m, is 0.2/20 = 0.01 a round. With m = qN = 2.5
(digits' and MNIST's defaults) σ_b = m/20 would need more than all of z⁻². fedvote keeps both
of the paper's operating figures instead of its formulas:

* σ_b takes at most ``DEFAULT_COUNT_SHARE`` = 1 % of z⁻² (:func:`default_count_std`), so the
  updates' multiplier is σ_Δ = z/√0.99 (0.5 % more noise than the fixed clip);
* the clip's step is η_C·min(1, (m/20)/σ_b) (:func:`clip_step`): the paper's rate where its
  count noise is met, scaled down by the count's extra noise otherwise, so that the per-round
  noise of log C_t stays the paper's 0.01. A count that carries little per round moves the
  clip little per round.

Measured before (digits, ε 4, 50 agents, qN = 2.5, held-out seeds 10–17): with a tenth of z⁻²
for the count and η_C = 0.2 the clip climbed from S = 0.08 to the median norm (≈ 1, 12·S)
within 30 rounds; under the S/C_t step (``methods/dp_fedavg.py``) an update left under the clip
is shrunk by ‖Δ‖/C_t while the step's noise σ_Δ·S does not depend on C_t, so the climb only
lost signal (0.774 mean accuracy against the fixed clip's 0.819); with a count of 0.15 % of z⁻²
and η_C = 0.2 the clip random-walked (one seed 0.148).
"""

from __future__ import annotations

import math

# The paper's choice σ_b = (expected clients per round)/20 (Andrew et al. §3.1; its experiments).
PAPER_COUNT_DIVISOR = 20.0
# The largest share of the privacy "precision" z⁻² the count may take by default: the paper's
# σ_b = m/20 at its m ≈ 100 and z ≈ 1, (2σ_b)⁻² = 0.01·z⁻². With few agents per round the
# paper's σ_b would take more than all of it (σ_b < z/2 is infeasible); this caps it at the
# paper's own share.
DEFAULT_COUNT_SHARE = 0.01
# The clip's own step η_C at the paper's count noise σ_b = m/20 (the paper's experiments use 0.2).
DEFAULT_CLIP_LEARNING_RATE = 0.2


def _check_positive(name: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0, got {value}")


def combined_noise_multiplier(update_multiplier: float, count_std: float) -> float:
    """The one Gaussian the round is: z = (σ_Δ⁻² + (2σ_b)⁻²)^(−1/2) (Andrew et al. §3.1)."""
    _check_positive("update_multiplier", update_multiplier)
    _check_positive("count_std", count_std)
    return (update_multiplier**-2 + (2.0 * count_std) ** -2) ** -0.5


def update_noise_multiplier(noise_multiplier: float, count_std: float) -> float:
    """σ_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2): the updates' multiplier that leaves z for the pair.

    Needs σ_b > z/2 (else the count alone costs more than z allows): ``ValueError``.
    """
    _check_positive("noise_multiplier", noise_multiplier)
    _check_positive("count_std", count_std)
    rest = noise_multiplier**-2 - (2.0 * count_std) ** -2
    if not rest > 0:
        raise ValueError(
            f"the count's noise σ_b = {count_std:g} must exceed z/2 = {noise_multiplier / 2:g} "
            "(its share of the noise would be all of it)"
        )
    return rest**-0.5


def default_count_std(
    noise_multiplier: float, expected_agents: float, share: float = DEFAULT_COUNT_SHARE
) -> float:
    """σ_b: the paper's (expected agents per round)/20, raised so the count takes at most ``share`` of z⁻².

    (2σ_b)⁻² ≤ share·z⁻² ⇔ σ_b ≥ z/(2√share). Both inputs are public (q·N, the calibrated z).
    """
    _check_positive("noise_multiplier", noise_multiplier)
    _check_positive("expected_agents", expected_agents)
    if not 0 < share < 1:
        raise ValueError(f"share must lie in (0, 1), got {share}")
    return max(expected_agents / PAPER_COUNT_DIVISOR, noise_multiplier / (2.0 * math.sqrt(share)))


def clip_step(learning_rate: float, count_std: float, expected_agents: float) -> float:
    """η_C·min(1, (m/20)/σ_b): the clip's step, scaled down where the count is noisier than the paper's.

    The paper pairs η_C with σ_b = m/20 (m = q·N, public), so that the noise of the clip's
    log-step, η_C·σ_b/m, is η_C/20. A larger σ_b (forced by a small m) scales η_C down by the
    same factor and keeps that noise. ``count_std`` 0 (non-private: the exact count): η_C.
    """
    _check_positive("learning_rate", learning_rate)
    _check_positive("expected_agents", expected_agents)
    if count_std == 0:
        return learning_rate
    _check_positive("count_std", count_std)
    return learning_rate * min(1.0, expected_agents / PAPER_COUNT_DIVISOR / count_std)


def count_scale(update_multiplier: float, clip_norm: float, count_std: float) -> float:
    """The factor σ_Δ·C/σ_b on the centred bit, so that the update's noise std also covers the count."""
    _check_positive("update_multiplier", update_multiplier)
    _check_positive("clip_norm", clip_norm)
    _check_positive("count_std", count_std)
    return update_multiplier * clip_norm / count_std


def stacked_norm_bound(clip_norm: float, scale: float) -> float:
    """√(C² + (scale/2)²): the norm of an agent's stacked (update, scaled centred bit)."""
    return math.hypot(clip_norm, scale / 2.0)


def estimated_fraction(noisy_centred_count: float, expected_agents: float) -> float:
    """b̃ = (Σ (b_i − ½) + noise)/(q·N) + ½: the noisy fraction of updates with norm ≤ C."""
    _check_positive("expected_agents", expected_agents)
    return noisy_centred_count / expected_agents + 0.5


def next_clip(clip_norm: float, fraction: float, quantile: float, learning_rate: float) -> float:
    """C·exp(−η_C(b̃ − γ)): the geometric update of Andrew et al. (Algorithm 1)."""
    _check_positive("clip_norm", clip_norm)
    if not 0 < quantile < 1:
        raise ValueError(f"quantile must lie in (0, 1), got {quantile}")
    _check_positive("learning_rate", learning_rate)
    if not math.isfinite(fraction):
        raise ValueError(f"fraction must be finite, got {fraction}")
    return clip_norm * math.exp(-learning_rate * (fraction - quantile))
