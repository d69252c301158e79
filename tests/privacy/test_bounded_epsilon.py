"""A level whose PLD cannot be built: RDP's upper bound of the same events, or ∞ (``bounded_epsilon``).

Only the level a run calibrates must be PLD-accountable (``fedvote.runner._check_accountable``);
the other level is reported by :func:`fedvote.privacy.accountant.bounded_epsilon`. These tests
hold its figure equal to dp-accounting's own ``RdpAccountant`` on the same events, never below
the PLD wherever both can be computed, and ∞ (accountant "none") where RDP cannot account
the events either. The PLD's size limits are lowered with ``monkeypatch`` so that small,
fast events stand for the huge ones of a real run.
"""

from __future__ import annotations

import math

import pytest
from dp_accounting import dp_event, rdp

import fedvote.privacy.accountant as accountant
from fedvote.privacy.accountant import (
    NO_BOUND,
    RDP_ORDERS,
    PLDTooLarge,
    bounded_epsilon,
    check_pld_accountable,
    clear_epsilon_memo,
    epsilon_bound,
    epsilon_for,
    gaussian_epsilon,
    gaussian_mu,
    pld_discretization,
)
from fedvote.privacy.events import ReplaceOneDpEvent

DELTA = 1e-3


def _gaussians(z: float, count: int) -> dp_event.DpEvent:
    return dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(z), count)


def _sampled(z: float, q: float = 0.25, steps: int = 20) -> dp_event.DpEvent:
    return dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), steps)


def _dp_accounting_rdp(event: dp_event.DpEvent, delta: float = DELTA) -> float:
    """dp-accounting's own RDP accountant (not fedvote's subclass) on the same orders."""
    return float(rdp.RdpAccountant(orders=list(accountant.RDP_ORDERS)).compose(event).get_epsilon(delta))


@pytest.fixture(autouse=True)
def _fresh_memo():
    clear_epsilon_memo()  # each test's limits decide which path an ε takes
    yield
    clear_epsilon_memo()


def _no_pld_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every PLD is 'too large': 10 points at most, never coarsened; Gaussians built as PLDs too.

    The RDP orders stop at 256 (the product's tail to 1e5 costs seconds per sampled event): the
    same list for fedvote and for dp-accounting, and fewer orders only loosen RDP's figure.
    """
    monkeypatch.setattr(accountant, "RDP_ORDERS", tuple(o for o in RDP_ORDERS if o <= 256))
    monkeypatch.setattr(accountant, "PLD_MAX_POINTS", 10.0)
    monkeypatch.setattr(accountant, "PLD_COARSEST_DISCRETIZATION", accountant.PLD_DISCRETIZATION)
    monkeypatch.setattr(accountant, "PLD_MAX_GAUSSIAN_MU", math.inf)


CASES = [
    _gaussians(3.0, 10),  # μ = 1.05
    _gaussians(0.7, 4),  # μ = 2.86
    dp_event.ComposedDpEvent([_gaussians(2.0, 5), dp_event.GaussianDpEvent(0.9)]),
    _sampled(1.1),
    dp_event.ComposedDpEvent([_sampled(0.9, q=0.1, steps=30), _gaussians(4.0, 3)]),
]


@pytest.mark.parametrize("event", CASES)
def test_where_no_pld_fits_the_figure_is_dp_accountings_rdp_of_the_same_events(monkeypatch, event):
    _no_pld_fits(monkeypatch)
    with pytest.raises(PLDTooLarge):
        epsilon_for(event, DELTA, "pld")  # the run's accountant cannot account it
    bounded = bounded_epsilon(event, DELTA, "pld")
    assert bounded.accountant == "rdp"
    assert bounded.fallback is not None and bounded.fallback.startswith("pld: ")
    assert bounded.epsilon == pytest.approx(_dp_accounting_rdp(event), rel=1e-12)
    assert epsilon_bound(event, DELTA, "pld") == bounded.epsilon


@pytest.mark.parametrize("event", CASES)
def test_the_rdp_fallback_is_never_below_the_pld_where_both_are_computed(monkeypatch, event):
    pld_epsilon = epsilon_for(event, DELTA, "pld")  # the product's limits: the PLD is built
    clear_epsilon_memo()
    with monkeypatch.context() as patched:
        _no_pld_fits(patched)
        fallback = bounded_epsilon(event, DELTA, "pld")
    assert fallback.accountant == "rdp"
    assert fallback.epsilon >= pld_epsilon
    assert fallback.epsilon <= 1.5 * pld_epsilon + 0.5  # an upper bound, not a wild one


def test_a_pure_gaussian_beyond_the_pld_range_is_its_exact_closed_form_and_accountable(monkeypatch):
    """FedAUX's agent level on Fashion-MNIST: a composition of two Gaussians with μ ≈ 1,700."""
    monkeypatch.setattr(accountant, "PLD_COARSEST_DISCRETIZATION", 1e-3)  # a smaller ceiling for a fast test
    event = dp_event.ComposedDpEvent([dp_event.GaussianDpEvent(0.014), dp_event.GaussianDpEvent(0.00059)])
    with pytest.raises(PLDTooLarge):
        pld_discretization(event)  # what the runner asked before: it refused the run
    check_pld_accountable(event)  # epsilon_for builds no PLD for it: nothing to refuse
    bounded = bounded_epsilon(event, DELTA, "pld")
    mu = gaussian_mu(event)
    assert mu > 1000
    assert bounded.accountant == "exact" and bounded.fallback is None
    assert bounded.epsilon == gaussian_epsilon(mu, DELTA)
    assert bounded.epsilon <= _dp_accounting_rdp(event)  # the tight figure (RDP, all orders, only bounds it)


def test_no_finite_bound_where_rdp_cannot_account_the_events_either():
    """A replace-one Poisson-sampled step with almost no noise: no PLD fits, RDP refuses replace-one sampling."""
    event = ReplaceOneDpEvent(_sampled(1e-9, steps=100))
    with pytest.raises(PLDTooLarge):
        check_pld_accountable(event)
    bounded = bounded_epsilon(event, DELTA, "pld")
    assert bounded.epsilon == math.inf
    assert bounded.accountant == NO_BOUND
    assert "pld: " in (bounded.fallback or "") and "rdp: " in (bounded.fallback or "")


def test_other_accountants_and_accountable_events_keep_their_own_figure():
    event = _gaussians(3.0, 10)
    for kind in ("rdp", "classic", "exact"):
        bounded = bounded_epsilon(event, DELTA, kind)
        assert (bounded.epsilon, bounded.accountant, bounded.fallback) == (epsilon_for(event, DELTA, kind), kind, None)
    pld = bounded_epsilon(_sampled(1.1), DELTA, "pld")
    assert (pld.accountant, pld.fallback) == ("pld", None)
    assert pld.epsilon == epsilon_for(_sampled(1.1), DELTA, "pld")
    assert bounded_epsilon(dp_event.NonPrivateDpEvent(), DELTA, "pld").epsilon == math.inf
