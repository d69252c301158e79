"""Accountants: the classic RDP conversion, the Bar numbers, and consistency with
dp-accounting computed independently here."""

import math

import numpy as np
import pytest
from dp_accounting import dp_event, pld, rdp
from dp_accounting.rdp import rdp_privacy_accountant

from fedvote.errors import ConfigError
from fedvote.privacy.accountant import (
    ACCOUNTANTS,
    ClassicRdpAccountant,
    classic_gaussian_epsilon,
    classic_rdp_epsilon,
    delta_for,
    epsilon_for,
    make_accountant,
)
from fedvote.privacy.events import gaussian_release_event, pate_fl_events

# Our own dense order list (independent of the module's RDP_ORDERS).
ORDERS = np.concatenate([np.linspace(1.02, 2.0, 50), np.linspace(2.05, 64.0, 1240), np.arange(65, 400)])


def brute_force_classic(mu, delta):
    """min over a fine grid of α·μ²/2 + log(1/δ)/(α − 1) (Mironov 2017, Prop. 3)."""
    alphas = 1.0 + np.geomspace(1e-4, 1e5, 400_001)
    return float(np.min(alphas * mu**2 / 2 + math.log(1 / delta) / (alphas - 1)))


def test_the_bar_numbers_for_pate_fl_agent_level():
    # Issue 3's Bar: pate-fl --sigma 25 --queries 500 --delta 1e-3 --level agent
    # → PLD ≈ 2.74, classic ≈ 3.7, rdp ≈ 3.09 (dp-accounting 0.6.0).
    event = pate_fl_events(25.0, 500).agent
    independent_pld = pld.PLDAccountant().compose(dp_event.GaussianDpEvent(25.0), 500).get_epsilon(1e-3)
    independent_rdp = rdp.RdpAccountant(orders=list(ORDERS)).compose(
        dp_event.GaussianDpEvent(25.0), 500
    ).get_epsilon(1e-3)
    assert epsilon_for(event, 1e-3, "pld") == pytest.approx(independent_pld, rel=0.01)
    assert epsilon_for(event, 1e-3, "pld") == pytest.approx(2.74, abs=0.01)
    assert epsilon_for(event, 1e-3, "exact") == pytest.approx(independent_pld, rel=0.01)
    assert epsilon_for(event, 1e-3, "rdp") == pytest.approx(independent_rdp, rel=0.01)
    assert epsilon_for(event, 1e-3, "rdp") == pytest.approx(3.09, abs=0.01)
    classic = epsilon_for(event, 1e-3, "classic")
    assert classic == pytest.approx(brute_force_classic(math.sqrt(500) / 25, 1e-3), rel=1e-6)
    assert classic == pytest.approx(3.72, abs=0.01)


@pytest.mark.parametrize("mu", [0.05, 0.3, 0.894, 2.0, 10.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6])
def test_classic_closed_form_is_the_minimum_over_orders(mu, delta):
    assert classic_gaussian_epsilon(mu, delta) == pytest.approx(brute_force_classic(mu, delta), rel=1e-6)
    # the classic conversion is never tighter than the improved one, nor than the exact ε
    orders = ORDERS
    improved, _ = rdp_privacy_accountant.compute_epsilon(orders, orders * mu**2 / 2, delta)
    assert classic_gaussian_epsilon(mu, delta) >= improved - 1e-9
    assert classic_gaussian_epsilon(mu, delta) >= epsilon_for(
        gaussian_release_event(1.0 / mu, 1.0, 1), delta, "exact"
    )


def test_classic_on_a_grid_matches_the_formula():
    orders = np.array([1.5, 2.0, 4.0, 8.0])
    rdp_values = np.array([0.1, 0.2, 0.5, 1.0])
    expected = min(r + math.log(1e3) / (a - 1) for a, r in zip(orders, rdp_values, strict=True))
    assert classic_rdp_epsilon(orders, rdp_values, 1e-3) == pytest.approx(expected)


def test_classic_accountant_for_subsampled_events_is_between_rdp_and_a_loose_bound():
    event = dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.05, dp_event.GaussianDpEvent(1.5)), 60)
    accountant = ClassicRdpAccountant().compose(event)
    classic = accountant.get_epsilon(1e-5)
    improved = epsilon_for(event, 1e-5, "rdp")
    assert improved <= classic <= improved + math.log(1 / 1e-5)
    # δ(ε) and ε(δ) of the classic conversion are consistent
    assert accountant.get_delta(classic) <= 1e-5 * (1 + 1e-6)
    assert accountant.get_delta(classic * 0.9) > 1e-5


def test_classic_delta_is_consistent_for_gaussians():
    event = pate_fl_events(25.0, 500).agent
    eps = epsilon_for(event, 1e-3, "classic")
    # the grid of orders can only be looser than the continuous optimum: δ(ε) ≥ 1e-3 − tiny
    assert delta_for(event, eps, "classic") == pytest.approx(1e-3, rel=0.02)
    assert delta_for(event, eps + 0.5, "classic") < 1e-3


@pytest.mark.parametrize(("sigma", "sensitivity", "count"), [(25.0, 1.0, 500), (25.0, math.sqrt(2), 500),
                                                             (5.0, 1.0, 3), (100.0, 1.0, 100_000)])
def test_exact_matches_pld_within_one_percent(sigma, sensitivity, count):
    event = gaussian_release_event(sigma, sensitivity, count)
    assert epsilon_for(event, 1e-5, "exact") == pytest.approx(epsilon_for(event, 1e-5, "pld"), rel=0.01)


def test_accountant_kinds_and_errors():
    assert ACCOUNTANTS == ("pld", "rdp", "exact", "classic")
    assert isinstance(make_accountant("classic"), ClassicRdpAccountant)
    with pytest.raises(ConfigError):
        make_accountant("moments")
    with pytest.raises(ConfigError):
        epsilon_for(pate_fl_events(1.0, 1).agent, 0.0)
    assert math.isinf(epsilon_for(dp_event.NonPrivateDpEvent(), 1e-3, "classic"))
    assert epsilon_for(dp_event.NoOpDpEvent(), 1e-3, "classic") == 0.0


@pytest.mark.parametrize("kind", ["pld", "rdp", "exact", "classic"])
def test_a_non_private_part_makes_the_composition_unbounded_without_building_the_rest(kind):
    """A huge-μ Gaussian next to a non-private release: ε is ∞ (dp-accounting's PLD of the
    Gaussian alone would need tens of GB before it reached the non-private part)."""
    huge = dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(0.001), 1000)
    event = dp_event.ComposedDpEvent([huge, dp_event.NonPrivateDpEvent()])
    assert epsilon_for(event, 1e-5, kind) == math.inf
    nested = dp_event.SelfComposedDpEvent(event, 3)
    assert epsilon_for(nested, 1e-5, kind) == math.inf
