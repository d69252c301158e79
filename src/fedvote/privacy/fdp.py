"""Gaussian differential privacy (f-DP) for PriFedSync (``federated-f-dp-prifedsync.txt``).

* Trade-off function G_μ(α) = Φ(Φ⁻¹(1 − α) − μ) (Dong, Roth & Su 2019; PriFedSync Def. 3.2).
* μ-GDP composition: √(Σ μᵢ²) (Lemma 3.4).
* μ-GDP ↔ (ε, δ), exact: δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) (Dong et al. Cor. 2.13,
  the same closed form as Balle & Wang 2018; computed in log space in
  :mod:`fedvote.privacy.accountant`).
* Client subsampling, Lemma 3.8: g_p = max(f, 1 − α − p²).
* The CLT of Theorem 2 for local noisy SGD (Algorithm 2, batch B of n records, noise
  N(0, 4C²σ²), K local steps per round, R rounds): C_{B/n}(G_{1/σ})^{⊗KR} → G_μ with
  μ = √2·c·√(e^{σ⁻²}Φ(1.5/σ) + 3Φ(−0.5/σ) − 2), c = (B/n)·√(KR) (Bu et al. 2020).
* Weak federated f-DP: G_μ; strong federated f-DP: G_{√(m−1)·μ} (Theorem 2).

Adjacency: replace-one record of one client (PriFedSync's S'ʲ). The CLT is asymptotic
(KR → ∞ with (B/n)√(KR) fixed), not a bound: fedvote reports it only as the paper's figure,
labelled so. What ``--method prifedsync`` reports, calibrates and charges is the proven PLD
bound of the DP-SGD it runs (Poisson batches, noise multiplier σ on C), described by
:func:`fedvote.privacy.events.prifedsync_events`. :func:`replace_one_dp_sgd_epsilon` is the
same kind of bound in the paper's parametrisation (noise N(0, 4C²σ²)), for ``fedvote account``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from dp_accounting import dp_event
from scipy import optimize, special

from fedvote.errors import ConfigError
from fedvote.privacy.accountant import epsilon_for, gaussian_delta, gaussian_epsilon, sqrt_count
from fedvote.privacy.events import ReplaceOneDpEvent, poisson_sampled


def gdp_tradeoff(mu: float, alpha: np.ndarray | float) -> np.ndarray:
    """G_μ(α) = Φ(Φ⁻¹(1 − α) − μ): the smallest type-II error at type-I error α."""
    if mu < 0:
        raise ConfigError("mu", f"must be >= 0, got {mu}")
    alpha = np.asarray(alpha, dtype=float)
    return np.asarray(special.ndtr(special.ndtri(1.0 - alpha) - mu))


def compose_gdp(*mus: float) -> float:
    """μ of the composition of μᵢ-GDP mechanisms: √(Σ μᵢ²) (Dong et al. 2019, Cor. 3.3)."""
    if any(m < 0 for m in mus):
        raise ConfigError("mu", "every μ must be >= 0")
    return math.sqrt(sum(m * m for m in mus))


def gdp_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of μ-GDP (exact)."""
    return gaussian_delta(mu, epsilon)


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest ε with δ(ε) ≤ ``delta`` under μ-GDP (exact; never under-reports)."""
    if not 0.0 < delta < 1.0:
        raise ConfigError("delta", f"must lie in (0, 1), got {delta}")
    return gaussian_epsilon(mu, delta)


def gdp_mu(epsilon: float, delta: float) -> float:
    """The largest μ whose μ-GDP implies (ε, δ)-DP (bisection on the exact δ(ε; μ))."""
    if epsilon < 0:
        raise ConfigError("epsilon", f"must be >= 0, got {epsilon}")
    if not 0.0 < delta < 1.0:
        raise ConfigError("delta", f"must lie in (0, 1), got {delta}")
    high = 1.0
    while gaussian_delta(high, epsilon) < delta:
        high *= 2.0
    with np.errstate(divide="ignore"):  # δ underflows to 0 for tiny μ: fine for the search
        mu = float(optimize.brentq(lambda m: gaussian_delta(m, epsilon) - delta, 0.0, high, xtol=1e-14))
    while mu > 0 and gaussian_delta(mu, epsilon) > delta:
        mu = math.nextafter(mu, 0.0) - 1e-12 * mu
    return max(mu, 0.0)


def subsampled_tradeoff(
    tradeoff: Callable[[np.ndarray], np.ndarray], p: float
) -> Callable[[np.ndarray], np.ndarray]:
    """Lemma 3.8 of PriFedSync: client sampling at rate p gives g_p(α) = max(f(α), 1 − α − p²)."""
    if not 0.0 <= p <= 1.0:
        raise ConfigError("sampling_rate", f"must lie in [0, 1], got {p}")

    def g(alpha: np.ndarray) -> np.ndarray:
        alpha = np.asarray(alpha, dtype=float)
        return np.asarray(np.maximum(tradeoff(alpha), 1.0 - alpha - p * p))

    return g


def clt_mu(sigma: float, sampling_rate: float, steps: int) -> float:
    """Theorem 2's CLT μ for ``steps`` = KR noisy-SGD steps at sampling rate B/n and noise σ.

    μ = √2·c·√(e^{σ⁻²}Φ(1.5/σ) + 3Φ(−0.5/σ) − 2), c = (B/n)·√steps; the bracket is
    evaluated in log space so that small σ does not overflow.
    """
    if not sigma > 0 or not math.isfinite(sigma):
        raise ConfigError("sigma", f"must be a finite number > 0, got {sigma}")
    if not 0.0 <= sampling_rate <= 1.0:
        raise ConfigError("sampling_rate", f"must lie in [0, 1], got {sampling_rate}")
    if steps < 0:
        raise ConfigError("steps", f"must be >= 0, got {steps}")
    c = sampling_rate * sqrt_count(steps)
    if c == 0:
        return 0.0
    if sigma < 1e-100:  # log μ ≥ σ⁻²/2 = 5e199: μ = ∞ (σ⁻² itself overflows below 1e-154)
        return math.inf
    if sigma >= 1.0:
        x = 1.0 / sigma
        log_bracket = 2.0 * math.log(x) + math.log(_theorem2_bracket_over_x_squared(x))
    else:
        log_bracket = _theorem2_log_bracket(sigma)
    log_mu = 0.5 * math.log(2.0) + math.log(c) + 0.5 * log_bracket
    return math.exp(log_mu) if log_mu < 709.0 else math.inf


def _theorem2_bracket_over_x_squared(x: float) -> float:
    """(e^{x²}Φ(1.5x) + 3Φ(−0.5x) − 2) / x² at x = 1/σ ≤ 1, free of cancellation.

    The bracket is expm1(x²)·Φ(1.5x) + [erf(1.5y) − 3·erf(0.5y)]/2 with y = x/√2. The
    erf difference is summed from its Maclaurin series, whose n = 0 terms cancel
    exactly; dividing by x² keeps σ up to 1e308 representable (the bracket is ≈ x²/2).
    """
    y = x / math.sqrt(2.0)
    leading = (math.expm1(x * x) / (x * x) if x > 1e-8 else 1.0) * float(special.ndtr(1.5 * x))
    # Σ_{n≥1} (−1)ⁿ y^{2n+1} (1.5^{2n+1} − 3·0.5^{2n+1}) / (n!(2n+1)) · (2/√π) / 2 / x²
    series, power, factorial = 0.0, y, 1.0  # power = y^{2n−1}
    for n in range(1, 40):
        factorial *= n
        coefficient = 1.5 ** (2 * n + 1) - 3.0 * 0.5 ** (2 * n + 1)
        series += (-1) ** n * power * coefficient / (factorial * (2 * n + 1))
        power *= y * y
    return leading + series / math.sqrt(math.pi) / 2.0


def _theorem2_log_bracket(sigma: float) -> float:
    """The log of the same bracket for σ < 1, in log space so that e^{σ⁻²} does not overflow."""
    log_first = sigma**-2 + float(special.log_ndtr(1.5 / sigma))
    rest = 2.0 - 3.0 * float(special.ndtr(-0.5 / sigma))  # in (0.5, 2): subtracted
    return log_first + math.log(-math.expm1(math.log(rest) - log_first))


def prifedsync_mu(sigma: float, batch_size: int, records: int, local_steps: int, rounds: int) -> float:
    """μ of one client under PriFedSync with Algorithm 2 (Theorem 2): c = (B/n)·√(K·R)."""
    for name, value in (("batch_size", batch_size), ("records", records), ("local_steps", local_steps)):
        if value < 1:
            raise ConfigError(name, f"must be >= 1, got {value}")
    if rounds < 0:
        raise ConfigError("rounds", f"must be >= 0, got {rounds}")
    if batch_size > records:
        raise ConfigError("batch_size", f"B = {batch_size} exceeds the client's {records} records")
    return clt_mu(sigma, batch_size / records, local_steps * rounds)


def federated_mu(mu: float, clients: int, strong: bool) -> float:
    """Weak federated f-DP: μ; strong (against the other m − 1 clients together): √(m−1)·μ.

    With one client there is no other to guard against: the strong μ is 0, also for an
    infinite μ (where √0·∞ would be NaN).
    """
    if clients < 1:
        raise ConfigError("clients", f"must be >= 1, got {clients}")
    if not strong:
        return mu
    return 0.0 if clients == 1 else sqrt_count(clients - 1) * mu


def replace_one_poisson_gaussian_epsilon(
    sampling_rate: float, noise_multiplier: float, steps: int, delta: float
) -> float:
    """PLD ε of ``steps`` Poisson-subsampled Gaussian rounds under **replace-one**.

    The unit's contribution (norm ≤ S) is replaced by another; the sum carries noise
    N(0, z²S²). dp-accounting's PLD REPLACE_ONE pair for this is
    (1−q)·N(0, z²) + q·N(−1, z²) vs (1−q)·N(0, z²) + q·N(1, z²). This is the one place
    fedvote uses REPLACE_ONE: only the PLD accountant supports it for Poisson sampling,
    and no event in :mod:`fedvote.privacy.events` carries it.
    """
    if not 0.0 < delta < 1.0:
        raise ConfigError("delta", f"must lie in (0, 1), got {delta}")
    if not noise_multiplier > 0:
        raise ConfigError("noise_multiplier", f"must be > 0, got {noise_multiplier}")
    if not 0.0 <= sampling_rate <= 1.0:
        raise ConfigError("sampling_rate", f"must lie in [0, 1], got {sampling_rate}")
    if steps < 0:
        raise ConfigError("steps", f"must be >= 0, got {steps}")
    if steps == 0 or sampling_rate == 0:
        return 0.0
    event = poisson_sampled(sampling_rate, dp_event.GaussianDpEvent(noise_multiplier))
    # dp-accounting's PLD under REPLACE_ONE, through epsilon_for: its discretisation stays in
    # memory, and a noise multiplier too small to account is refused in one line.
    return epsilon_for(ReplaceOneDpEvent(dp_event.SelfComposedDpEvent(event, steps)), delta, "pld")


def replace_one_dp_sgd_epsilon(sigma: float, sampling_rate: float, steps: int, delta: float) -> float:
    """PLD ε for ``steps`` of DP-SGD with Algorithm 2's noise N(0, 4C²σ²), replace-one record.

    A proven bound for **Poisson** batches at ``sampling_rate`` = B/n (noise multiplier
    over the clip norm C: z = 2σ), not for Algorithm 2's fixed-size batches. See
    :func:`replace_one_poisson_gaussian_epsilon`.
    """
    if not sigma > 0:
        raise ConfigError("sigma", f"must be > 0, got {sigma}")
    return replace_one_poisson_gaussian_epsilon(sampling_rate, 2.0 * sigma, steps, delta)
