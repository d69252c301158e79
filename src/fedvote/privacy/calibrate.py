"""Calibration: the smallest noise meeting a target ε (never above the target).

Also the output-perturbation pieces FedAUXfdp needs: the sensitivity of L2-regularised
logistic regression (Theorem 1 of ``fedaux-fdp.txt``) and single-release Gaussian
calibration, classic (ε < 1 only) and analytic (any ε).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from dp_accounting import dp_event, gaussian_mechanism, mechanism_calibration
from dp_accounting.privacy_accountant import NeighboringRelation, PrivacyAccountant
from scipy import optimize

from fedvote.errors import ConfigError
from fedvote.privacy.accountant import PLDTooLarge, delta_for, epsilon_for, gaussian_epsilon, gaussian_mu
from fedvote.privacy.config import SIGMA_CEILING, SIGMA_FLOOR  # the range σ is searched in

# Relative tolerance on σ; the result always satisfies ε(σ) ≤ target.
SIGMA_RELATIVE_TOLERANCE = 1e-4

# What the search takes as the ε of a release it cannot account at all (PLDTooLarge: far
# too little noise); finite, so that Brent's method can interpolate through it.
_UNACCOUNTABLE = 1e300


def calibrate_sigma(
    make_event: Callable[[float], dp_event.DpEvent],
    target_epsilon: float,
    delta: float,
    accountant: str = "pld",
) -> float:
    """Smallest σ (within 0.01 % relative) with ε(make_event(σ)) ≤ ``target_epsilon`` at ``delta``.

    Wraps dp-accounting's ``calibrate_dp_mechanism`` (Brent's method with a bisection
    fallback that guarantees the constraint), searching σ in [:data:`SIGMA_FLOOR`,
    :data:`SIGMA_CEILING`] in a bracket found from the exact Gaussian form or by doubling.
    Every ε is :func:`~fedvote.privacy.accountant.epsilon_for`'s, so a release with little
    noise is never given to a PLD too large for memory. With ``pld`` the search runs on a
    grid :data:`PLD_SEARCH_COARSENING` times coarser and :func:`_refine` finishes it on the
    fine grid in a few evaluations (several times faster; the answer is the same σ within
    the tolerance). A target met only below the floor (e.g. ε = 10⁴ for a few queries) or
    only above the ceiling is refused in one line. The returned σ is checked once more
    against the target.
    """
    if not (target_epsilon > 0 and math.isfinite(target_epsilon)):
        raise ConfigError("epsilon", f"the target must be a finite number > 0, got {target_epsilon}")
    if not 0.0 < delta < 1.0:
        raise ConfigError("delta", f"must lie in (0, 1), got {delta}")

    if accountant == "pld":  # search on a coarse grid, then refine on the fine one
        coarse = _search(
            make_event, target_epsilon, delta, accountant, PLD_SEARCH_COARSENING, COARSE_RELATIVE_TOLERANCE
        )
        return _refine(lambda sigma: _epsilon(make_event(sigma), delta, accountant), coarse, target_epsilon)
    return _search(make_event, target_epsilon, delta, accountant, 1, SIGMA_RELATIVE_TOLERANCE)


def memoised_calibration(
    events_at: Callable[[Any, float], dp_event.DpEvent],
    target_epsilon: float,
    delta: float,
    accountant: str = "pld",
) -> Callable[[Any], float]:
    """``calibrate(candidate)``: :func:`calibrate_sigma` of ``events_at(candidate, σ)``, once per plan.

    A planner that tries several candidates (DP-FedAvg's q, :mod:`fedvote.methods.cohort`) and then
    calibrates the one it keeps pays once for each distinct release plan (its events at σ = 1).
    """
    known: dict[str, float] = {}

    def calibrate(candidate: Any) -> float:
        key = repr(events_at(candidate, 1.0))
        if key not in known:
            known[key] = calibrate_sigma(lambda s: events_at(candidate, s), target_epsilon, delta, accountant)
        return known[key]

    return calibrate


# The pld search first runs on a grid this many times coarser (a tenth of the points, and
# of the time), then :func:`_refine` spends a few evaluations on the fine grid.
PLD_SEARCH_COARSENING = 10
# The coarse search's tolerance: tight enough that the fine answer usually lies within
# ±tolerance/2 of it (two fine evaluations), cheap at the coarse grid.
COARSE_RELATIVE_TOLERANCE = SIGMA_RELATIVE_TOLERANCE / 20


def _search(
    make_event: Callable[[float], dp_event.DpEvent],
    target_epsilon: float,
    delta: float,
    accountant: str,
    coarsening: int,
    tolerance: float,
) -> float:
    """Smallest σ (within ``tolerance``, relative) with ε ≤ target by ``accountant`` at ``coarsening``.

    Brent's method in a bracket (dp-accounting's ``calibrate_dp_mechanism``).
    """

    def eps(sigma: float) -> float:
        return _epsilon(make_event(sigma), delta, accountant, coarsening)

    low, high = _bracket(make_event, eps, target_epsilon, delta, accountant)
    sigma = float(
        mechanism_calibration.calibrate_dp_mechanism(
            lambda: _EpsilonFor(accountant, coarsening),
            make_event,
            target_epsilon,
            delta,
            bracket_interval=mechanism_calibration.ExplicitBracketInterval(low, high),
            tol=tolerance * high,
        )
    )
    # Calibration returns the *noise* parameter, where ε falls as σ grows; guard the
    # contract explicitly rather than trust the search direction.
    while eps(sigma) > target_epsilon:
        sigma *= 1.0 + tolerance
    return sigma


def _refine(eps: Callable[[float], float], start: float, target_epsilon: float) -> float:
    """The smallest σ (within :data:`SIGMA_RELATIVE_TOLERANCE`) with ``eps(σ)`` ≤ target, near ``start``.

    ``start`` solves the same problem on a coarser grid, to a twentieth of the tolerance;
    the coarse grid's pessimistic ε is never below this one's, and differs from it by far
    less than the tolerance in practice. So the bracket start·(1 ± tolerance/2) usually
    holds the answer: two evaluations. Otherwise it is grown (steps ×4) and closed by
    Brent's method. The returned σ meets the target by ``eps`` itself.
    """
    tolerance = SIGMA_RELATIVE_TOLERANCE
    low = max(start * (1.0 - tolerance / 2), SIGMA_FLOOR)
    high = min(start * (1.0 + tolerance / 2), SIGMA_CEILING)
    step = tolerance
    while eps(high) > target_epsilon:  # not expected: the answer lies above the bracket
        if high >= SIGMA_CEILING:
            raise _no_noise_reaches(target_epsilon)
        low, step = high, step * 4.0
        high = min(high * (1.0 + step), SIGMA_CEILING)
    while eps(low) <= target_epsilon:  # the fine grid's answer lies below the bracket
        if low <= SIGMA_FLOOR:
            return low
        high, step = low, min(step * 4.0, 0.5)
        low = max(low * (1.0 - step), SIGMA_FLOOR)
    if high - low > tolerance * high * (1.0 + 1e-9):
        root = optimize.brentq(lambda sigma: eps(sigma) - target_epsilon, low, high, xtol=tolerance * low / 2)
        high = max(float(root), low)
        while eps(high) > target_epsilon:  # Brent's root may sit a hair on the wrong side
            high *= 1.0 + tolerance / 2
    return high


def _epsilon(event: dp_event.DpEvent, delta: float, accountant: str, coarsening: int = 1) -> float:
    """:func:`epsilon_for`, with a release too little noised to account as :data:`_UNACCOUNTABLE`."""
    try:
        return min(epsilon_for(event, delta, accountant, coarsening), _UNACCOUNTABLE)
    except PLDTooLarge:
        return _UNACCOUNTABLE


class _EpsilonFor(PrivacyAccountant):
    """:func:`_epsilon` as a dp-accounting accountant, for ``calibrate_dp_mechanism``.

    The search then takes every ε where the rest of fedvote does: a large-μ Gaussian by its
    closed form, a subsampled one at a PLD discretisation that fits in memory.
    """

    def __init__(self, kind: str, coarsening: int = 1) -> None:
        super().__init__(NeighboringRelation.ADD_OR_REMOVE_ONE)
        self._kind = kind
        self._coarsening = coarsening
        self._event: dp_event.DpEvent = dp_event.NoOpDpEvent()

    def _maybe_compose(
        self, event: dp_event.DpEvent, count: int, do_compose: bool
    ) -> PrivacyAccountant.CompositionErrorDetails | None:
        if do_compose:
            self._event = event if count == 1 else dp_event.SelfComposedDpEvent(event, count)
        return None

    def get_epsilon(self, target_delta: float) -> float:
        """ε of the composed event, by :func:`_epsilon`."""
        return _epsilon(self._event, target_delta, self._kind, self._coarsening)

    def get_delta(self, target_epsilon: float) -> float:
        """δ of the composed event, by :func:`delta_for`."""
        return delta_for(self._event, target_epsilon, self._kind)


def _below_floor(target_epsilon: float, floor_epsilon: float) -> ConfigError:
    return ConfigError(
        "epsilon",
        f"ε = {target_epsilon:g} needs less noise than σ = {SIGMA_FLOOR:g}, below which a run is "
        f"not private in any useful sense (ε = {floor_epsilon:.4g} there): give a smaller ε, "
        "or --sigma 0 for a non-private reference",
    )


def _no_noise_reaches(target_epsilon: float) -> ConfigError:
    return ConfigError(
        "epsilon",
        f"ε = {target_epsilon:g} needs more noise than σ = {SIGMA_CEILING:g}, which already drowns "
        "every release: give a larger ε",
    )


def _bracket(
    make_event: Callable[[float], dp_event.DpEvent],
    eps: Callable[[float], float],
    target_epsilon: float,
    delta: float,
    accountant: str,
) -> tuple[float, float]:
    """A bracket (low, high) with ε(high) ≤ target < ε(low), inside [SIGMA_FLOOR, SIGMA_CEILING].

    ``eps`` is ε by the chosen accountant. For purely Gaussian events the exact closed
    form (microseconds) locates σ first and the chosen accountant only confirms a narrow
    bracket around it. Other events (e.g. Poisson-subsampled Gaussians) are bracketed by
    doubling and halving from σ = 1 with the chosen accountant. A target met at the floor
    or missed at the ceiling is refused.
    """
    try:
        gaussian_mu(make_event(1.0))
    except ValueError:
        return _bracket_by_doubling(eps, target_epsilon)

    def exact(sigma: float) -> float:
        return epsilon_for(make_event(sigma), delta, "exact")

    floor_epsilon = eps(SIGMA_FLOOR)  # cheap: a Gaussian with μ ≥ 100 takes the closed form
    if floor_epsilon <= target_epsilon:
        raise _below_floor(target_epsilon, floor_epsilon)
    if exact(SIGMA_FLOOR) <= target_epsilon:
        guess = SIGMA_FLOOR  # the chosen accountant is looser: its σ lies above the floor
    else:
        try:
            unreachable = exact(SIGMA_CEILING) > target_epsilon
        except ConfigError:  # a method whose σ cannot go that high (DP-FedAvg's fixed-point range)
            unreachable = False
        if unreachable:
            raise _no_noise_reaches(target_epsilon)
        low, high = SIGMA_FLOOR, 1.0
        while exact(high) > target_epsilon:
            low, high = high, min(high * 2.0, SIGMA_CEILING)
        if accountant == "exact":
            return low, high
        guess = calibrate_sigma(make_event, target_epsilon, delta, "exact")
    low, high = max(guess * 0.98, SIGMA_FLOOR), guess * 1.02
    while eps(high) > target_epsilon:
        low, high = high, high * 1.1
        if high > SIGMA_CEILING:
            raise _no_noise_reaches(target_epsilon)
    while eps(low) <= target_epsilon:  # ends: ε(SIGMA_FLOOR) > target
        low, high = max(low * 0.9, SIGMA_FLOOR), low
    return low, high


def _bracket_by_doubling(eps: Callable[[float], float], target_epsilon: float) -> tuple[float, float]:
    high = 1.0
    while eps(high) > target_epsilon:
        if high >= SIGMA_CEILING:
            raise _no_noise_reaches(target_epsilon)
        high = min(high * 2.0, SIGMA_CEILING)
    low = high / 2.0
    while (low_epsilon := eps(low)) <= target_epsilon:
        if low <= SIGMA_FLOOR:
            raise _below_floor(target_epsilon, low_epsilon)
        high, low = low, max(low / 2.0, SIGMA_FLOOR)
    return low, high


# -- Output perturbation (FedAUXfdp) ---------------------------------------------------


def multinomial_logistic_sensitivity(num_classes: int, regularization: float, num_records: int) -> float:
    """L2 sensitivity 2√C/(λ·|D|) of L2-regularised multinomial logistic regression.

    Theorem 1 of ``fedaux-fdp.txt``, for the objective J(β) = mean cross-entropy +
    λ/2·‖β‖² over |D| records whose features satisfy ‖h(x)‖ ≤ 1, under replace-one
    adjacency. ``regularization`` is that λ. Solvers spell it differently: scikit-learn's
    ``LogisticRegression`` minimises ½‖β‖² + C·Σ loss, which is the same optimum when
    ``C = 1/(λ·n)`` — passing ``C = 1/λ`` instead silently multiplies the privacy loss by n.
    """
    _check_positive("num_classes", num_classes)
    _check_positive("regularization", regularization)
    _check_positive("num_records", num_records)
    return 2.0 * math.sqrt(num_classes) / (regularization * num_records)


def binary_logistic_sensitivity(regularization: float, num_records: int) -> float:
    """L2 sensitivity 2/(λ·|D|) of one L2-regularised binary logistic head (Chaudhuri et al. 2011).

    The binary case of Theorem 1 in ``fedaux-fdp.txt`` (one parameter vector); same
    objective and same λ ↔ solver mapping as :func:`multinomial_logistic_sensitivity`.
    """
    _check_positive("regularization", regularization)
    _check_positive("num_records", num_records)
    return 2.0 / (regularization * num_records)


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """σ = √(2 ln(1.25/δ))·Δ/ε, the classic Gaussian mechanism (Dwork & Roth 2014, Thm A.1).

    Proven only for ε < 1, so larger ε is refused (use :func:`analytic_gaussian_sigma`).
    """
    if not 0.0 < epsilon < 1.0:
        raise ConfigError("epsilon", f"the classic Gaussian mechanism needs 0 < ε < 1, got {epsilon}")
    if not 0.0 < delta < 1.0:
        raise ConfigError("delta", f"must lie in (0, 1), got {delta}")
    _check_positive("sensitivity", sensitivity)
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon


def analytic_gaussian_sigma(
    epsilon: float, delta: float, sensitivity: float, argument: str = "epsilon"
) -> float:
    """Smallest σ making one Gaussian release (ε, δ)-DP, any ε > 0 (Balle & Wang 2018, Alg. 1).

    dp-accounting's ``get_sigma_gaussian`` for unit sensitivity, scaled by Δ. The noise
    per unit of sensitivity is kept in [:data:`SIGMA_FLOOR`, :data:`SIGMA_CEILING`], as
    in :func:`calibrate_sigma`: an ε met only outside is refused in one line naming
    ``argument`` (dp-accounting's search returns NaN for ε near 1e155).
    """
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ConfigError(argument, f"must be a finite number > 0, got {epsilon}")
    if not 0.0 < delta < 1.0:
        raise ConfigError("delta", f"must lie in (0, 1), got {delta}")
    _check_positive("sensitivity", sensitivity)
    floor_epsilon = gaussian_epsilon(1.0 / SIGMA_FLOOR, delta)
    if epsilon > floor_epsilon:
        raise ConfigError(
            argument,
            f"ε = {epsilon:g} needs less noise than σ = {SIGMA_FLOOR:g} per unit of sensitivity, "
            f"below which a release is not private in any useful sense (ε = {floor_epsilon:.4g} "
            "there): give a smaller ε",
        )
    if epsilon < gaussian_epsilon(1.0 / SIGMA_CEILING, delta):
        raise ConfigError(
            argument,
            f"ε = {epsilon:g} needs more noise than σ = {SIGMA_CEILING:g} per unit of sensitivity, "
            "which already drowns every release: give a larger ε",
        )
    return float(gaussian_mechanism.get_sigma_gaussian(epsilon, delta)) * sensitivity


def _check_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(name, f"must be > 0, got {value}")
