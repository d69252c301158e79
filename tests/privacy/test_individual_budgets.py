"""Individual budgets (issue 45): the spec, the seeded groups, the weights, the group ledger.

The weights are checked against the closed form of the Gaussian composition (Balle & Wang
2018, Thm 8), independent of fedvote's accountants: at σ = σ_{b_max}, the agents of budget
b with weight w_b see μ_b = w_b·√Q/σ, whose ε must be at most b and (the calibration's
tolerance being 1e-4 in σ) within 1 % of it.
"""

import math

import numpy as np
import pytest
from dp_accounting import dp_event

from fedvote.errors import ConfigError
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.budget_spec import BudgetSpec, assign_budgets, parse_budget_spec
from fedvote.privacy.calibrate import calibrate_sigma
from fedvote.privacy.individual_budgets import GroupLedger, IndividualRelease, group_privacy, plan_budgets
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.privacy.subsampled_votes import individual_vote_events

from .test_subsampled_votes import DELTA, closed_form_epsilon

PAPER_SPEC = "1:0.34,2:0.43,3:0.23"  # Individualized PATE's MNIST setting (Boenisch et al. 2023, Table 3)


def test_group_spec_parsed():
    assert parse_budget_spec(PAPER_SPEC) == BudgetSpec(groups=((1.0, 0.34), (2.0, 0.43), (3.0, 0.23)))
    assert parse_budget_spec(" 0.5:1 ") == BudgetSpec(groups=((0.5, 1.0),))


@pytest.mark.parametrize(
    "spec",
    [
        "", "1", "1:0.5", "1:0.5,1:0.5", "0:1", "-1:1", "inf:1", "1:0.5,2:0.6", "a:1", "1:x",
        "1:0", "1:0.5:2", "file:", "file:/nonexistent/budgets.txt",
    ],
)
def test_bad_specs_are_refused_by_the_flags_name(spec):
    with pytest.raises(ConfigError) as error:
        parse_budget_spec(spec)
    assert error.value.argument == "agent_budgets"


def test_file_spec_one_budget_per_agent(tmp_path):
    path = tmp_path / "budgets.txt"
    path.write_text("# agent budgets\n1.0, 2.0\n3 # the last\n", encoding="utf-8")
    spec = parse_budget_spec(f"file:{path}")
    assert spec.per_agent == (1.0, 2.0, 3.0)
    assert assign_budgets(spec, 3, seed=0).tolist() == [1.0, 2.0, 3.0]  # ids in file order, no draw
    with pytest.raises(ConfigError, match="holds 3 budgets for 4 agents"):
        assign_budgets(spec, 4, seed=0)
    path.write_text("1\n0\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="line 2"):
        parse_budget_spec(f"file:{path}")


def test_groups_are_sized_by_largest_remainder_and_drawn_by_the_seed():
    spec = parse_budget_spec(PAPER_SPEC)
    budgets = assign_budgets(spec, 50, seed=0)
    assert [int(np.sum(budgets == b)) for b in (1.0, 2.0, 3.0)] == [17, 22, 11]  # 17, 21.5, 11.5
    assert np.array_equal(budgets, assign_budgets(spec, 50, seed=0))  # public and reproducible
    assert not np.array_equal(budgets, assign_budgets(spec, 50, seed=1))  # another draw
    small = assign_budgets(spec, 2, seed=0)
    assert small.shape == (2,) and set(small) <= {1.0, 2.0, 3.0}


@pytest.mark.parametrize("rate", [1.0, 0.5])
def test_weights_make_every_group_spend_its_budget_from_below(rate):
    queries = 100

    def unit_sigma(budget):
        return calibrate_sigma(
            lambda s: individual_vote_events(s, queries, sampling_rate=rate).agent, budget, DELTA
        )

    budgets = assign_budgets(parse_budget_spec(PAPER_SPEC), 50, seed=0)
    plan = plan_budgets(budgets, unit_sigma)
    assert plan.levels == (1.0, 2.0, 3.0) and plan.weights[-1] == 1.0
    assert plan.weights == tuple(sorted(plan.weights))  # a larger budget, a heavier vote
    sigma = plan.unit_sigmas[-1]
    for budget, weight in zip(plan.levels, plan.weights, strict=True):
        events = individual_vote_events(sigma, queries, weight=weight, sampling_rate=rate)
        spent = epsilon_for(events.agent, DELTA)
        assert 0.99 * budget <= spent <= budget
        if rate == 1.0:  # a Gaussian composition: the closed form, independently
            assert spent == pytest.approx(closed_form_epsilon(weight * math.sqrt(queries) / sigma, DELTA), rel=1e-4)
    assert np.array_equal(plan.agent_weights(), np.array([dict(zip(plan.levels, plan.weights, strict=True))[b] for b in budgets]))


def release(sigma, count, weights):
    groups = tuple(individual_vote_events(sigma, count, weight=w) for w in weights)
    top = groups[-1]
    return IndividualRelease(top.agent, top.instance, top.agent_sensitivity, top.instance_sensitivity, groups)


def test_group_ledger_charges_the_parent_with_the_largest_weight_and_keeps_each_group():
    parent = PrivacyLedger()
    ledger = GroupLedger(parent, groups=2)
    first = ledger.charge(release(5.0, 10, (0.5, 1.0)))
    voided = ledger.charge(release(5.0, 7, (0.5, 1.0)))
    ledger.void(voided)
    ledger.charge(release(5.0, 3, (0.5, 1.0)))
    assert first == 0 and len(parent.charges) == 2 and len(ledger.charges) == 2
    for level in ("agent", "instance"):
        assert parent.event(level) == ledger.event(level)
    # The weight-1 group is the parent's composition; the other its own (10 + 3 queries, voided 7 gone).
    assert ledger.group_event(1, "agent") == parent.event("agent")
    # (dp-accounting's builder merges the two self-compositions of one Gaussian into one.)
    assert ledger.group_event(0, "agent") == dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(10.0), 13)
    with pytest.raises(ValueError):
        ledger.charge(individual_vote_events(5.0, 3))  # a plain release names no group


def test_group_privacy_reports_each_nonempty_group():
    plan = plan_budgets([1.0, 3.0, 3.0], lambda b: 10.0 / b)  # σ_b = 10/b: weights 1/3 and 1
    assert plan.weights == pytest.approx((1 / 3, 1.0))
    ledger = GroupLedger(PrivacyLedger(), groups=2)
    ledger.charge(release(10.0 / 3, 50, plan.weights))
    groups = group_privacy(ledger, plan, DELTA, "pld")
    assert [(g.budget, g.agents, g.agent_ids) for g in groups] == [(1.0, 1, (0,)), (3.0, 2, (1, 2))]
    for group in groups:  # σ/w = 10, 10/3: μ = w·√50/σ
        mu = group.weight * math.sqrt(50) / (10.0 / 3)
        assert group.epsilon == pytest.approx(closed_form_epsilon(mu, DELTA), rel=1e-4)
        assert group.instance_epsilon == pytest.approx(closed_form_epsilon(math.sqrt(2) * mu, DELTA), rel=1e-4)
