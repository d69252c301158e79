"""Privacy of integer releases with (distributed) discrete Gaussian noise — pure math.

``--secure-noise`` releases integer vote sums Σᵢ vᵢ + Σᵢ Zᵢ, each of t agents adding
Zᵢ ~ N_Z(0, σ²/t) to every coordinate (:mod:`fedvote.aggregation.secure_noise`). One
release moves one coordinate of the sum by an integer Δ (a one-hot vote zeroed: one
coordinate by 1; a record replaced: two coordinates by 1 each). Coordinates are
independent, and a coordinate that does not move contributes nothing, so a release is
the composition of one-coordinate events :class:`DiscreteGaussianDpEvent` (σ, t, Δ), and
the accountant composes those with everything else (``docs/privacy.md``, "Secure noise").

* **t = 1 (central noise)**: the noise is N_Z(0, σ²). Its PLD is dp-accounting's
  ``from_discrete_gaussian_mechanism`` (exact up to its pessimistic discretisation and a
  truncation of mass ≤ 1e-30 counted as infinite loss). Its RDP is αΔ²/(2σ²), the
  continuous Gaussian's (Canonne, Kamath & Steinke 2020, Proposition 5: the Rényi
  divergence between N_Z(μ, σ²) and N_Z(ν, σ²) is at most α(μ − ν)²/(2σ²); Theorem 14
  for the multivariate discrete Gaussian, ρ = Δ₂²/(2σ²)-zCDP).
* **t > 1 (distributed)**: a sum of discrete Gaussians is not a discrete Gaussian. Kairouz,
  Liu & Steinke 2021 ("The Distributed Discrete Gaussian Mechanism for Federated Learning
  with Secure Aggregation", ICML; arXiv:2102.06387), Theorem 1 and Proposition 14: with
  n = t shares of N_Z(0, σ_l²), σ_l ≥ 1/2, and τ = 10·Σ_{k=1}^{n−1} exp(−2π²σ_l²·k/(k+1)),
  the sum satisfies for every order α, in d dimensions,

      ε(α) ≤ min{ αΔ₂²/(2nσ_l²) + τd,  (α/2)·(Δ₂/(√n σ_l) + τ√d)² }

  (the authors' ``compute_rdp_dgaussian``, google-research/federated
  ``distributed_dp/accounting_utils.py``, which adds a third term with Δ₁ that equals the
  second when d = 1). Here nσ_l² = σ², and each one-coordinate event has d = 1. Adding
  independent noise is post-processing, so one share alone also bounds the sum:
  ε(α) ≤ αΔ²/(2σ_l²) (CKS20 above, at the share's σ_l); fedvote takes the smaller, and
  only that bound when σ_l < 1/2, where KLS21's theorem does not apply. KLS21 state the
  bound at integer orders; fedvote evaluates it at ⌈α⌉ (RDP grows with α), so every
  order of the accountant's list is covered.

* **Several coordinates at once** (``dimension`` d > 1): a Private-kNN-FL agent's neighbour
  counts c ∈ ℤ^C (Σ c = k) move up to min(k, C) coordinates of a query's sum together,
  with ‖c‖₂ ≤ k; such a release is one event of L2 sensitivity Δ₂ (a real bound on the
  integer shift, not itself an integer) in d dimensions. One share: ρ = Δ₂²/(2σ²)-zCDP
  (CKS20 Theorem 14, multivariate: the coordinates are independent and the Rényi
  divergences add, Σ_j αΔ_j²/(2σ²) ≤ αΔ₂²/(2σ²)); several shares: KLS21's bound above
  with that d. Only the coordinates that can move count in d (the others' noise is the
  same on both sides and contributes nothing), and the bound grows with d, so any d at
  least the number of moved coordinates is sound.

There is no PLD of the distributed sum in dp-accounting, nor of a discrete Gaussian in
several dimensions or at a non-integer shift; a composition that holds such an event is
therefore accounted by RDP whatever ``--accountant`` says
(:func:`fedvote.privacy.accountant.epsilon_for`), and the run reports ``rdp``.

**A smaller shift is never worse** (used where a coordinate moves by at most Δ, e.g. a
weighted vote W·e_y with 0 ≤ W ≤ W_max, accounted at Δ = W_max). The RDP bounds above
grow with Δ₂, so they hold for every shift below it. For the PLD (one share, one
coordinate): the discrete Gaussians N_Z(θ, σ²), θ ∈ ℤ, have a monotone likelihood ratio
in x (p_θ(x)/p_0(x) = exp((2θx − θ²)/(2σ²)) increases with x for θ > 0); the set that
attains the hockey-stick divergence sup_S P_θ'(S) − e^ε P_0(S) is {x : p_θ'(x) > e^ε p_0(x)},
a half-line {x ≥ c}, and P_θ'(x ≥ c) ≤ P_θ(x ≥ c) for 0 ≤ θ' ≤ θ (MLR implies stochastic
order; Lehmann & Romano, *Testing Statistical Hypotheses*, Lemma 3.4.2), so
H_{e^ε}(P_θ' ‖ P_0) ≤ H_{e^ε}(P_θ ‖ P_0) at every ε; the other direction follows by the
pmf's symmetry. The pair at Δ therefore dominates every pair at Δ' ≤ Δ, and dominating
pairs compose (Zhu, Dong & Wang 2022, Theorem 10).
"""

from __future__ import annotations

import math

import attr
import numpy as np
from dp_accounting import dp_event


@attr.s(frozen=True, slots=True, auto_attribs=True)
class DiscreteGaussianDpEvent(dp_event.DpEvent):
    """Integer coordinates released with the noise of ``shares`` discrete Gaussian shares each.

    The sum's noise is Σ_{i=1}^{shares} N_Z(0, ``sigma``²/``shares``) on each coordinate
    (``shares`` = 1: one N_Z(0, σ²)). ``dimension`` 1 (the default): one coordinate that
    moves between neighbours by at most the integer ``sensitivity``. ``dimension`` d > 1:
    d coordinates moved together by an integer vector of L2 norm at most ``sensitivity``
    (a real number then; module docstring).
    """

    sigma: float
    shares: int = 1
    sensitivity: float = 1
    dimension: int = 1


def share_sigma(sigma: float, shares: int) -> float:
    """σ_l = σ/√t, the scale of one agent's share."""
    return sigma / math.sqrt(shares)


def kls21_tau(sigma: float, shares: int) -> float:
    """KLS21's τ = 10·Σ_{k=1}^{n−1} exp(−2π²σ_l²·k/(k+1)) for n = ``shares`` shares of σ_l = σ/√n.

    0 for one share (the sum is a discrete Gaussian itself).
    """
    local_variance = sigma * sigma / shares
    terms = [math.exp(-2.0 * math.pi**2 * local_variance * k / (k + 1.0)) for k in range(1, shares)]
    return 10.0 * math.fsum(terms)


def discrete_gaussian_rdp(
    orders: np.ndarray, sigma: float, shares: int, sensitivity: float, dimension: int = 1
) -> np.ndarray:
    """RDP ε(α) at ``orders`` of one :class:`DiscreteGaussianDpEvent` (module docstring).

    One share: αΔ²/(2σ²) (CKS20, Theorem 14, in any dimension). Several: the smaller of
    KLS21's bound at ⌈α⌉ in ``dimension`` d (when σ_l ≥ 1/2; its τd and τ√d terms) and
    one share's αΔ²/(2σ_l²). ``inf`` where σ is 0.
    """
    if isinstance(dimension, bool) or not isinstance(dimension, int | np.integer) or dimension < 1:
        raise ValueError(f"dimension must be an integer >= 1, got {dimension!r}")
    alphas = np.asarray(orders, dtype=np.float64)
    if sigma <= 0:
        return np.full(alphas.shape, math.inf)
    delta = float(abs(sensitivity))
    if shares == 1:
        return alphas * delta**2 / (2.0 * sigma**2)
    local = share_sigma(sigma, shares)
    one_share = alphas * delta**2 / (2.0 * local**2)
    if local < 0.5:
        return one_share
    tau = kls21_tau(sigma, shares)
    integer = np.ceil(alphas)
    scale = delta / sigma  # Δ₂/(√n·σ_l)
    d = float(dimension)
    kls21 = np.minimum(
        integer * scale**2 / 2.0 + tau * d, integer / 2.0 * (scale + tau * math.sqrt(d)) ** 2
    )
    return np.minimum(kls21, one_share)


def has_pld(event: DiscreteGaussianDpEvent) -> bool:
    """Whether dp-accounting's discrete Gaussian PLD describes ``event``: one share, one coordinate, Δ ∈ ℤ."""
    return event.shares == 1 and event.dimension == 1 and float(event.sensitivity).is_integer()


def is_distributed(event: dp_event.DpEvent) -> bool:
    """Whether ``event`` holds a discrete Gaussian with no PLD (several shares, several coordinates, Δ ∉ ℤ).

    Such a composition is accounted by RDP only (module docstring).
    """
    if isinstance(event, DiscreteGaussianDpEvent):
        return not has_pld(event)
    inner = getattr(event, "event", None)
    if isinstance(inner, dp_event.DpEvent):
        return is_distributed(inner)
    if isinstance(event, dp_event.ComposedDpEvent):
        return any(is_distributed(e) for e in event.events)
    return False
