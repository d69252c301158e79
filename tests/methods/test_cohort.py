"""The gradient baselines' planned cohorts (issue 46): DP-FedAvg's q and DP-FTRL's K from public values.

The planned q is checked against the noise multipliers dp-accounting's own calibration gives
(``mechanism_calibration`` on a PLD accountant, independent of fedvote's calibrate module), and
the run's ε against dp-accounting's PLD of the events at the q and σ the run reports.
"""

from __future__ import annotations

import json

import pytest
from dp_accounting import dp_event, mechanism_calibration, pld

from fedvote.methods.cohort import (
    MAX_EXPECTED_COHORT,
    NOISE_PLATEAU,
    PAPER_SAMPLING_RATE,
    SAMPLING_RATE_GRID,
    planned_epoch_rounds,
    planned_sampling_rate,
)

ROUNDS, EPSILON, DELTA = 100, 4.0, 1e-3


def sampled_gaussian_rounds(rate: float, multiplier: float) -> dp_event.DpEvent:
    return dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(rate, dp_event.GaussianDpEvent(multiplier)), ROUNDS
    )


def independent_multiplier(rate: float) -> float:
    """z meeting ε 4 at δ 1e-3 over 100 rounds at rate q, by dp-accounting's calibration alone.

    A coarse PLD grid (0.01): the rule's ratios lie 7 % or more from its 1.25 (0.1: 1.34, 0.2: 1.11).
    """
    return mechanism_calibration.calibrate_dp_mechanism(
        lambda: pld.PLDAccountant(value_discretization_interval=1e-2),
        lambda z: sampled_gaussian_rounds(rate, z),
        EPSILON,
        DELTA,
        mechanism_calibration.LowerEndpointAndGuess(0.1, 1.0),
        tol=1e-3,
    )


def test_the_bar_command_plans_q_by_the_rule_and_its_epsilon_is_dp_accountings(invoke):
    code, out, err = invoke(["run", "--method", "dp-fedavg", "--epsilon", "4", "--json"])
    assert code == 0, err
    result = json.loads(out)
    assert result["agents"] == 50 and result["sampling_rate_rule"] == "planned"
    # The rule, evaluated on dp-accounting's own multipliers: z(q)/q against 1.25·z(1).
    full = independent_multiplier(1.0)
    ratios = {q: independent_multiplier(q) / q / full for q in (0.05, 0.1, 0.2)}
    assert ratios[0.05] > NOISE_PLATEAU and ratios[0.1] > NOISE_PLATEAU and ratios[0.2] <= NOISE_PLATEAU
    assert result["sampling_rate"] == 0.2 == result["update_denominator"] / 50
    accountant = pld.PLDAccountant()
    accountant.compose(sampled_gaussian_rounds(0.2, result["sigma"]))
    agent = result["privacy"]["agent"]["epsilon"]
    assert agent <= EPSILON
    assert agent == pytest.approx(accountant.get_epsilon(DELTA), rel=1e-6)
    assert result["sigma"] == pytest.approx(ratios[0.2] * full * 0.2, rel=2e-2)


def test_a_given_rate_is_kept_and_sigma_without_a_target_keeps_the_papers(invoke):
    code, out, err = invoke(["run", "--method", "dp-fedavg", "--epsilon", "4", "--sampling-rate", "0.05",
                             "--rounds", "3", "--json"])
    assert code == 0, err
    given = json.loads(out)
    assert given["sampling_rate"] == 0.05 and given["sampling_rate_rule"] == "given"
    code, out, err = invoke(["run", "--method", "dp-fedavg", "--sigma", "1", "--rounds", "3", "--json"])
    assert code == 0, err
    fixed = json.loads(out)
    assert fixed["sampling_rate"] == PAPER_SAMPLING_RATE and fixed["sampling_rate_rule"] == "paper"


def test_large_federations_keep_the_papers_rate_without_calibrating():
    def never(rate: float) -> float:
        raise AssertionError("no calibration is needed where the cap is the floor")

    assert planned_sampling_rate(MAX_EXPECTED_COHORT * 20, never) == PAPER_SAMPLING_RATE
    assert planned_sampling_rate(10_000, never) == PAPER_SAMPLING_RATE


def test_the_cohort_cap_binds_before_the_plateau():
    calls: list[float] = []

    def steep(rate: float) -> float:  # z(q) = 1: z(q)/q = 1/q reaches 1.25·z(1) only from q = 0.8
        calls.append(rate)
        return 1.0

    assert planned_sampling_rate(1000, steep) == pytest.approx(0.1)  # at most 100 agents a round
    assert max(calls) == 1.0 and 0.2 not in calls  # the grid is walked no further than the cap
    assert planned_sampling_rate(400, steep) == pytest.approx(0.25)
    assert planned_sampling_rate(50, steep) == 1.0


def test_the_plateau_takes_the_smallest_rate_within_its_factor():
    def proportional(rate: float) -> float:  # z(q)/q constant: every rate is on the plateau
        return 3.0 * rate

    assert planned_sampling_rate(50, proportional) == SAMPLING_RATE_GRID[0] == PAPER_SAMPLING_RATE
    with pytest.raises(ValueError, match="num_agents"):
        planned_sampling_rate(0, proportional)


@pytest.mark.parametrize(("agents", "groups"), [(1, 1), (50, 1), (100, 1), (101, 2), (250, 3), (10_000, 100)])
def test_dp_ftrl_groups_keep_a_round_to_at_most_100_agents(agents, groups):
    assert planned_epoch_rounds(agents) == groups
    assert -(-agents // groups) <= MAX_EXPECTED_COHORT
