"""Releasing Confident-GNMax's data-dependent ε privately, by smooth sensitivity (PATE'18 §4).

The data-dependent RDP of a Confident-GNMax run (:mod:`fedvote.privacy.data_dependent`) is
a noiseless function f of the clean vote histograms, so publishing it leaks them.
Papernot et al. (2018), *Scalable private learning with PATE*, §4 and appendices B-C,
publish it instead through the GNSS mechanism: fix an order λ, compute a β-smooth upper
bound S(x) on f's local sensitivity, release f(x) + S(x)·N(0, σ_SS²), and charge that
release's own RDP (Theorem 23, :mod:`fedvote.privacy.gnss`) to the run.

**The function released.** f(x) = Σ_k f_k(x_k) over the checked queries k, with x_k the
clean histogram of query k and, at order λ,

* f_k ⊇ the threshold check: H(w_k), w_k = log Pr[check fails] = Σ_j log Φ((T − n_j)/σ₁)
  and H(w) = Theorem 6 with q = min(1 − e^w, e^w) and ρ₁ = s²/(2σ₁²) (``threshold_rdp``);
* plus, on answered queries, GNMax: G(log q_k), q_k = Proposition 7's bound
  (``gnmax_logq``) and G = Theorem 6 with ρ₂ = s²/(2σ₂²) (``gnmax_rdp``).

The pass bits were released before (adaptive composition), so which queries pay GNMax is
public. σ₁, σ₂ are the noise actually added (σ·√(r/t)), which is public too.

**Neighbouring histograms.** One agent zeroed out (agent level) moves each query's
histogram by ±e_j; one record replaced (instance level) moves one vote, e_b − e_a. We work
on the larger graph of integer histograms whose steps are ±e_j (agent) or any vector
with at most one +1 and at most one −1 (instance); distances there are never longer
than between federations, so a β-smooth bound on that graph is one on federations, and
an instance-level bound is also one at the agent level (its steps include ±e_j).

**Local sensitivity at distance d** (what PATE'18 Algorithms 3-5 bound). For every
query we first bound where its statistic can go within d steps:

* GNMax: each step moves every gap n_{j*} − n_j by at most g (1 agent, 2 instance; a
  change of argmax only lowers q). With Φ̄(z) = q/(C − 1), the map
  x ↦ Φ(Φ⁻¹(x) + a) is concave, so by Jensen one step takes q to at most
  B_u(q) = (C − 1)·Φ̄(z − a) and (by symmetry) at least B_l(q) = (C − 1)·Φ̄(z + a),
  a = g/(√2σ₂) — PATE'18's B_u, B_l (Proposition 13). d steps shift z by d·a.
* the check: w = Σ_j φ(n_j), φ(n) = log Φ((T − n)/σ₁) concave and decreasing. Its
  minimum over d increments is at all of them on the largest count; its maximum over d
  decrements is greedy (each decrement of the current largest count: separable concave
  maximisation). Ignoring the opposite move of an instance step only widens the range.

Then LS at every histogram within distance d is bounded per part. *GNMax*: PATE'18's
step bound (their Algorithm 3): at z, |ΔG̃| ≤ max(G̃(z − a) − G̃(z), G̃(z) − G̃(z + a)) with
G̃(z) = G(log q(z)) non-increasing, maximised over z₀ ± d·a on a grid of cells of width
a/:data:`GRID_PER_STEP` that does not depend on the data (:class:`_GnmaxSteps`). *The
check*: the range of H over distance d + 1, read off the interval of w because H is
unimodal in w (peak at w = −log 2). Both need Theorem 6's bound non-decreasing in q —
condition C5 of PATE'18 §B.4, checked numerically on a dense grid for the σ and λ of the
run, as the authors do; a failing check refuses the release. A^{(d)}, the sum of those
bounds over queries, satisfies A^{(0)} ≥ LS and A^{(d)}(x) ≤ A^{(d+1)}(x') for
neighbours (nested balls, a data-independent grid), so S_β(x) = max_d e^{−βd}·A^{(d)}(x)
is a β-smooth upper bound on LS (Nissim, Raskhodnikova & Smith 2007, Lemma 2.3; PATE'18
§B). Against a brute force over small federations it is 1.2-1.8× the exact smooth
sensitivity where f varies (``tests/privacy/test_smooth_sensitivity.py``).

**Parameters**, fixed at planning from public values (σ, σ₁, Q, δ; :func:`plan_release`):
λ = 1 + √(log(1/δ)/ρ_Q), the order at which the data-independent RDP ρ_Q·λ of the
planned queries converts best; β = :data:`BETA_TIMES_ORDER`/λ; σ_SS such that the
GNSS's first term λ·e^{2β}/σ_SS² is :data:`COST_FRACTION` of ρ_Q·λ.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import special

from fedvote.errors import ConfigError
from fedvote.privacy.data_dependent import (
    _log1mexp,
    confident_gnmax_rdp,
    gnmax_logq,
    gnmax_rdp,
)
from fedvote.privacy.events import LevelEvents, compose_events
from fedvote.privacy.gnss import SmoothSensitivityGaussianDpEvent, gnss_rdp

LEVEL_GAP_STEP = {"agent": 1.0, "instance": 2.0}  # how far one step moves a vote gap (one-hot votes)
BETA_TIMES_ORDER = 0.1  # β = 0.1/λ: the release's RDP is finite up to order 5λ (2.5λ at the other level)
COST_FRACTION = 0.1  # the release's λe^{2β}/σ_SS² is a tenth of the planned queries' ρλ
GRID_PER_STEP = 8  # cells per step a of the z grid (GNMax's step bound)
MAX_DISTANCE = 1_000_000  # a safety stop for the smooth-sensitivity search
RELEASED_LABEL = "data-dependent ε, released by smooth sensitivity (PATE'18 §4); its release is charged in ε"


@dataclass(frozen=True)
class ReleasePlan:
    """The public parameters of one smooth-sensitivity release: order λ, smoothness β, multiplier σ_SS."""

    order: float
    beta: float
    sigma: float

    def to_dict(self) -> dict[str, float]:
        """result.json's record."""
        return asdict(self)


def plan_release(
    *, sigma: float, threshold_sigma: float, queries: int, delta: float, sensitivity: float
) -> ReleasePlan:
    """λ, β and σ_SS of a level's release, from public values only (module docstring).

    ρ_Q = Q·s²·(1/σ₁² + 1/σ₂²)/2 is the data-independent RDP slope of the planned
    queries; λ = 1 + √(log(1/δ)/ρ_Q) minimises ρ_Q·λ + log(1/δ)/(λ − 1).
    """
    if not (sigma > 0 and threshold_sigma > 0 and queries > 0 and 0 < delta < 1 and sensitivity > 0):
        raise ConfigError("smooth sensitivity", "needs σ, σ₁, Q, s > 0 and δ in (0, 1)")
    rho = 0.5 * queries * sensitivity**2 * (1.0 / threshold_sigma**2 + 1.0 / sigma**2)
    order = 1.0 + math.sqrt(math.log(1.0 / delta) / rho)
    beta = BETA_TIMES_ORDER / order
    return ReleasePlan(order=order, beta=beta, sigma=math.sqrt(math.exp(2.0 * beta) / (COST_FRACTION * rho)))


def release_events(agent: ReleasePlan, instance: ReleasePlan) -> LevelEvents:
    """The ledger charge of releasing both levels' figures, at both levels.

    The instance-level figure's S is β-smooth on a graph whose steps include the agent
    level's, so at both levels it costs GNSS(β_i, σ_i). The agent-level figure's S, at
    the instance level (a moved vote is two agent steps): |Δf| ≤ S(x) + e^β·S(x) and
    S(x) ≤ e^{2β}·S(x'), i.e. GNSS(2β_a, σ_a/(1 + e^{β_a})).
    """
    agent_release = SmoothSensitivityGaussianDpEvent(agent.beta, agent.sigma)
    instance_release = SmoothSensitivityGaussianDpEvent(instance.beta, instance.sigma)
    agent_at_instance = SmoothSensitivityGaussianDpEvent(
        2.0 * agent.beta, agent.sigma / (1.0 + math.exp(agent.beta))
    )
    return LevelEvents(
        agent=dp_event.ComposedDpEvent([agent_release, instance_release]),
        instance=dp_event.ComposedDpEvent([agent_at_instance, instance_release]),
        agent_sensitivity=1.0,
        instance_sensitivity=math.sqrt(2.0),
    )


def with_release(events: LevelEvents, release: LevelEvents) -> LevelEvents:
    """``events`` then ``release``, composed at each level (a plan that holds both)."""
    return LevelEvents(
        agent=compose_events([events.agent, release.agent]),
        instance=compose_events([events.instance, release.instance]),
        agent_sensitivity=max(events.agent_sensitivity, release.agent_sensitivity),
        instance_sensitivity=max(events.instance_sensitivity, release.instance_sensitivity),
    )


def release_cost_rdp(events: LevelEvents, level: str, order: float) -> float:
    """The RDP at ``order`` of a level's smooth-sensitivity charge (:func:`release_events`)."""
    event = events.at(level)
    return float(sum(gnss_rdp(e.beta, e.noise_multiplier, np.array([order]))[0] for e in event.events))


# --- the per-query statistics and their ranges ------------------------------------------------


def _gnmax_curve(log_q: np.ndarray, rho: float, order: float) -> np.ndarray:
    """G(log q) at one order, (K,)."""
    return gnmax_rdp(np.asarray(log_q, dtype=float), rho, np.array([order]))[:, 0]


def _threshold_curve(log_fail: np.ndarray, rho: float, order: float) -> np.ndarray:
    """H(w) at one order, (K,): Theorem 6 on q = min(Pr[pass], Pr[fail]), as ``confident_gnmax_rdp``."""
    w = np.asarray(log_fail, dtype=float)
    log_pass = _log1mexp(np.minimum(w, -1e-300))
    return gnmax_rdp(np.minimum(log_pass, w), rho, np.array([order]))[:, 0]


def gnmax_logq_interval(
    log_q: np.ndarray, classes: int, gap_step: float, sigma: float, radius: int
) -> tuple[np.ndarray, np.ndarray]:
    """Bounds (lo, hi), each (K,), on log q over every histogram within ``radius`` steps.

    q/(C − 1) = Φ̄(z); each step shifts z by at most a = gap_step/(√2σ) (B_u, B_l of PATE'18
    Proposition 13, iterated: the shifts add). Capped at log(1 − 1/C) like ``gnmax_logq``.
    """
    log_m = math.log(classes - 1.0)
    cap = math.log1p(-1.0 / classes)
    z = -special.ndtri_exp(np.minimum(np.asarray(log_q, dtype=float), cap) - log_m)  # (K,)
    shift = radius * gap_step / (math.sqrt(2.0) * sigma)
    hi = np.minimum(log_m + special.log_ndtr(-(z - shift)), cap)
    lo = np.minimum(log_m + special.log_ndtr(-(z + shift)), cap)
    return lo, hi


class _GnmaxSteps:
    """PATE'18's step bound on GNMax's local sensitivity over growing balls, on a fixed z grid.

    With q/(C − 1) = Φ̄(z), one step moves z by at most a = g/(√2σ) and G̃(z) = G(log q(z))
    is non-increasing in z (C5), so at z the local sensitivity is at most
    max(G̃(z − a) − G̃(z), G̃(z) − G̃(z + a)). Over a cell [ih, (i + 1)h] of a grid with
    h = a/:data:`GRID_PER_STEP` that is at most
    max(G̃(ih − a) − G̃((i + 1)h), G̃(ih) − G̃((i + 1)h + a)) (monotone ends), and the
    distance-d ball lies in z₀ ± d·a, so its bound is the running max over the cells
    it meets. The grid does not depend on the data, so the cells of (x, d) are among
    those of (x', d + 1) for neighbours: the bound is admissible for smooth sensitivity.
    """

    def __init__(
        self, log_q: np.ndarray, classes: int, gap_step: float, sigma: float, rho: float, order: float
    ):
        self._log_m = math.log(classes - 1.0)
        self._cap = math.log1p(-1.0 / classes)
        self._rho, self._order = rho, order
        self._a = gap_step / (math.sqrt(2.0) * sigma)
        self._h = self._a / GRID_PER_STEP
        z = -special.ndtri_exp(np.minimum(np.asarray(log_q, dtype=float), self._cap) - self._log_m)  # (K,)
        self._finite = np.isfinite(z)  # q = 0 exactly: no neighbour moves it (B_u(0) = 0)
        self._z = np.where(self._finite, z, 0.0)
        self._left = self._right = self._cell(np.floor(self._z / self._h))  # (K,) running maxima
        self._low = self._high = np.floor(self._z / self._h)
        self._distance = 0

    def _curve(self, z: np.ndarray) -> np.ndarray:
        log_q = np.minimum(self._log_m + special.log_ndtr(-z), self._cap)
        return _gnmax_curve(log_q.reshape(-1), self._rho, self._order).reshape(z.shape)

    def _cell(self, i: np.ndarray) -> np.ndarray:
        """The bound on LS over cell i (any shape)."""
        start, end, a = i * self._h, (i + 1.0) * self._h, self._a
        up = self._curve(start - a) - self._curve(end)
        down = self._curve(start) - self._curve(end + a)
        return np.maximum(np.maximum(up, down), 0.0)

    def bound(self, distance: int) -> np.ndarray:
        """Per query, a bound on LS within ``distance`` steps (asked in increasing order), (K,)."""
        offsets = np.arange(GRID_PER_STEP + 2)[None, :]  # (1, M + 2): enough cells for one more step
        while self._distance < distance:
            self._distance += 1
            low = np.floor((self._z - self._distance * self._a) / self._h)
            high = np.floor((self._z + self._distance * self._a) / self._h)
            left = np.minimum(low[:, None] + offsets, self._low[:, None])  # (K, M + 2), repeats harmless
            right = np.maximum(high[:, None] - offsets, self._high[:, None])
            self._left = np.maximum(self._left, self._cell(left).max(axis=1))
            self._right = np.maximum(self._right, self._cell(right).max(axis=1))
            self._low, self._high = low, high
        return np.where(self._finite, np.maximum(self._left, self._right), 0.0)


class _ThresholdRange:
    """Bounds on w = log Pr[check fails] over growing balls of one group's histograms."""

    def __init__(self, counts: np.ndarray, threshold: float, sigma: float) -> None:
        self._threshold, self._sigma = threshold, sigma
        self._top = counts.max(axis=1)  # (K,)
        self._w = self._phi(counts).sum(axis=1)  # (K,)
        self._lowered = counts.astype(float).copy()  # (K, C), decremented greedily
        self._rows = np.arange(counts.shape[0])
        self._radius = 0

    def _phi(self, n: np.ndarray) -> np.ndarray:
        return special.log_ndtr((self._threshold - n) / self._sigma)

    def interval(self, radius: int) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) of w over every histogram within ``radius`` steps (radii asked in increasing order)."""
        while self._radius < radius:  # one more greedy decrement of the largest count
            largest = np.argmax(self._lowered, axis=1)
            self._lowered[self._rows, largest] -= 1.0
            self._radius += 1
        lo = self._w + self._phi(self._top + radius) - self._phi(self._top)
        hi = np.minimum(self._phi(self._lowered).sum(axis=1), 0.0)
        return lo, hi


def threshold_rdp_range(lo: np.ndarray, hi: np.ndarray, rho: float, order: float) -> np.ndarray:
    """The range (max − min) of H over each [lo, hi] of w, (K,).

    H is unimodal in w with its peak at w = −log 2 (q = min(1 − e^w, e^w) rises to ½ there and
    falls after; Theorem 6 is non-decreasing in q, condition C5): the minimum is at an end,
    the maximum at the peak when it lies inside, else at an end.
    """
    peak = -math.log(2.0)
    at_lo, at_hi = _threshold_curve(lo, rho, order), _threshold_curve(hi, rho, order)
    inside = (lo <= peak) & (peak <= hi)
    top = np.where(inside, _threshold_curve(np.full_like(lo, peak), rho, order), np.maximum(at_lo, at_hi))
    return top - np.minimum(at_lo, at_hi)


def check_monotone_in_q(rho: float, order: float, points: int = 20_000) -> None:
    """Condition C5 of PATE'18 (§B.4): Theorem 6's bound at ``order`` is non-decreasing in q.

    Checked on a dense grid of log q, as the authors check it numerically; raises
    :class:`~fedvote.errors.ConfigError` where it fails.
    """
    log_q = np.sort(-np.geomspace(1e-9, 1e7, points))  # ascending q
    values = _gnmax_curve(log_q, rho, order)
    if np.any(np.diff(values) < -1e-12 * max(rho * order, 1e-300)):
        raise ConfigError(
            "smooth sensitivity", f"Theorem 6 is not monotone in q at ρ = {rho:g}, λ = {order:g}"
        )


# --- the smooth sensitivity and the release ---------------------------------------------------


@dataclass(frozen=True)
class SmoothSensitivity:
    """f(x) at order λ, its β-smooth sensitivity S_β(x), and the distance d at which the max was reached."""

    value: float
    smooth_sensitivity: float
    distance: int
    order: float
    beta: float


def _groups(
    histogram: np.ndarray,
    answered: np.ndarray,
    threshold_sigma: np.ndarray | float,
    sigma: np.ndarray | float,
) -> list[tuple[np.ndarray, np.ndarray, float, float]]:
    """The queries split by equal (σ₁, σ₂) noise: (counts, answered, σ₁, σ₂) each."""
    counts = np.asarray(histogram, dtype=float)  # (K, C)
    mask = np.asarray(answered, dtype=bool).reshape(-1)  # (K,)
    if counts.ndim != 2 or counts.shape[0] != mask.shape[0] or counts.shape[1] < 2:
        raise ConfigError(
            "histogram", f"needs (queries × classes ≥ 2) with one pass bit per query, got {counts.shape}"
        )
    check = np.broadcast_to(np.asarray(threshold_sigma, dtype=float), mask.shape)
    argmax = np.broadcast_to(np.asarray(sigma, dtype=float), mask.shape)
    out = []
    for s1, s2 in np.unique(np.stack([check, argmax], axis=1), axis=0):
        group = (check == s1) & (argmax == s2)
        out.append((counts[group], mask[group], float(s1), float(s2)))
    return out


def confident_gnmax_smooth_sensitivity(
    histogram: np.ndarray,
    answered: np.ndarray,
    *,
    threshold: float,
    threshold_sigma: np.ndarray | float,
    sigma: np.ndarray | float,
    sensitivity: float,
    level: str,
    order: float,
    beta: float,
) -> SmoothSensitivity:
    """f(x) (Confident-GNMax's data-dependent RDP at ``order``) and its β-smooth sensitivity.

    ``histogram`` (K, C) clean sums of every checked query, ``answered`` (K,) the released
    pass bits, ``threshold_sigma``/``sigma`` the noise actually added (scalars or (K,)),
    ``sensitivity`` the level's L2 sensitivity (ρ = s²/(2σ²)), ``level`` picks the step
    (module docstring). S_β = max_d e^{−βd}·A^{(d)}, searched until e^{−βd} times the
    largest possible sum (Σ ρλ) cannot exceed the best found.
    """
    if level not in LEVEL_GAP_STEP:
        raise ConfigError("level", f"must be one of {', '.join(LEVEL_GAP_STEP)}, got {level!r}")
    if not beta > 0 or not order > 1:
        raise ConfigError("smooth sensitivity", f"needs β > 0 and λ > 1, got β = {beta}, λ = {order}")
    step = LEVEL_GAP_STEP[level]
    orders = np.array([order])
    value, ceiling = 0.0, 0.0
    parts = []
    for counts, mask, s1, s2 in _groups(histogram, answered, threshold_sigma, sigma):
        rho1 = 0.5 * (sensitivity / s1) ** 2
        rho2 = 0.5 * (sensitivity / s2) ** 2
        check_monotone_in_q(rho1, order)
        check_monotone_in_q(rho2, order)
        value += float(
            confident_gnmax_rdp(
                counts,
                mask,
                threshold=threshold,
                threshold_sigma=s1,
                sigma=s2,
                sensitivity=sensitivity,
                orders=orders,
            )[0]
        )
        ceiling += rho1 * order * counts.shape[0] + rho2 * order * int(mask.sum())
        picked = counts[mask]
        steps = None
        if picked.shape[0]:
            steps = _GnmaxSteps(gnmax_logq(picked, s2), counts.shape[1], step, s2, rho2, order)
        parts.append((_ThresholdRange(counts, threshold, s1), rho1, steps))

    def total_range(distance: int) -> float:
        """A^{(d)}: the check's range over distance d + 1 plus GNMax's step bound over distance d."""
        total = 0.0
        for checks, rho1, steps in parts:
            lo, hi = checks.interval(distance + 1)
            total += float(np.sum(threshold_rdp_range(lo, hi, rho1, order)))
            if steps is not None:
                total += float(np.sum(steps.bound(distance)))
        return total

    best, best_distance = total_range(0), 0
    distance = 0
    while math.exp(-beta * (distance + 1)) * ceiling > best:
        distance += 1
        if distance > MAX_DISTANCE:
            raise ConfigError(
                "smooth sensitivity", f"the search passed distance {MAX_DISTANCE}; β = {beta} is too small"
            )
        candidate = math.exp(-beta * distance) * total_range(distance)
        if candidate > best:
            best, best_distance = candidate, distance
    return SmoothSensitivity(
        value=value, smooth_sensitivity=best, distance=best_distance, order=order, beta=beta
    )


@dataclass(frozen=True)
class ReleasedDataDependent:
    """A level's published data-dependent ε (the GNSS release) and what stays private beside it."""

    epsilon: float  # published: from the noisy RDP + the release's own RDP, at δ
    released_rdp: float  # published: the noisy f(x), clipped to [0, data-independent]
    release_cost_rdp: float  # public: the charge's RDP at λ
    plan: ReleasePlan
    # Not published (diagnostics): the clean f(x) and S_β(x) it was noised with.
    clean_rdp: float
    smooth_sensitivity: float
    distance: int
    label: str = RELEASED_LABEL


def release_data_dependent(
    smooth: SmoothSensitivity,
    plan: ReleasePlan,
    *,
    cost_rdp: float,
    independent_rdp: float,
    delta: float,
    rng: np.random.Generator,
) -> ReleasedDataDependent:
    """The GNSS release f(x) + S_β(x)·N(0, σ_SS²) and the ε it states (PATE'18 §4).

    The noisy value is clipped to [0, ``independent_rdp``] (the data-independent RDP of the
    same queries at λ; post-processing) and the release's own ``cost_rdp`` added before the
    RDP → (ε, δ) conversion at the single order λ (dp-accounting's conversion).
    """
    noisy = smooth.value + smooth.smooth_sensitivity * plan.sigma * float(rng.standard_normal())
    released = float(min(max(noisy, 0.0), independent_rdp))
    epsilon, _ = rdp_privacy_accountant.compute_epsilon([plan.order], [released + cost_rdp], delta)
    return ReleasedDataDependent(
        epsilon=float(epsilon),
        released_rdp=released,
        release_cost_rdp=cost_rdp,
        plan=plan,
        clean_rdp=smooth.value,
        smooth_sensitivity=smooth.smooth_sensitivity,
        distance=smooth.distance,
    )


def data_independent_rdp(
    threshold_sigma: np.ndarray, sigma: np.ndarray, sensitivity: float, order: float
) -> float:
    """Σ_k (ρ₁ₖ + ρ₂ₖ)·λ: the RDP at λ of charging both Gaussians on every checked query."""
    s1 = np.asarray(threshold_sigma, dtype=float)
    s2 = np.asarray(sigma, dtype=float)
    return float(np.sum(0.5 * sensitivity**2 * (1.0 / s1**2 + 1.0 / s2**2)) * order)
