"""The Gaussian noise with smooth sensitivity (GNSS) mechanism as a ``dp_accounting`` event.

A function f of the private data is released as f(x) + S(x)·N(0, σ²), where S is a
β-smooth upper bound on f's local sensitivity (LS_f(x) ≤ S(x) and S(x) ≤ e^β·S(x') for
neighbours x, x'). Papernot, Song, Mironov, Raghunathan, Talwar, Erlingsson (2018),
*Scalable private learning with PATE*, Theorem 23 (appendix C): for every order
1 < λ < 1/(2β) the release is (λ, ε(λ))-RDP with

    ε(λ) = λ·e^{2β}/σ² + (λβ − ½·log(1 − 2λβ))/(λ − 1),

and no bound is proven at the other orders (ε = ∞ there). fedvote releases the
data-dependent RDP of Confident-GNMax this way (:mod:`fedvote.privacy.smooth_sensitivity`)
and charges the release to the ledger as a :class:`SmoothSensitivityGaussianDpEvent`.

No PLD of this mechanism is known, so a composition that holds one is accounted by RDP
(:func:`fedvote.privacy.accountant.accountant_for`), as a distributed discrete Gaussian is.
"""

from __future__ import annotations

import math

import attr
import numpy as np
from dp_accounting import dp_event


@attr.s(frozen=True, slots=True, auto_attribs=True)
class SmoothSensitivityGaussianDpEvent(dp_event.DpEvent):
    """One GNSS release: f(x) + S(x)·N(0, ``noise_multiplier``²) with S ``beta``-smooth.

    Its RDP is :func:`gnss_rdp` (Theorem 23 of Papernot et al. 2018).
    """

    beta: float
    noise_multiplier: float


def gnss_rdp(beta: float, noise_multiplier: float, orders: np.ndarray) -> np.ndarray:
    """RDP of one GNSS release at each order, (orders,): Theorem 23 of Papernot et al. (2018).

    ε(λ) = λ·e^{2β}/σ² + (λβ − ½·log(1 − 2λβ))/(λ − 1) for 1 < λ < 1/(2β); ∞ elsewhere
    (the theorem says nothing there). ``beta`` must be > 0 (β = 0 is global sensitivity,
    a plain Gaussian mechanism, which ``GaussianDpEvent`` describes).
    """
    if not beta > 0 or not math.isfinite(beta):
        raise ValueError(f"beta must be a finite number > 0, got {beta}")
    if not noise_multiplier > 0 or not math.isfinite(noise_multiplier):
        raise ValueError(f"noise_multiplier must be a finite number > 0, got {noise_multiplier}")
    lam = np.asarray(orders, dtype=float)
    inside = (lam > 1.0) & (2.0 * lam * beta < 1.0)
    safe = np.where(inside, lam, 2.0)  # any order where the formula is finite
    with np.errstate(divide="ignore", invalid="ignore"):
        value = safe * math.exp(2.0 * beta) / noise_multiplier**2 + (
            safe * beta - 0.5 * np.log1p(-2.0 * safe * beta)
        ) / (safe - 1.0)
    return np.where(inside, value, np.inf)


def holds_gnss(event: dp_event.DpEvent) -> bool:
    """Whether ``event`` holds a :class:`SmoothSensitivityGaussianDpEvent` (RDP accounting only)."""
    if isinstance(event, SmoothSensitivityGaussianDpEvent):
        return True
    inner = getattr(event, "event", None)
    if isinstance(inner, dp_event.DpEvent):
        return holds_gnss(inner)
    if isinstance(event, dp_event.ComposedDpEvent):
        return any(holds_gnss(e) for e in event.events)
    return False
