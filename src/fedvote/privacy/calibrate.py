"""Calibration: the smallest noise meeting a target ε (never above the target).

Also the output-perturbation pieces FedAUXfdp needs: the sensitivity of L2-regularised
logistic regression (Theorem 1 of ``fedaux-fdp.txt``) and single-release Gaussian
calibration, classic (ε < 1 only) and analytic (any ε).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dp_accounting import dp_event, gaussian_mechanism, mechanism_calibration

from fedvote.errors import ConfigError
from fedvote.privacy.accountant import epsilon_for, gaussian_mu, make_accountant

# Relative tolerance on σ; the result always satisfies ε(σ) ≤ target.
SIGMA_RELATIVE_TOLERANCE = 1e-4


def calibrate_sigma(
    make_event: Callable[[float], dp_event.DpEvent],
    target_epsilon: float,
    delta: float,
    accountant: str = "pld",
) -> float:
    """Smallest σ (within 0.01 % relative) with ε(make_event(σ)) ≤ ``target_epsilon`` at ``delta``.

    Wraps dp-accounting's ``calibrate_dp_mechanism`` (Brent's method with a bisection
    fallback that guarantees the constraint), searching σ in a bracket found by
    doubling. The returned σ is checked once more against the target.
    """
    if not target_epsilon > 0:
        raise ConfigError("epsilon", f"the target must be > 0, got {target_epsilon}")
    if not 0.0 < delta < 1.0:
        raise ConfigError("delta", f"must lie in (0, 1), got {delta}")
    low, high = _bracket(make_event, target_epsilon, delta, accountant)
    sigma = float(
        mechanism_calibration.calibrate_dp_mechanism(
            lambda: make_accountant(accountant),
            make_event,
            target_epsilon,
            delta,
            bracket_interval=mechanism_calibration.ExplicitBracketInterval(low, high),
            tol=SIGMA_RELATIVE_TOLERANCE * high,
        )
    )
    # Calibration returns the *noise* parameter, where ε falls as σ grows; guard the
    # contract explicitly rather than trust the search direction.
    while epsilon_for(make_event(sigma), delta, accountant) > target_epsilon:
        sigma *= 1.0 + SIGMA_RELATIVE_TOLERANCE
    return sigma


def _bracket(
    make_event: Callable[[float], dp_event.DpEvent],
    target_epsilon: float,
    delta: float,
    accountant: str,
) -> tuple[float, float]:
    """A bracket (low, high) with ε(high) ≤ target < ε(low).

    For purely Gaussian events the exact closed form (microseconds) locates σ first and
    the chosen accountant only confirms a narrow bracket around it. Other events (e.g.
    Poisson-subsampled Gaussians) are bracketed by doubling and halving from σ = 1 with
    the chosen accountant, never below σ = 0.01: a subsampled Gaussian's PLD at tiny σ
    does not fit in memory, and no useful ε lies there.
    """
    try:
        gaussian_mu(make_event(1.0))
    except ValueError:
        return _bracket_by_doubling(make_event, target_epsilon, delta, accountant)
    low, high = 1e-3, 1.0
    while epsilon_for(make_event(high), delta, "exact") > target_epsilon:
        low, high = high, high * 2.0
        if high > 1e7:
            raise ConfigError("epsilon", f"no noise up to σ = 1e7 reaches ε = {target_epsilon}")
    if accountant == "exact":
        return low, high
    guess = calibrate_sigma(make_event, target_epsilon, delta, "exact")
    low, high = guess * 0.98, guess * 1.02
    while epsilon_for(make_event(high), delta, accountant) > target_epsilon:
        low, high = high, high * 1.1
    while epsilon_for(make_event(low), delta, accountant) <= target_epsilon:
        low, high = low * 0.9, low
    return low, high


_SMALLEST_SIGMA = 1e-2


def _bracket_by_doubling(
    make_event: Callable[[float], dp_event.DpEvent],
    target_epsilon: float,
    delta: float,
    accountant: str,
) -> tuple[float, float]:
    def eps(sigma: float) -> float:
        return epsilon_for(make_event(sigma), delta, accountant)

    high = 1.0
    while eps(high) > target_epsilon:
        high *= 2.0
        if high > 1e7:
            raise ConfigError("epsilon", f"no noise up to σ = 1e7 reaches ε = {target_epsilon}")
    low = high / 2.0
    while eps(low) <= target_epsilon:
        high, low = low, low / 2.0
        if low < _SMALLEST_SIGMA:
            raise ConfigError(
                "epsilon", f"ε = {target_epsilon} is met with noise below σ = {_SMALLEST_SIGMA}"
            )
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


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest σ making one Gaussian release (ε, δ)-DP, any ε > 0 (Balle & Wang 2018, Alg. 1).

    dp-accounting's ``get_sigma_gaussian`` for unit sensitivity, scaled by Δ.
    """
    if not epsilon > 0:
        raise ConfigError("epsilon", f"must be > 0, got {epsilon}")
    if not 0.0 < delta < 1.0:
        raise ConfigError("delta", f"must lie in (0, 1), got {delta}")
    _check_positive("sensitivity", sensitivity)
    return float(gaussian_mechanism.get_sigma_gaussian(epsilon, delta)) * sensitivity


def _check_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(name, f"must be > 0, got {value}")
