"""DP-FTRL (Kairouz et al. 2021): the bar command's ε against an independent computation, who
takes part (each agent once per epoch, nobody sampled), the tree's restarts, and refusals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from fedvote.methods import METHODS
from fedvote.methods.dp_ftrl import DpFtrl
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.transport.local import LocalTransport


def gdp_epsilon(mu: float, delta: float) -> float:
    """Exact ε of μ-GDP at δ (Balle & Wang 2018), solved independently of fedvote."""
    return brentq(lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2) - delta,
                  1e-9, 200.0, xtol=1e-12)


def brute_force_gaussians(rounds: int, epoch: int) -> int:
    """Σ over restarted trees of the most released nodes one leaf lies in, by enumeration."""
    total = 0
    for start in range(0, rounds, epoch):
        k = min(epoch, rounds - start)
        blocks = []
        for t in range(1, k + 1):
            length = t & -t
            blocks.append(range(t - length + 1, t + 1))
        total += max(sum(leaf in block for block in blocks) for leaf in range(1, k + 1))
    return total


def test_bar_command_epsilon_at_most_4_and_equal_to_an_independent_computation(invoke):
    code, out, err = invoke(["run", "--method", "dp-ftrl", "--epsilon", "4", "--json"])
    assert code == 0, err
    result = json.loads(out)
    privacy = result["privacy"]
    # K not given: ⌈N/100⌉ = 1 group for digits' 50 agents, every agent in every round (cohort.py)
    assert result["epoch_rounds"] == 1
    gaussians = brute_force_gaussians(100, 1)
    assert gaussians == 100 == result["node_gaussians_per_agent"]
    z, delta = result["sigma"], privacy["delta"]
    assert privacy["agent"]["epsilon"] <= 4.0
    assert privacy["agent"]["epsilon"] == pytest.approx(gdp_epsilon(math.sqrt(gaussians) / z, delta), rel=1e-6)
    assert privacy["instance"]["epsilon"] == pytest.approx(gdp_epsilon(2 * math.sqrt(gaussians) / z, delta),
                                                           rel=1e-6)
    assert result["sampling_rate"] is None and "server" in result["epsilon_holds_against"]


class Participation(LocalTransport):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rounds: list[list[int]] = []

    def local_updates(self, global_params, agent_ids, training):
        self.rounds.append(sorted(int(i) for i in agent_ids))
        assert training.noise_std == 0 and training.clip_norm == 0.08  # agents add no noise
        return super().local_updates(global_params, agent_ids, training)


def test_each_agent_takes_part_once_per_epoch_and_the_ledger_equals_the_plan(small_federation):
    method = DpFtrl(sigma=3.0, rounds=7, epoch_rounds=3, local_steps=1, model="logistic", noise_seed=0)
    transport = Participation(small_federation, noise_seed=0)
    ledger = PrivacyLedger()
    method.run(small_federation.server_data(), transport, ledger)
    n = small_federation.num_agents
    for start in range(0, 6, 3):  # two full epochs: every agent exactly once
        epoch = [a for r in transport.rounds[start:start + 3] for a in r]
        assert sorted(epoch) == list(range(n))
    assert transport.rounds[6] == transport.rounds[0]  # the cycle starts again
    delta = 1e-3
    planned = epsilon_for(method.planned_events().agent, delta)
    assert epsilon_for(ledger.event("agent"), delta) == pytest.approx(planned, rel=1e-6)
    assert method.gaussians() == brute_force_gaussians(7, 3) == 2 + 2 + 1


def models_and_round_sums(method: DpFtrl, federation) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Run ``method``: the model each round's agents received, and each round's sum of updates."""
    theta_seen: list[np.ndarray] = []
    sums: list[np.ndarray] = []

    class Recorder(LocalTransport):
        def local_updates(self, global_params, agent_ids, training):
            theta_seen.append(np.array(global_params, dtype=np.float64))
            received = super().local_updates(global_params, agent_ids, training)
            sums.append(received.updates.astype(np.float64).sum(axis=0))
            return received

    method.run(federation.server_data(), Recorder(federation, noise_seed=0), PrivacyLedger())
    return theta_seen, sums


@pytest.mark.parametrize("estimator", ["honaker", "plain"])
def test_noiseless_run_is_ftrl_on_exact_prefix_sums(small_federation, estimator):
    """σ = 0: θ_t = θ_e + η_s·(Σ clipped updates of the epoch)/(N/K); the first epoch's last θ
    equals θ⁰ plus every update of the epoch, recomputed here round by round."""
    method = DpFtrl(sigma=0.0, rounds=3, epoch_rounds=3, local_steps=1, model="logistic",
                    server_learning_rate=0.5, noise_seed=0, tree_estimator=estimator)
    theta_seen, sums = models_and_round_sums(method, small_federation)
    start = theta_seen[0]
    for t in (1, 2):
        expected = start + 0.5 * np.sum(sums[:t], axis=0) / (small_federation.num_agents / 3)
        np.testing.assert_allclose(theta_seen[t], expected, rtol=1e-5, atol=1e-6)


def test_tree_estimator_reaches_the_run_and_charges_the_same(invoke):
    """``--tree-estimator``: Honaker's by default, ``plain`` on request; the estimator is
    post-processing of the same nodes, so both runs report the same ε."""
    results = {}
    for extra in ([], ["--tree-estimator", "plain"]):
        code, out, err = invoke(["run", "--method", "dp-ftrl", "--agents", "12", "--rounds", "8",
                                 "--epoch-rounds", "4", "--sigma", "3", "--json", *extra])
        assert code == 0, err
        result = json.loads(out)
        results[result["tree_estimator"]] = result
    assert set(results) == {"honaker", "plain"}
    honaker, plain = results["honaker"], results["plain"]
    assert honaker["node_gaussians_per_agent"] == plain["node_gaussians_per_agent"] == brute_force_gaussians(8, 4)
    for level in ("agent", "instance"):
        assert honaker["privacy"][level]["epsilon"] == plain["privacy"][level]["epsilon"]


def test_noiseless_momentum_run_is_heavy_ball_across_restarts(small_federation):
    """σ = 0, γ = 0.6 over epochs of 2, 2, 1 rounds: every model the agents receive equals the
    heavy-ball steps θ_t = θ_{t−1} + η_s·u_t/(N/K), u_t = γ·u_{t−1} + x_t (the momentum carried across
    the trees' restarts), recomputed here from the round sums alone."""
    gamma, step, groups = 0.6, 0.5, 2
    method = DpFtrl(sigma=0.0, rounds=5, epoch_rounds=groups, local_steps=1, model="logistic",
                    server_learning_rate=step, server_momentum=gamma, noise_seed=0)
    theta_seen, sums = models_and_round_sums(method, small_federation)
    assert len(theta_seen) == 5
    theta, velocity = theta_seen[0].copy(), np.zeros_like(theta_seen[0])
    for t in range(1, 5):
        velocity = gamma * velocity + sums[t - 1]
        theta = theta + step * velocity / (small_federation.num_agents / groups)
        np.testing.assert_allclose(theta_seen[t], theta, rtol=1e-5, atol=1e-6)
    # and momentum moved the models: plain FTRL's third model differs
    plain = theta_seen[2] - step * gamma * sums[0] / (small_federation.num_agents / groups)
    assert not np.allclose(plain, theta_seen[2], atol=1e-6)


def test_server_momentum_reaches_the_run_and_charges_the_same(invoke):
    """``--server-momentum`` is post-processing of the released prefix sums: the same ε at both
    levels as the run without it, the value in the result."""
    results = []
    for extra in ([], ["--server-momentum", "0.9", "--server-learning-rate", "0.1"]):
        code, out, err = invoke(["run", "--method", "dp-ftrl", "--agents", "12", "--rounds", "6",
                                 "--epoch-rounds", "3", "--sigma", "3", "--json", *extra])
        assert code == 0, err
        results.append(json.loads(out))
    plain, momentum = results
    assert (plain["server_momentum"], momentum["server_momentum"]) == (0.0, 0.9)
    for level in ("agent", "instance"):
        assert momentum["privacy"][level]["epsilon"] == plain["privacy"][level]["epsilon"]


def test_registered():
    assert METHODS["dp-ftrl"] is DpFtrl


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--epoch-rounds", "0"], "epoch-rounds"),
        (["--server-learning-rate", "-1"], "server-learning-rate"),
        (["--tree-estimator", "best"], "tree-estimator"),
        (["--server-momentum", "1"], "server-momentum"),
        (["--server-momentum", "-0.1"], "server-momentum"),
        (["--secure-noise"], "secure-noise"),
        (["--epoch-rounds", "11"], "epoch-rounds"),  # K > N = 10
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_charged(args, flag, invoke, tmp_path):
    ledger = tmp_path / "ledger.db"
    code, _, err = invoke(["run", "--method", "dp-ftrl", "--agents", "10", "--rounds", "2", "--sigma", "1",
                           "--ledger", str(ledger), *args])
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("fedvote run [")]
    assert len(lines) == 1, err
    assert flag in lines[0] or flag.replace("-", "_") in lines[0], err
    assert not ledger.exists()  # refused before the ledger was opened: nothing charged
