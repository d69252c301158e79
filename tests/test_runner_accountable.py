"""Only the level a run calibrates must be PLD-accountable (``fedvote.runner._check_accountable``).

FedAUXfdp, FedAVG+P and FedD+P calibrate at the instance level; their agent level is a
Gaussian with μ in the hundreds or thousands, whose PLD would need ~10¹⁰ points. The runner
used to refuse them on their own defaults (Fashion-MNIST, 20 agents). Now the run plans, and a
level it does not calibrate is reported by the run's accountant where it can (a pure Gaussian:
the exact closed form its PLD equals), else by RDP's upper bound of the same events, else ∞ —
labelled in result.json (``privacy.<level>.accountant``, ``accountant_fallback``) and in the
summary. The level a run calibrates is still refused in one line naming its flag.

Small and fast: digits, 2–3 agents, planning without training (one CLI run of FedAUXfdp); the
PLD's size limits are lowered with ``monkeypatch`` so that digits' events stand for
Fashion-MNIST's.
"""

from __future__ import annotations

import json
import math

import pytest
from dp_accounting import rdp

import fedvote.privacy.accountant as accountant
from fedvote.privacy.accountant import (
    PLDTooLarge,
    clear_epsilon_memo,
    epsilon_for,
    gaussian_epsilon,
    gaussian_mu,
    pld_discretization,
    pld_points,
)
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.runner import make_federation, plan, prepare_public, privacy_report
from fedvote.settings import build_config

DELTA = 1e-3


@pytest.fixture(autouse=True)
def _fresh_memo():
    clear_epsilon_memo()
    yield
    clear_epsilon_memo()


def _planned(**settings):
    config = build_config(dataset="digits", **settings)
    method = plan(config, prepare_public(config, make_federation(config)).public_metadata())
    return config, method


def _report(config, method):
    ledger = PrivacyLedger()
    ledger.charge(method.planned_events())  # what the run charges (tested equal for FedAUX)
    return privacy_report(config, ledger)


def _dp_accounting_rdp(event) -> float:
    return float(rdp.RdpAccountant(orders=list(accountant.RDP_ORDERS)).compose(event).get_epsilon(DELTA))


@pytest.mark.parametrize("method", ["fedaux-fdp", "fedavg-p", "fedd-p"])
def test_an_instance_calibrated_method_plans_though_its_agent_level_needs_a_huge_pld(monkeypatch, method):
    # digits' agent level needs ~10⁹ PLD points; below this ceiling it is 'too large', as
    # Fashion-MNIST's 2.9·10¹⁰ are at the product's.
    monkeypatch.setattr(accountant, "PLD_COARSEST_DISCRETIZATION", 1e-3)
    config, planned = _planned(method=method, agents=2)
    agent = planned.planned_events().agent
    with pytest.raises(PLDTooLarge):
        pld_discretization(agent)  # what the runner checked before, for both levels: a refusal
    report = _report(config, planned)
    mu = gaussian_mu(agent)
    assert mu > 100
    # a pure Gaussian composition: ε is the exact closed form (what its PLD equals), labelled so
    assert report.agent.accountant == "exact" and report.agent.accountant_fallback is None
    assert report.agent.epsilon == gaussian_epsilon(mu, DELTA)
    assert report.agent.epsilon <= _dp_accounting_rdp(agent)
    assert report.instance.accountant == "pld"  # the level it calibrates: the PLD's own figure
    assert report.instance.epsilon == pytest.approx(epsilon_for(planned.planned_events().instance, DELTA, "pld"))


def _no_gaussian_shortcut(monkeypatch) -> None:
    """Gaussian compositions built as PLDs at any μ, and a ceiling digits' agent level exceeds."""
    monkeypatch.setattr(accountant, "PLD_MAX_GAUSSIAN_MU", math.inf)
    monkeypatch.setattr(accountant, "PLD_COARSEST_DISCRETIZATION", 1e-3)


def test_fedaux_reports_rdps_bound_where_no_pld_of_its_agent_level_fits(monkeypatch, tmp_path, invoke):
    _no_gaussian_shortcut(monkeypatch)
    config, planned = _planned(method="fedaux-fdp", agents=2)
    agent = planned.planned_events().agent
    report = _report(config, planned)
    assert report.agent.accountant == "rdp"
    assert report.agent.accountant_fallback.startswith("pld: so little noise")
    assert report.agent.epsilon == pytest.approx(_dp_accounting_rdp(agent), rel=1e-12)
    assert report.agent.epsilon >= gaussian_epsilon(gaussian_mu(agent), DELTA)  # never below the truth

    # end to end: the run plans, trains and says which accountant gave each level
    code, out, err = invoke(
        ["run", "--method", "fedaux-fdp", "--agents", "2", "--out", tmp_path, "--noise-seed", "0"]
    )
    assert code == 0, err
    written = json.loads((tmp_path / "result.json").read_text())["privacy"]
    assert written["agent"]["accountant"] == "rdp"
    assert written["agent"]["accountant_fallback"].startswith("pld: ")
    assert written["agent"]["epsilon"] == pytest.approx(report.agent.epsilon, rel=1e-12)
    assert written["instance"]["accountant"] == "pld" and "accountant_fallback" not in written["instance"]
    agent_line = next(line for line in out.splitlines() if "ε (agent-level)" in line)
    assert "[rdp upper bound (no pld" in agent_line


def test_on_a_smaller_case_the_uncalibrated_levels_rdp_figure_is_above_its_pld(monkeypatch):
    """PATE-FL at a given σ: agent level (calibrated) μ = √Q/σ, instance level √2 times that."""
    settings = {"method": "pate-fl", "agents": 3, "queries": 20, "sigma": 3.0, "accountant": "pld"}
    config, planned = _planned(**settings)
    events = planned.planned_events()
    pld_instance = _report(config, planned).instance
    assert pld_instance.accountant == "pld"
    agent_points, instance_points = pld_points(events.agent), pld_points(events.instance)
    assert agent_points < instance_points
    clear_epsilon_memo()
    monkeypatch.setattr(accountant, "PLD_MAX_POINTS", math.sqrt(agent_points * instance_points))
    monkeypatch.setattr(accountant, "PLD_COARSEST_DISCRETIZATION", accountant.PLD_DISCRETIZATION)
    config, planned = _planned(**settings)  # plans: only the agent level must fit, and it does
    report = _report(config, planned)
    assert report.agent.accountant == "pld"
    assert report.instance.accountant == "rdp" and report.instance.accountant_fallback is not None
    assert report.instance.epsilon == pytest.approx(_dp_accounting_rdp(events.instance), rel=1e-12)
    assert report.instance.epsilon >= pld_instance.epsilon


def test_the_level_a_run_calibrates_is_still_refused_in_one_line_naming_its_flag(invoke):
    # DP-FedSGD calibrates at the instance level (Poisson-sampled replace-one steps): no PLD fits
    args = ["run", "--method", "dp-fedsgd", "--agents", "3", "--sigma", "1e-6"]
    code, _, err = invoke(args)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1
    assert lines[0].startswith("fedvote: error: --sigma: at σ = 1e-06, instance level: so little noise")
    assert lines[0].endswith("(the level this run calibrates)")
