"""Calibration: the smallest noise meeting a target ε (never above the target)."""

from __future__ import annotations

from collections.abc import Callable

from dp_accounting import dp_event, mechanism_calibration

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
    the chosen accountant only confirms a narrow bracket around it; otherwise σ doubles
    from 1 with the chosen accountant.
    """
    scout = accountant
    try:
        gaussian_mu(make_event(1.0))
        scout = "exact"
    except ValueError:
        pass
    low, high = 1e-3, 1.0
    while epsilon_for(make_event(high), delta, scout) > target_epsilon:
        low, high = high, high * 2.0
        if high > 1e7:
            raise ConfigError("epsilon", f"no noise up to σ = 1e7 reaches ε = {target_epsilon}")
    if scout == accountant:
        return low, high
    guess = calibrate_sigma(make_event, target_epsilon, delta, scout)
    low, high = guess * 0.98, guess * 1.02
    while epsilon_for(make_event(high), delta, accountant) > target_epsilon:
        low, high = high, high * 1.1
    while epsilon_for(make_event(low), delta, accountant) <= target_epsilon:
        low, high = low * 0.9, low
    return low, high
