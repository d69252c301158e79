"""Accountants: (ε, δ) of a ``dp_accounting`` event by PLD (default), RDP, or exact Gaussian.

* ``pld`` — dp-accounting's privacy-loss-distribution accountant (tight, numerical).
* ``rdp`` — dp-accounting's RDP accountant with a dense list of orders (its default
  list jumps from 63 to 128, which loosens small-ρ cases).
* ``exact`` — the closed form of Balle & Wang (2018, Theorem 8) for a composition of
  Gaussian mechanisms, which is again Gaussian with μ = √(Σ s²/σ²) = s·√Q/σ:
  δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2), computed in log space.
* ``classic`` — RDP (dp-accounting, dense orders) converted by the classic bound
  ε = min_α ε(α) + log(1/δ)/(α − 1) (Mironov 2017, Prop. 3; Lemma 9 of the voting
  paper's appendix), as the voting paper computed its ε. For a pure Gaussian
  composition (RDP α·μ²/2) the minimum over all real α > 1 is taken in closed form,
  ε = μ²/2 + μ·√(2·log(1/δ)). Always looser than ``rdp`` (which uses the improved
  conversion of Balle et al. 2020 / Asoodeh et al. 2020); shown to explain the papers'
  figures, not for reporting.
"""

from __future__ import annotations

import collections
import math
import re
import warnings
from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event, pld, rdp
from dp_accounting.pld import privacy_loss_mechanism
from dp_accounting.privacy_accountant import NeighboringRelation, PrivacyAccountant, UnsupportedEventError
from scipy import optimize, special

from fedvote.errors import ConfigError
from fedvote.privacy.config import ACCOUNTANTS
from fedvote.privacy.discrete import DiscreteGaussianDpEvent, discrete_gaussian_rdp, has_pld, is_distributed
from fedvote.privacy.discrete_sum import sampled_discrete_gaussian_rdp
from fedvote.privacy.events import ReplaceOneDpEvent
from fedvote.privacy.gaussian_pld import gaussian_pld
from fedvote.privacy.gnss import SmoothSensitivityGaussianDpEvent, gnss_rdp, holds_gnss
from fedvote.privacy.pld_arrays import compose, epsilon_for_delta, self_compose

# Dense RDP orders: fine steps near 1, every integer to 256, then a geometric tail of
# integers (dp-accounting's fractional-order series for subsampled Gaussians fails to
# converge above ~2000 and drops those orders with a warning; integer orders are exact).
RDP_ORDERS: tuple[float, ...] = tuple(
    np.concatenate(
        [
            1.0 + np.linspace(0.01, 0.99, 99),
            np.arange(2.0, 20.0, 0.25),
            np.arange(20.0, 257.0, 1.0),
            np.unique(np.round(np.geomspace(260.0, 1e5, 60))),
        ]
    ).tolist()
)

# PLD discretisation: 1e-4 (dp-accounting's default) is pessimistic by at most ~1e-4·count
# in ε for non-Gaussian events and exact for Gaussian self-composition.
PLD_DISCRETIZATION = 1e-4


def make_accountant(kind: str, discretization: float = PLD_DISCRETIZATION) -> PrivacyAccountant:
    """A fresh accountant of ``kind`` ("pld", "rdp", "exact" or "classic").

    ``discretization`` is the PLD's value discretisation interval (``pld`` only).

    Every kind understands :class:`~fedvote.privacy.events.ReplaceOneDpEvent` beside
    dp-accounting's own events (what each makes of it: the classes below).
    """
    if kind == "pld":
        return MixedRelationPLDAccountant(value_discretization_interval=discretization)
    if kind == "rdp":
        return MixedRelationRdpAccountant(orders=list(RDP_ORDERS))
    if kind == "exact":
        return ExactGaussianAccountant()
    if kind == "classic":
        return ClassicRdpAccountant()
    raise ConfigError("accountant", f"unknown accountant {kind!r}; choose from {', '.join(ACCOUNTANTS)}")


# Above this μ a pure Gaussian composition is accounted by the exact closed form, also
# under ``pld``: for a composition of Gaussians the PLD is that same closed form (they agree
# to ~1e-9 relative), but its discretised support grows with μ (μ = 20: 1.4 GB and 20 s per
# evaluation; μ = 1000 exhausted 24 GB), while the closed form costs microseconds.
PLD_MAX_GAUSSIAN_MU = 5.0
# Below this μ (noise a million times the sensitivity) too: ε ≈ 0, and dp-accounting's PLD
# of so wide a Gaussian overflows.
PLD_MIN_GAUSSIAN_MU = 1e-6

# The most discretisation points a PLD may take (about 1 GB at the peak). An event whose
# PLD would need more at :data:`PLD_DISCRETIZATION` (a subsampled Gaussian with little
# noise: its privacy loss spans ~1/z² per step) is discretised more coarsely, which keeps
# ε an upper bound (the discretisation is pessimistic: ε grows by at most the number of
# steps times the interval) and memory flat; beyond :data:`PLD_COARSEST_DISCRETIZATION`
# it is refused (:class:`PLDTooLarge`).
PLD_MAX_POINTS = 5e6
PLD_COARSEST_DISCRETIZATION = 0.05
# dp-accounting self-composes a small (sparse) PLD n times after computing size**n as a
# Python integer: 10⁷ compositions take seconds, 10⁹ hours. More are refused.
PLD_MAX_COMPOSITIONS = 10**6


class PLDTooLarge(ConfigError):
    """The PLD of an event would not fit in memory even coarsely: its noise is far too small.

    Its ε is then far beyond any useful budget. ``argument`` is "accountant"; callers that
    know which flag set the noise re-raise it under that flag.
    """


class PLDTooManyCompositions(ConfigError):
    """The PLD accountant would compose one mechanism more than :data:`PLD_MAX_COMPOSITIONS` times."""


# What a level's figure names as its accountant when no finite bound was computed (ε = ∞).
NO_BOUND = "none"


@dataclass(frozen=True)
class BoundedEpsilon:
    """ε of a level and the accountant that proved it (:func:`bounded_epsilon`).

    ``accountant`` is the one that computed ``epsilon`` ("pld", "rdp", "exact", "classic",
    or :data:`NO_BOUND` with ``epsilon`` = ∞; "exact" also where ``pld`` took a pure
    Gaussian composition's ε from the closed form its PLD equals, outside the μ range it
    builds); ``fallback`` says why it is not the run's own accountant's figure (its PLD
    could not be built), None when it is.
    """

    epsilon: float
    accountant: str
    fallback: str | None = None


def bounded_epsilon(event: dp_event.DpEvent, delta: float, kind: str = "pld") -> BoundedEpsilon:
    """ε at ``delta`` of ``event`` by ``kind``; where its PLD cannot be built, RDP's upper bound, else ∞.

    For a level the run does not calibrate (its own level must be PLD-accountable:
    :func:`check_pld_accountable`). A PLD too large to build even coarsely
    (:class:`PLDTooLarge`) or composing too many releases (:class:`PLDTooManyCompositions`)
    falls back to dp-accounting's RDP accountant of the *same* events: each event's RDP
    curve bounds it (Mironov 2017, Prop. 7 for the Gaussian), RDP composes additively
    (Prop. 1), and dp-accounting's conversion to (ε, δ) holds for every mechanism with
    that curve (Canonne, Kamath & Steinke 2020, Prop. 12; the classic Mironov 2017,
    Prop. 3 is looser): the figure is never below the truth, only looser than a PLD. Where RDP
    cannot account the events either (a replace-one Poisson-sampled step), ε = ∞ with
    accountant :data:`NO_BOUND`: no finite bound is claimed.
    """
    used = accountant_for(event, kind)
    try:
        epsilon = epsilon_for(event, delta, kind)
        if used == "pld" and _gaussian_closed_form(event):
            used = "exact"  # the value its PLD equals, computed by the closed form (say so)
        return BoundedEpsilon(epsilon, used)
    except (PLDTooLarge, PLDTooManyCompositions) as error:
        if used != "pld":  # pragma: no cover - only the PLD raises these
            raise
        reason = f"pld: {error.detail}"
    try:
        return BoundedEpsilon(epsilon_for(event, delta, "rdp"), "rdp", reason)
    except ConfigError as error:
        return BoundedEpsilon(math.inf, NO_BOUND, f"{reason}; rdp: {error.detail}")


def epsilon_bound(event: dp_event.DpEvent, delta: float, kind: str = "pld") -> float:
    """:func:`bounded_epsilon`'s ε alone (a level's figure, a budget's spend)."""
    return bounded_epsilon(event, delta, kind).epsilon


def check_pld_accountable(event: dp_event.DpEvent) -> None:
    """Raise :class:`PLDTooLarge` (or :class:`PLDTooManyCompositions`) where ``pld`` cannot account ``event``.

    Follows :func:`epsilon_for`'s own path: a non-private event (ε = ∞), an event the PLD
    hands to RDP (:func:`accountant_for`) and a pure Gaussian composition outside the
    PLD's μ range (its exact closed form) build no PLD and pass.
    """
    _pld_discretization_or_none(event, "pld")


def _pld_discretization_or_none(event: dp_event.DpEvent, kind: str) -> float | None:
    """The PLD interval :func:`epsilon_for` builds ``event``'s PLD at; None where it builds none."""
    if _has_non_private_part(event) or accountant_for(event, kind) != "pld" or _gaussian_closed_form(event):
        return None
    return pld_discretization(event)


def _gaussian_closed_form(event: dp_event.DpEvent) -> bool:
    """Whether :func:`epsilon_for` takes ``pld``'s ε of ``event`` from the exact Gaussian closed form."""
    if _has_non_private_part(event):
        return False
    mu = _gaussian_mu_or_none(event)
    return mu is not None and not PLD_MIN_GAUSSIAN_MU <= mu <= PLD_MAX_GAUSSIAN_MU


def epsilon_for(event: dp_event.DpEvent, delta: float, kind: str = "pld", coarsening: int = 1) -> float:
    """ε at ``delta`` of ``event`` by accountant ``kind``; ``inf`` for a non-private event.

    With ``kind="pld"``, a pure Gaussian composition with μ > :data:`PLD_MAX_GAUSSIAN_MU`
    is computed by the exact closed form (the value its PLD equals), and any other event
    at a discretisation coarse enough for its PLD to fit in memory
    (:func:`pld_discretization`; :class:`PLDTooLarge` when none does). ``coarsening``
    multiplies that interval by an integer: the coarse grid is a subset of the fine one, so
    its pessimistic ε is never below the fine ε (calibration searches on it first).

    The answer is a pure function of its arguments and is remembered (the last
    :data:`EPSILON_MEMO_SIZE`, keyed by the event's full ``repr``): a run asks for the ε of
    the σ it just calibrated, its report and its ledger check ask again.
    """
    if not 0.0 < delta < 1.0:
        raise ConfigError("delta", f"must lie in (0, 1), got {delta}")
    if not (isinstance(coarsening, int) and coarsening >= 1):
        raise ConfigError("coarsening", f"must be an integer >= 1, got {coarsening!r}")
    if _has_non_private_part(event):  # nothing bounds the whole; don't build its PLD first
        return math.inf
    kind = accountant_for(event, kind)
    discretization = None
    if kind == "pld":
        mu = _gaussian_mu_or_none(event)
        if mu is not None and not PLD_MIN_GAUSSIAN_MU <= mu <= PLD_MAX_GAUSSIAN_MU:
            return gaussian_epsilon(mu, delta)
        discretization = pld_discretization(event) * coarsening
    key = (repr(_unwrap_single(event)), float(delta), kind, discretization)
    if key in _EPSILON_MEMO:
        _EPSILON_MEMO.move_to_end(key)
        return _EPSILON_MEMO[key]
    epsilon = float(_composed(event, kind, discretization).get_epsilon(delta))
    _EPSILON_MEMO[key] = epsilon
    if len(_EPSILON_MEMO) > EPSILON_MEMO_SIZE:
        _EPSILON_MEMO.popitem(last=False)
    return epsilon


def accountant_for(event: dp_event.DpEvent, kind: str) -> str:
    """The accountant ``kind`` means for ``event``: ``rdp`` for ``pld`` where it holds a distributed DG.

    dp-accounting has no PLD of a sum of discrete Gaussians; Kairouz, Liu & Steinke 2021
    bound it in RDP (:mod:`fedvote.privacy.discrete`), so such a composition is accounted
    by RDP (a valid bound for every other event in it too) and reported so.
    """
    if kind == "pld" and is_distributed(event):
        return "rdp"
    # A smooth-sensitivity release (GNSS) has an RDP bound only (Theorem 23 of PATE'18).
    return "rdp" if kind in ("pld", "exact") and holds_gnss(event) else kind


# How many answers epsilon_for remembers (least recently used dropped); the key is the
# event's repr, δ, the accountant and the PLD interval actually used.
EPSILON_MEMO_SIZE = 512
_MemoKey = tuple[str, float, str, float | None]
_EPSILON_MEMO: collections.OrderedDict[_MemoKey, float] = collections.OrderedDict()


def clear_epsilon_memo() -> None:
    """Forget every remembered ε (tests that patch an accountant's internals call it)."""
    _EPSILON_MEMO.clear()


def _unwrap_single(event: dp_event.DpEvent) -> dp_event.DpEvent:
    """``event`` without self-compositions of count 1 (the same release; one memo entry)."""
    while isinstance(event, dp_event.SelfComposedDpEvent) and event.count == 1:
        event = event.event
    return event


def pld_discretization(event: dp_event.DpEvent) -> float:
    """The PLD discretisation interval for ``event``, coarser where its support would be huge.

    :data:`PLD_DISCRETIZATION`, or coarser so that the estimated support stays under
    :data:`PLD_MAX_POINTS` (:class:`PLDTooLarge` beyond :data:`PLD_COARSEST_DISCRETIZATION`).

    The estimate (:func:`pld_points`) takes each Gaussian's privacy-loss range from
    dp-accounting's own tail bounds, without building anything.
    """
    compositions = _compositions(event)
    if compositions > PLD_MAX_COMPOSITIONS:
        raise PLDTooManyCompositions(
            "accountant",
            f"the pld accountant composes at most {PLD_MAX_COMPOSITIONS:.0e} releases of one mechanism, "
            f"this plan has {compositions}" + ("" if _has_replace_one(event) else "; use --accountant rdp"),
        )
    points = pld_points(event)
    if points <= PLD_MAX_POINTS:
        return PLD_DISCRETIZATION
    interval = PLD_DISCRETIZATION * points / PLD_MAX_POINTS
    if not interval <= PLD_COARSEST_DISCRETIZATION:
        raise PLDTooLarge(
            "accountant",
            f"so little noise that the privacy loss cannot be accounted (its PLD would need "
            f"{'unboundedly many' if math.isinf(points) else f'{points:.2g}'} points): "
            "ε is far beyond any useful budget; add noise",
        )
    return interval


def _compositions(event: dp_event.DpEvent, count: int = 1) -> int:
    """The most times ``event`` composes any one mechanism (counts multiply through nesting)."""
    if isinstance(event, ReplaceOneDpEvent):
        return _compositions(event.event, count)
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return _compositions(event.event, count * event.count)
    if isinstance(event, dp_event.ComposedDpEvent):
        return max((_compositions(e, count) for e in event.events), default=0)
    return count


def _has_replace_one(event: dp_event.DpEvent) -> bool:
    if isinstance(event, ReplaceOneDpEvent):
        return True
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return _has_replace_one(event.event)
    if isinstance(event, dp_event.ComposedDpEvent):
        return any(_has_replace_one(e) for e in event.events)
    return False


def pld_points(event: dp_event.DpEvent, replace_one: bool = False) -> float:
    """An estimate of the points dp-accounting's PLD of ``event`` takes (0: not estimated).

    At :data:`PLD_DISCRETIZATION`.

    One (Poisson-subsampled) Gaussian step spans its privacy-loss range over the interval;
    ``count`` self-compositions widen the support by about √count (the composition's
    spread, after dp-accounting's tail truncation); a composition adds its parts.
    """
    if isinstance(event, ReplaceOneDpEvent):
        return pld_points(event.event, replace_one=True)
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return pld_points(event.event, replace_one) * max(1.0, math.sqrt(event.count))
    if isinstance(event, dp_event.ComposedDpEvent):
        return sum(pld_points(e, replace_one) for e in event.events)
    sampling = 1.0
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        sampling, event = event.sampling_probability, event.event
    if isinstance(event, dp_event.GaussianDpEvent):
        return _gaussian_pld_points(event.noise_multiplier, sampling, 2.0 if replace_one else 1.0)
    return 0.0


def _gaussian_pld_points(noise_multiplier: float, sampling: float, sensitivity: float) -> float:
    if noise_multiplier <= 0:
        return math.inf
    if sampling <= 0:
        return 0.0
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            loss = privacy_loss_mechanism.GaussianPrivacyLoss(
                noise_multiplier, sensitivity=sensitivity, sampling_prob=min(sampling, 1.0)
            )
            tail = loss.privacy_loss_tail()
            span = loss.privacy_loss(tail.lower_x_truncation) - loss.privacy_loss(tail.upper_x_truncation)
    except (ArithmeticError, ValueError):
        return math.inf if noise_multiplier < 1.0 else 0.0
    return float(span) / PLD_DISCRETIZATION if math.isfinite(span) else math.inf


def _composed(event: dp_event.DpEvent, kind: str, discretization: float | None = None) -> PrivacyAccountant:
    """A fresh ``kind`` accountant with ``event`` composed; a one-line error if it cannot.

    ``discretization``: the PLD interval (default :func:`pld_discretization` of the event).
    """
    kind = accountant_for(event, kind)
    if discretization is None:
        discretization = pld_discretization(event) if kind == "pld" else PLD_DISCRETIZATION
    accountant = make_accountant(kind, discretization)
    try:
        with warnings.catch_warnings(), np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            return accountant.compose(event)
    except UnsupportedEventError as error:
        found = re.search(r"Error: \[(.*)\] caused by", str(error), flags=re.DOTALL)
        message = found.group(1) if found else str(error)
        raise ConfigError("accountant", f"{kind} cannot account this release: {message}") from error
    except ArithmeticError as error:  # a noise multiplier so extreme that dp-accounting overflows
        raise ConfigError(
            "accountant", f"{kind} cannot account this release (its noise overflows: {error})"
        ) from error


def _has_non_private_part(event: dp_event.DpEvent) -> bool:
    """Whether a composition contains a non-private release (its ε is then unbounded)."""
    if isinstance(event, dp_event.NonPrivateDpEvent):
        return True
    if isinstance(event, ReplaceOneDpEvent):
        return _has_non_private_part(event.event)
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return event.count > 0 and _has_non_private_part(event.event)
    if isinstance(event, dp_event.ComposedDpEvent):
        return any(_has_non_private_part(e) for e in event.events)
    return False


def _gaussian_mu_or_none(event: dp_event.DpEvent) -> float | None:
    try:
        return gaussian_mu(event)
    except ValueError:
        return None


def delta_for(event: dp_event.DpEvent, epsilon: float, kind: str = "pld") -> float:
    """δ at ``epsilon`` of ``event`` by accountant ``kind``."""
    if epsilon < 0:
        raise ConfigError("epsilon", f"must be >= 0, got {epsilon}")
    return float(_composed(event, kind).get_delta(epsilon))


def gaussian_mu(event: dp_event.DpEvent) -> float:
    """μ of a composition of Gaussian events: √(Σ count / noise_multiplier²).

    Raises ``ValueError`` for any event that is not purely Gaussian (the exact
    accountant applies only there). ``inf`` for a non-private event, 0 for no-op.
    """
    return math.sqrt(_mu_squared(event, 1))


def sqrt_count(count: int) -> float:
    """√count for a count of any size: ∞ beyond a float's range (e.g. 10⁴⁰⁰ releases or clients)."""
    try:
        return math.sqrt(count)
    except OverflowError:
        return math.inf


def _mu_squared(event: dp_event.DpEvent, count: int) -> float:
    if isinstance(event, dp_event.NoOpDpEvent):
        return 0.0
    if isinstance(event, dp_event.NonPrivateDpEvent):
        return math.inf
    if isinstance(event, dp_event.GaussianDpEvent):
        if event.noise_multiplier == 0:
            return math.inf
        # (√count / z)², which overflows to inf (never raises) for a tiny z and is 0 for a huge one
        root = sqrt_count(count)
        return (root / event.noise_multiplier) * (root / event.noise_multiplier)
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return _mu_squared(event.event, count * event.count)
    if isinstance(event, dp_event.ComposedDpEvent):
        return sum(_mu_squared(e, count) for e in event.events)
    if isinstance(event, ReplaceOneDpEvent):  # REPLACE_ONE reads a Gaussian as sensitivity 2
        return 4.0 * _mu_squared(event.event, count)
    raise ValueError(f"the exact Gaussian accountant applies only to Gaussian compositions, got {event}")


def _log_gaussian_delta(mu: float, epsilon: float) -> float:
    """Log δ(ε) for μ-GDP, stable for large μ and ε (Balle & Wang 2018, Theorem 8)."""
    log_a = special.log_ndtr(-epsilon / mu + mu / 2.0)
    log_b = epsilon + special.log_ndtr(-epsilon / mu - mu / 2.0)
    # δ = a − b with b < a; log δ = log a + log(1 − e^{log b − log a}). Where a and b agree
    # to rounding (tiny μ, or both astronomically small) the difference is noise: δ is
    # bounded by a times the rounding resolution instead (never under-reported).
    resolution = 4.0 * np.finfo(float).eps * max(abs(log_a), abs(epsilon), abs(log_b - epsilon), 1.0)
    if not log_b - log_a < -resolution:
        return float(log_a + math.log(2.0 * resolution))
    return float(log_a + np.log(-np.expm1(log_b - log_a)))


def gaussian_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of μ-GDP (exact)."""
    if mu == 0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    return math.exp(_log_gaussian_delta(mu, epsilon))


# Above this μ (ε ≈ μ²/2 > 5·10¹¹) the closed form's two terms cancel in floating point;
# ε is then reported by the classic conversion μ²/2 + μ·√(2·log(1/δ)), an upper bound on it
# within 1/μ relative (:func:`classic_gaussian_epsilon`).
GAUSSIAN_CLOSED_FORM_MAX_MU = 1e6


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The smallest ε with δ(ε) ≤ ``delta`` for μ-GDP (exact; root of the closed form).

    The root is bracketed and refined to 1e-12 relative, then nudged up so that
    δ(ε) ≤ ``delta`` holds at the returned value (never under-reports).
    """
    if mu == 0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    if mu > GAUSSIAN_CLOSED_FORM_MAX_MU:  # the closed form cancels catastrophically: bound it
        return classic_gaussian_epsilon(mu, delta)
    log_delta = math.log(delta)

    def gap(eps: float) -> float:
        return _log_gaussian_delta(mu, eps) - log_delta

    if gap(0.0) <= 0:
        return 0.0
    high = max(1.0, mu * mu)
    while gap(high) > 0:
        high *= 2.0
    root = float(optimize.brentq(gap, 0.0, high, xtol=1e-14, rtol=1e-12))
    step = max(1e-12 * root, 1e-300)
    while gap(root) > 0:  # ends: gap(high) <= 0, and the step doubles
        root = min(math.nextafter(root, math.inf) + step, high)
        step *= 2.0
    return root


class ExactGaussianAccountant(PrivacyAccountant):
    """A dp-accounting accountant for pure Gaussian compositions, by the exact closed form.

    Supports Gaussian, self-composed, composed, no-op and non-private events under the
    ADD_OR_REMOVE_ONE relation (our convention; sensitivity folded into the multiplier).
    """

    def __init__(self) -> None:
        super().__init__(NeighboringRelation.ADD_OR_REMOVE_ONE)
        self._mu_squared = 0.0

    def _maybe_compose(
        self, event: dp_event.DpEvent, count: int, do_compose: bool
    ) -> PrivacyAccountant.CompositionErrorDetails | None:
        try:
            contribution = _mu_squared(event, count)
        except ValueError as error:
            return PrivacyAccountant.CompositionErrorDetails(
                invalid_event=event, error_message=str(error)
            )
        if do_compose:
            self._mu_squared += contribution
        return None

    @property
    def mu(self) -> float:
        """μ of everything composed so far."""
        return math.sqrt(self._mu_squared)

    def get_epsilon(self, target_delta: float) -> float:
        """Exact ε at ``target_delta``."""
        return gaussian_epsilon(self.mu, target_delta)

    def get_delta(self, target_epsilon: float) -> float:
        """Exact δ at ``target_epsilon``."""
        return gaussian_delta(self.mu, target_epsilon)



def classic_gaussian_epsilon(mu: float, delta: float) -> float:
    """Classic-conversion ε of μ-GDP: min over α > 1 of α·μ²/2 + log(1/δ)/(α − 1).

    Equals μ²/2 + μ·√(2·log(1/δ)).

    The classic RDP → (ε, δ) conversion of a μ-GDP (Gaussian) composition, attained at
    α* = 1 + √(2·log(1/δ))/μ.
    """
    if mu == 0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    return mu * mu / 2.0 + mu * math.sqrt(2.0 * math.log(1.0 / delta))


def classic_rdp_epsilon(orders: np.ndarray, rdp_values: np.ndarray, delta: float) -> float:
    """Classic conversion on a grid: min over ``orders`` > 1 of rdp(α) + log(1/δ)/(α − 1)."""
    orders = np.asarray(orders, dtype=float)
    rdp_values = np.asarray(rdp_values, dtype=float)
    usable = orders > 1.0
    with np.errstate(invalid="ignore"):
        values = rdp_values[usable] + math.log(1.0 / delta) / (orders[usable] - 1.0)
    values = np.where(np.isnan(values), np.inf, values)
    return float(max(0.0, float(np.min(values)))) if values.size else math.inf


class MixedRelationPLDAccountant(pld.PLDAccountant):
    """dp-accounting's PLD accountant (ADD_OR_REMOVE_ONE) that also composes replace-one events.

    A :class:`~fedvote.privacy.events.ReplaceOneDpEvent` is composed by dp-accounting's
    own PLD code under REPLACE_ONE; a PLD is a pair of distributions whatever relation
    produced it, so the composition with the rest is exact (Koskela et al. 2020).
    """

    def _maybe_compose(
        self, event: dp_event.DpEvent, count: int, do_compose: bool
    ) -> PrivacyAccountant.CompositionErrorDetails | None:
        if isinstance(event, DiscreteGaussianDpEvent):
            return self._compose_discrete_gaussian(event, count, do_compose)
        if do_compose and self._compose_gaussian(event, count):
            return None
        if not isinstance(event, ReplaceOneDpEvent):
            return super()._maybe_compose(event, count, do_compose)
        outer: NeighboringRelation = self.neighboring_relation
        self._neighboring_relation = NeighboringRelation.REPLACE_ONE
        try:
            return super()._maybe_compose(event.event, count, do_compose)
        finally:
            self._neighboring_relation = outer

    def get_epsilon(self, target_delta: float) -> float:
        """dp-accounting's ε of the composed PLD, read off its arrays at once (``pld_arrays``)."""
        if self._contains_non_dp_event:
            return math.inf
        return epsilon_for_delta(self._pld, target_delta)

    def _compose_gaussian(self, event: dp_event.DpEvent, count: int) -> bool:
        """Compose a (Poisson-sampled) Gaussian as dp-accounting's PLD accountant does; False if not one.

        Its PLD is built by :func:`~fedvote.privacy.gaussian_pld.gaussian_pld` (the same PLD, ten
        times faster). Zero noise and zero rate are left to dp-accounting, as is any other event.
        """
        relation = self.neighboring_relation
        if isinstance(event, dp_event.GaussianDpEvent) and event.noise_multiplier > 0:
            # dp-accounting composes ``count`` Gaussians as one of multiplier z / √count
            sigma, grid = event.noise_multiplier / math.sqrt(count), self._value_discretization_interval
            single = gaussian_pld(sigma, grid, neighboring_relation=relation)
        elif (
            isinstance(event, dp_event.PoissonSampledDpEvent)
            and isinstance(event.event, dp_event.GaussianDpEvent)
            and event.sampling_probability > 0
            and event.event.noise_multiplier > 0
        ):
            single = gaussian_pld(
                event.event.noise_multiplier,
                self._value_discretization_interval,
                sampling_prob=event.sampling_probability,
                neighboring_relation=relation,
            )
            single = self_compose(single, count)
        else:
            return False
        self._pld = compose(self._pld, single)  # type: ignore[has-type]
        return True

    def _compose_discrete_gaussian(
        self, event: DiscreteGaussianDpEvent, count: int, do_compose: bool
    ) -> PrivacyAccountant.CompositionErrorDetails | None:
        """One share, one coordinate: dp-accounting's discrete Gaussian PLD (CKS20), ``count`` times.

        Several shares, several coordinates or a non-integer shift: refused (accounted by RDP).
        """
        if not has_pld(event):
            return PrivacyAccountant.CompositionErrorDetails(
                invalid_event=event,
                error_message="no PLD of a sum of discrete Gaussians, nor of one in several dimensions "
                "or at a non-integer shift; it is accounted by RDP (CKS20, KLS21)",
            )
        if do_compose:
            if event.sigma <= 0:
                self._contains_non_dp_event = True
            else:
                single = pld.privacy_loss_distribution.from_discrete_gaussian_mechanism(
                    event.sigma,
                    sensitivity=int(event.sensitivity),
                    value_discretization_interval=self._value_discretization_interval,
                )
                composed: pld.privacy_loss_distribution.PrivacyLossDistribution = self._pld  # type: ignore[has-type]
                self._pld = composed.compose(single.self_compose(count))
        return None


class MixedRelationRdpAccountant(rdp.RdpAccountant):
    """dp-accounting's RDP accountant (ADD_OR_REMOVE_ONE) that also composes replace-one Gaussians.

    Under REPLACE_ONE a Gaussian of multiplier z has sensitivity 2, i.e. RDP α·2/z², which
    is composed as ``GaussianDpEvent(z / 2)``. dp-accounting's RDP has no replace-one
    bound for Poisson sampling, and its without-replacement bound reads the multiplier
    relative to another sensitivity than its PLD: sampled events under REPLACE_ONE are
    refused (use the PLD accountant), never approximated.
    """

    def _maybe_compose(
        self, event: dp_event.DpEvent, count: int, do_compose: bool
    ) -> PrivacyAccountant.CompositionErrorDetails | None:
        inner = getattr(event, "event", None)
        if isinstance(event, dp_event.PoissonSampledDpEvent) and isinstance(inner, DiscreteGaussianDpEvent):
            if do_compose:  # a sampled distributed discrete Gaussian (privacy/discrete_sum.py; issue 46)
                q = event.sampling_probability
                self._rdp += count * sampled_discrete_gaussian_rdp(self._orders, q, inner)
            return None
        if isinstance(event, DiscreteGaussianDpEvent):
            if do_compose:
                self._rdp += count * discrete_gaussian_rdp(
                    self._orders, event.sigma, event.shares, event.sensitivity, event.dimension
                )
            return None
        if isinstance(event, SmoothSensitivityGaussianDpEvent):  # Theorem 23 of PATE'18
            if do_compose:
                self._rdp += count * gnss_rdp(event.beta, event.noise_multiplier, np.asarray(self._orders))
            return None
        if not isinstance(event, ReplaceOneDpEvent):
            return super()._maybe_compose(event, count, do_compose)
        try:
            halved = _halve_gaussians(event.event)
        except ValueError as error:
            return PrivacyAccountant.CompositionErrorDetails(invalid_event=event, error_message=str(error))
        return super()._maybe_compose(halved, count, do_compose)


def _halve_gaussians(event: dp_event.DpEvent) -> dp_event.DpEvent:
    """A Gaussian composition read under REPLACE_ONE, as the same pairs under ADD_OR_REMOVE_ONE."""
    if isinstance(event, dp_event.NoOpDpEvent | dp_event.NonPrivateDpEvent):
        return event
    if isinstance(event, dp_event.GaussianDpEvent):
        return dp_event.GaussianDpEvent(event.noise_multiplier / 2.0)
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return dp_event.SelfComposedDpEvent(_halve_gaussians(event.event), event.count)
    if isinstance(event, dp_event.ComposedDpEvent):
        return dp_event.ComposedDpEvent([_halve_gaussians(e) for e in event.events])
    if isinstance(event, ReplaceOneDpEvent):
        return _halve_gaussians(event.event)
    raise ValueError(
        f"the RDP accountant has no replace-one bound for {type(event).__name__}; use --accountant pld"
    )


class ClassicRdpAccountant(MixedRelationRdpAccountant):
    """dp-accounting's RDP accountant with the classic RDP → (ε, δ) conversion.

    Composition is dp-accounting's (dense orders, ADD_OR_REMOVE_ONE); only the conversion
    differs. Pure Gaussian compositions are converted in closed form over all real α > 1
    (:func:`classic_gaussian_epsilon`); anything else over the dense order grid.
    """

    def __init__(self) -> None:
        super().__init__(orders=list(RDP_ORDERS))
        self._gaussian_mu_squared: float | None = 0.0

    def compose(self, event: dp_event.DpEvent, count: int = 1) -> ClassicRdpAccountant:
        """Compose ``event`` ``count`` times (dp-accounting's RDP composition)."""
        super().compose(event, count)
        if self._gaussian_mu_squared is not None:
            try:
                self._gaussian_mu_squared += _mu_squared(event, count)
            except ValueError:
                self._gaussian_mu_squared = None
        return self

    def get_epsilon(self, target_delta: float) -> float:
        """Classic-conversion ε at ``target_delta``."""
        if self._gaussian_mu_squared is not None:
            return classic_gaussian_epsilon(math.sqrt(self._gaussian_mu_squared), target_delta)
        return classic_rdp_epsilon(self._orders, self._rdp, target_delta)

    def get_delta(self, target_epsilon: float) -> float:
        """Classic-conversion δ: min over orders of exp(−(α − 1)(ε − rdp(α))), capped at 1."""
        orders = np.asarray(self._orders, dtype=float)
        usable = orders > 1.0
        with np.errstate(invalid="ignore", over="ignore"):
            log_delta = -(orders[usable] - 1.0) * (target_epsilon - self._rdp[usable])
        log_delta = np.where(np.isnan(log_delta), np.inf, log_delta)
        return float(min(1.0, math.exp(min(0.0, float(np.min(log_delta))))))
