"""compare's and sweep's total ε per level use the same fallback as a run's report, and name its accountant.

Where the composition of all rows' charges at a level has no PLD that fits in memory, the
total is dp-accounting's RDP of the same events (``total_accountant`` "rdp"), never a
refusal after the rows have run (``fedvote.privacy.accountant.bounded_epsilon``).
"""

from __future__ import annotations

import math
from contextlib import ExitStack

import pytest
from dp_accounting import dp_event, rdp

import fedvote.privacy.accountant as accountant
from fedvote.compare import _total_accountant, _total_epsilon
from fedvote.privacy.events import LevelEvents
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.sweep.ledgers import SweepLedgers

DELTA = 1e-3


def _release(agent_z: float, instance_z: float) -> LevelEvents:
    return LevelEvents(
        agent=dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(agent_z), 5),
        instance=dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(instance_z), 5),
        agent_sensitivity=1.0,
        instance_sensitivity=math.sqrt(2.0),
    )


def _no_instance_pld(monkeypatch) -> None:
    """The agent level's PLD (μ ≤ 1.6: ≤ 3.2·10⁵ points) fits, the instance level's (μ ≥ 3.2: ≥ 6.7·10⁵) does not."""
    monkeypatch.setattr(accountant, "PLD_MAX_POINTS", 4.5e5)
    monkeypatch.setattr(accountant, "PLD_COARSEST_DISCRETIZATION", accountant.PLD_DISCRETIZATION)


def _rdp(event) -> float:
    return float(rdp.RdpAccountant(orders=list(accountant.RDP_ORDERS)).compose(event).get_epsilon(DELTA))


@pytest.fixture()
def ledgers():
    first, second = PrivacyLedger(), PrivacyLedger()
    first.charge(_release(2.0, 0.7))
    second.charge(_release(2.0, 0.7))
    return first, second


def test_compare_totals_fall_back_to_rdp_and_say_so(monkeypatch, ledgers):
    ledger = ledgers[0]
    assert accountant.pld_points(ledger.event("instance")) > 4.5e5 > accountant.pld_points(ledger.event("agent"))
    _no_instance_pld(monkeypatch)
    total = _total_epsilon(ledger, DELTA, "pld")
    assert _total_accountant(ledger, DELTA, "pld") == {"agent": "pld", "instance": "rdp"}
    assert total["agent"] == pytest.approx(accountant.epsilon_for(ledger.event("agent"), DELTA, "pld"))
    assert total["instance"] == pytest.approx(_rdp(ledger.event("instance")), rel=1e-12)


def test_sweep_totals_fall_back_to_rdp_and_say_so(monkeypatch, ledgers):
    sweep = SweepLedgers({(None, "a"): ledgers[0], (None, "b"): ledgers[1]}, ExitStack())
    _no_instance_pld(monkeypatch)
    bounded = sweep.total_bounded(DELTA, "pld")
    assert bounded["agent"].accountant == "pld" and bounded["instance"].accountant == "rdp"
    both = dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(0.7), 10)
    assert bounded["instance"].epsilon == pytest.approx(_rdp(both), rel=1e-12)
    assert sweep.total(DELTA, "pld") == {level: bounded[level].epsilon for level in ("agent", "instance")}


def test_the_total_lines_name_each_levels_accountant():
    from fedvote.cli.compare import total_line
    from fedvote.cli.sweep import _total_line

    totals, accountants = {"agent": 1.5, "instance": 12.25}, {"agent": "pld", "instance": "rdp"}
    line = total_line(totals, DELTA, None, accountants)
    assert "agent-level 1.5000 [pld]" in line and "instance-level 12.2500 [rdp]" in line
    assert "[" not in total_line(totals, DELTA, None)  # results without the key: as before
    line = _total_line(totals, DELTA, accountants)
    assert "agent-level 1.500 [pld]" in line and "instance-level 12.250 [rdp]" in line
