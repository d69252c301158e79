"""Accounting of discrete Gaussian releases (--secure-noise) against independent computations.

* central N_Z(0, σ²): dp-accounting's discrete Gaussian PLD vs the continuous Gaussian's
  exact ε at large σ, and vs the hockey-stick divergence summed over the exact pmf at small σ;
* distributed (t shares of N_Z(0, σ²/t)): the KLS21 RDP bound vs the Rényi divergence of
  the exact pmf of the sum (convolution), computed by brute force;
* the events, the ledger's round trip, and the accountants that refuse.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from fedvote.aggregation.secure_noise import discrete_gaussian_pmf
from fedvote.errors import ConfigError
from fedvote.privacy.accountant import delta_for, epsilon_for, gaussian_epsilon
from fedvote.privacy.discrete import DiscreteGaussianDpEvent, discrete_gaussian_rdp, kls21_tau
from fedvote.privacy.events import pate_fl_discrete_events
from fedvote.privacy.ledger import event_from_json, event_to_json


def log_pmf_of_sum(sigma: float, shares: int) -> tuple[np.ndarray, np.ndarray]:
    """Support and log pmf of Σ of ``shares`` iid N_Z(0, σ²/shares), by exact convolution (float64)."""
    local = sigma / math.sqrt(shares)
    reach = math.ceil(30 * local) + 2
    one = discrete_gaussian_pmf(local, np.arange(-reach, reach + 1))
    total = one
    for _ in range(shares - 1):
        total = np.convolve(total, one)
    half = (total.size - 1) // 2
    with np.errstate(divide="ignore"):
        return np.arange(-half, half + 1), np.log(total)


def renyi_of_shift(log_p: np.ndarray, alpha: float, shift: int = 1) -> float:
    """D_α(P ‖ P shifted by ``shift``) = log Σ p(x)^α p(x − shift)^(1−α) / (α − 1), where both are > 1e-250."""
    log_q = np.full_like(log_p, -np.inf)
    log_q[shift:] = log_p[:-shift]
    keep = (log_p > math.log(1e-250)) & (log_q > math.log(1e-250))
    terms = alpha * log_p[keep] + (1.0 - alpha) * log_q[keep]
    return float(special.logsumexp(terms) / (alpha - 1.0))


def hockey_stick(log_p: np.ndarray, epsilon: float, shift: int = 1) -> float:
    """δ(ε) = Σ_x max(0, p(x) − e^ε p(x − shift)), the larger of the two directions (symmetric pmf)."""
    p = np.exp(log_p)
    q = np.zeros_like(p)
    q[shift:] = p[:-shift]
    return float(max(np.sum(np.maximum(p - math.exp(epsilon) * q, 0.0)),
                     np.sum(np.maximum(q - math.exp(epsilon) * p, 0.0))))


def test_central_discrete_gaussian_pld_approaches_the_continuous_gaussian_at_large_sigma() -> None:
    """σ = 25, Q = 500 (the worked example): within 0.5 % of the continuous exact ε, never far below."""
    events = pate_fl_discrete_events(25.0, 1, 500)
    continuous_agent = gaussian_epsilon(math.sqrt(500) / 25.0, 1e-3)  # 2.7354
    continuous_instance = gaussian_epsilon(math.sqrt(1000) / 25.0, 1e-3)  # 4.2077
    agent = epsilon_for(events.agent, 1e-3, "pld")
    instance = epsilon_for(events.instance, 1e-3, "pld")
    assert abs(agent - continuous_agent) < 5e-3 * continuous_agent
    assert abs(instance - continuous_instance) < 5e-3 * continuous_instance


@pytest.mark.parametrize("sigma", [0.6, 1.5])
def test_central_pld_bounds_the_brute_force_hockey_stick_at_small_sigma(sigma: float) -> None:
    """One coordinate, Δ = 1: the PLD's (pessimistic) δ(ε) ≥ the exact sum over the pmf, and close to it."""
    _, log_p = log_pmf_of_sum(sigma, 1)
    event = DiscreteGaussianDpEvent(sigma, 1, 1)
    for epsilon in (0.1, 0.5, 1.0, 2.0):
        exact = hockey_stick(log_p, epsilon)
        accounted = delta_for(event, epsilon, "pld")
        assert accounted >= exact - 1e-12
        assert accounted <= exact + 2e-3 * max(exact, 1e-3)


def test_central_pld_of_two_coordinates_bounds_the_brute_force_product() -> None:
    """Instance level moves two coordinates: δ(ε) of the product pair, enumerated over Z², is ≤ the PLD's."""
    sigma = 0.8
    support, log_p = log_pmf_of_sum(sigma, 1)
    p = np.exp(log_p)
    q = np.zeros_like(p)
    q[1:] = p[:-1]
    q_minus = np.zeros_like(p)
    q_minus[:-1] = p[1:]
    joint_p = np.outer(p, p)
    joint_q = np.outer(q, q_minus)  # e_a − e_b: one coordinate +1, the other −1
    event = pate_fl_discrete_events(sigma, 1, 1).instance
    for epsilon in (0.5, 1.5, 3.0):
        exact = float(np.sum(np.maximum(joint_p - math.exp(epsilon) * joint_q, 0.0)))
        assert delta_for(event, epsilon, "pld") >= exact - 1e-12
        assert support.size == p.size


@pytest.mark.parametrize(("sigma", "shares"), [(1.2, 3), (2.0, 4), (6.0, 5), (25.0, 50)])
def test_kls21_rdp_bounds_the_renyi_divergence_of_the_exact_sum(sigma: float, shares: int) -> None:
    """The RDP charged for t shares is ≥ D_α of the exact pmf of the sum (by convolution) at every order."""
    _, log_p = log_pmf_of_sum(sigma, shares)
    orders = np.array([1.5, 2.0, 3.0, 5.0, 8.0, 16.0])
    charged = discrete_gaussian_rdp(orders, sigma, shares, 1)
    for alpha, bound in zip(orders, charged, strict=True):
        exact = renyi_of_shift(log_p, float(alpha))
        assert exact <= bound + 1e-12, f"α = {alpha}: D_α = {exact} > charged {bound}"


def test_kls21_tau_vanishes_for_large_shares_and_matches_its_sum() -> None:
    assert kls21_tau(5.0, 1) == 0.0
    sigma, shares = 1.0, 4  # σ_l² = 1/4
    expected = 10 * sum(math.exp(-2 * math.pi**2 * 0.25 * k / (k + 1)) for k in range(1, 4))
    assert math.isclose(kls21_tau(sigma, shares), expected, rel_tol=1e-15)
    assert kls21_tau(25.0, 50) < 1e-40
    # With τ ≈ 0 the bound is the Gaussian's α/(2σ²) at ⌈α⌉.
    np.testing.assert_allclose(discrete_gaussian_rdp(np.array([2.0, 2.5]), 25.0, 50, 1), [2 / 1250, 3 / 1250])


def test_small_shares_fall_back_to_one_share_and_never_below_it() -> None:
    """σ_l < 1/2 is outside KLS21: one share's bound αΔ²/(2σ_l²) is charged."""
    orders = np.array([2.0, 4.0])
    np.testing.assert_allclose(discrete_gaussian_rdp(orders, 1.0, 16, 1), orders * 16 / 2.0)


def test_distributed_events_are_accounted_by_rdp_under_pld_and_central_ones_by_pld() -> None:
    distributed = pate_fl_discrete_events(25.0, 50, 500).agent
    assert epsilon_for(distributed, 1e-3, "pld") == epsilon_for(distributed, 1e-3, "rdp")
    central = pate_fl_discrete_events(25.0, 1, 500).agent
    assert epsilon_for(central, 1e-3, "pld") < epsilon_for(central, 1e-3, "rdp")
    # never below the continuous Gaussian's RDP figure for the same σ (τ ≥ 0, ⌈α⌉ ≥ α)
    assert epsilon_for(distributed, 1e-3, "rdp") >= gaussian_epsilon(math.sqrt(500) / 25.0, 1e-3)


def test_the_exact_accountant_refuses_discrete_events_by_name() -> None:
    with pytest.raises(ConfigError, match="accountant"):
        epsilon_for(pate_fl_discrete_events(10.0, 1, 10).agent, 1e-3, "exact")


def test_discrete_events_round_trip_through_the_ledger_format() -> None:
    events = pate_fl_discrete_events(7.5, 20, 30)
    for event in (events.agent, events.instance):
        assert event_from_json(event_to_json(event)) == event


@pytest.mark.parametrize(("sigma", "shares"), [(1.5, 1), (2.0, 3), (6.0, 5)])
def test_a_several_coordinate_event_bounds_every_count_shift_of_its_norm(sigma: float, shares: int) -> None:
    """Private-kNN-FL's agent event (Δ₂ = K = 3 counts, d = 3) ≥ Σ_j D_α over every split of 3 counts."""
    _, log_p = log_pmf_of_sum(sigma, shares)
    orders = np.array([1.5, 2.0, 4.0, 8.0])
    charged = discrete_gaussian_rdp(orders, sigma, shares, 3.0, 3)
    for split in ((3,), (2, 1), (1, 1, 1)):
        for alpha, bound in zip(orders, charged, strict=True):
            exact = sum(renyi_of_shift(log_p, float(alpha), shift) for shift in split)
            assert exact <= bound + 1e-12, f"split {split}, α = {alpha}: {exact} > {bound}"
    event = DiscreteGaussianDpEvent(sigma, shares, 3.0, 3)
    assert epsilon_for(event, 1e-3, "pld") == epsilon_for(event, 1e-3, "rdp")  # no PLD: RDP


@pytest.mark.parametrize("sigma", [0.8, 2.0])
def test_the_pld_at_the_largest_shift_bounds_every_smaller_shift(sigma: float) -> None:
    """Weighted votes move a coordinate by W ≤ W_max: the PLD at Δ = 3 is ≥ the exact δ(ε) at shifts 1, 2, 3."""
    _, log_p = log_pmf_of_sum(sigma, 1)
    event = DiscreteGaussianDpEvent(sigma, 1, 3)
    for epsilon in (0.5, 1.5, 3.0):
        accounted = delta_for(event, epsilon, "pld")
        for shift in (1, 2, 3):
            assert hockey_stick(log_p, epsilon, shift) <= accounted + 1e-12


def test_count_scale_events_round_trip_and_charge_their_ratio() -> None:
    """kNN (K-dimensional, Δ₂ = K) and weighted (Δ = round(K·w_max)) events survive the ledger format."""
    from fedvote.privacy.events import private_knn_fl_discrete_events, weighted_voting_discrete_events

    knn = private_knn_fl_discrete_events(3.0, 4, 20, 2, 5)
    weighted = weighted_voting_discrete_events(3.0, 4, 20, 0.5, 10)
    for event in (knn.agent, knn.instance, weighted.agent, weighted.instance):
        assert event_from_json(event_to_json(event)) == event
    assert knn.agent.event == DiscreteGaussianDpEvent(15.0, 4, 5.0, 5)  # σ_count = Kσ, Δ₂ = K, d = K
    assert weighted.agent.event == DiscreteGaussianDpEvent(30.0, 4, 5, 1)  # Δ = round(10 · 0.5)
    assert weighted.instance.count == 40  # two coordinates a query
