"""DP-FedAvg ``--secure-noise``: quantised updates and distributed discrete Gaussian shares through
an integer secure sum — integers released, ε against an independent computation, refusals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp

from fedvote.agents.local_updates import DiscreteTraining
from fedvote.methods.dp_fedavg import DpFedAvg
from fedvote.privacy.accountant import RDP_ORDERS, epsilon_for
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.transport.local import LocalTransport

SMALL = ["--agents", "10", "--rounds", "3", "--gradient-model", "logistic"]


def independent_epsilon(plan: dict, q: float, rounds: int, delta: float) -> float:
    """KLS21 (τ, both terms, one share's bound) under Zhu & Wang's subsampling, by hand, T-fold,
    converted by dp-accounting's own RDP → (ε, δ)."""
    sigma = math.sqrt(plan["shares"] * plan["share_variance"])
    local = math.sqrt(plan["share_variance"])
    n, b, d = plan["shares"], plan["norm_bound"], plan["dimension"]
    tau = 10 * sum(math.exp(-2 * math.pi**2 * local**2 * k / (k + 1)) for k in range(1, n))

    def eps(alpha: int) -> float:
        scale = b / sigma
        kls = min(alpha * scale**2 / 2 + tau * d, alpha / 2 * (scale + tau * math.sqrt(d)) ** 2)
        return min(kls, alpha * b**2 / (2 * local**2))

    rdp = []
    for order in RDP_ORDERS:
        alpha = max(2, math.ceil(order))
        if alpha > 256 or q == 1.0:  # q = 1: no sampling, the unsampled bound is the smaller
            rdp.append(rounds * eps(alpha))
            continue
        logs = [(alpha - 1) * math.log1p(-q) + math.log(alpha * q - q + 1),
                math.log(math.comb(alpha, 2)) + 2 * math.log(q) + (alpha - 2) * math.log1p(-q) + eps(2)]
        logs += [math.log(3 * math.comb(alpha, ell)) + (alpha - ell) * math.log1p(-q) + ell * math.log(q)
                 + (ell - 1) * eps(ell) for ell in range(3, alpha + 1)]
        top = max(logs)
        log_total = top + math.log(math.fsum(math.exp(x - top) for x in logs))  # log-sum-exp by hand
        rdp.append(rounds * min(log_total / (alpha - 1), eps(alpha)))
    return float(dp_rdp.compute_epsilon(np.array(RDP_ORDERS), np.array(rdp), delta)[0])


def test_secure_noise_names_the_discrete_gaussian_and_equals_an_independent_computation(invoke):
    # q given: the planned q for 10 agents is 1, where the subsampling bound is not used at all
    code, out, err = invoke(["run", "--method", "dp-fedavg", *SMALL, "--epsilon", "4", "--secure-noise",
                             "--sampling-rate", "0.05", "--json"])
    assert code == 0, err
    result = json.loads(out)
    privacy = result["privacy"]
    assert privacy["noise_source"] == "csprng-distributed-discrete-gaussian"
    assert privacy["accountant"] == "rdp"  # no PLD of a sum of discrete Gaussians: RDP, and said so
    plan = result["discrete_noise"]
    assert privacy["agent"]["epsilon"] <= 4.0
    assert privacy["agent"]["epsilon"] == pytest.approx(
        independent_epsilon(plan, 0.05, 3, privacy["delta"]), rel=1e-6)
    assert result["sampling_rate"] == 0.05 and result["sampling_rate_rule"] == "given"
    assert plan["shares"] * plan["share_variance"] >= (result["sigma"] * plan["norm_bound"]) ** 2


class IntegerView(LocalTransport):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.totals: list[np.ndarray] = []
        self.trainings: list[DiscreteTraining] = []

    def secure_update_sum(self, global_params, agent_ids, training):
        total = super().secure_update_sum(global_params, agent_ids, training)
        self.totals.append(total)
        self.trainings.append(training)
        return total


@pytest.mark.parametrize("secure_sum", [False, True])
def test_every_release_is_an_integer_and_the_sum_is_exact(small_federation, secure_sum, monkeypatch):
    """What each agent sends is int64 (its rounded update of norm ≤ B plus its share); the server's
    total is their exact integer sum, through the masked 64-bit ring with --secure-sum."""
    import fedvote.transport.local.updates as updates

    sent: list[np.ndarray] = []
    share = updates.discrete_share

    def recorded(agent, width, training):
        release = share(agent, width, training)
        sent.append(release)
        return release

    monkeypatch.setattr(updates, "discrete_share", recorded)
    method = DpFedAvg(sigma=1.0, rounds=2, local_steps=1, model="logistic", sampling_rate=0.3,
                      secure_noise=True, num_agents=10)
    kwargs = {"secure_sum": True} if secure_sum else {}
    transport = IntegerView(small_federation, **kwargs)
    method.run(small_federation.server_data(), transport, PrivacyLedger())
    assert transport.totals and all(np.array_equal(t, np.round(t)) for t in transport.totals)
    assert sent and all(s.dtype == np.int64 for s in sent)
    training = transport.trainings[0]
    assert isinstance(training, DiscreteTraining) and training.noise_std == 0
    assert all(int(np.max(np.abs(s))) <= training.largest_value for s in sent)


@pytest.mark.parametrize(("args", "flag"), [
    (["--noise", "server"], "secure-noise"),
    (["--clipping", "adaptive"], "secure-noise"),
])
def test_refusals_are_one_line_exit_2(args, flag, invoke, tmp_path):
    ledger = tmp_path / "ledger.db"
    code, _, err = invoke(["run", "--method", "dp-fedavg", *SMALL, "--sigma", "1", "--secure-noise",
                           "--ledger", str(ledger), *args])
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("fedvote run [")]
    assert len(lines) == 1 and (flag in lines[0] or flag.replace("-", "_") in lines[0]), err
    assert not ledger.exists()


def test_the_planned_events_are_charged(small_federation):
    method = DpFedAvg(sigma=1.2, rounds=2, local_steps=1, model="logistic", secure_noise=True, num_agents=10)
    ledger = PrivacyLedger()
    method.run(small_federation.server_data(), LocalTransport(small_federation), ledger)
    d = 64 * 10 + 10
    planned = DpFedAvg(sigma=1.2, rounds=2, local_steps=1, model="logistic", secure_noise=True, num_agents=10,
                       model_floats=d).planned_events()
    assert epsilon_for(ledger.event("agent"), 1e-3) == pytest.approx(epsilon_for(planned.agent, 1e-3), rel=1e-12)


def test_secure_noise_at_the_planned_rate_equals_the_unsampled_bound(invoke):
    """10 agents: the planned q is 1 (cohort.py), every agent every round; ε is KLS21's, T-fold, unsampled."""
    code, out, err = invoke(["run", "--method", "dp-fedavg", *SMALL, "--epsilon", "4", "--secure-noise", "--json"])
    assert code == 0, err
    result = json.loads(out)
    assert result["sampling_rate"] == 1.0 and result["sampling_rate_rule"] == "planned"
    privacy = result["privacy"]
    assert privacy["agent"]["epsilon"] <= 4.0
    assert privacy["agent"]["epsilon"] == pytest.approx(
        independent_epsilon(result["discrete_noise"], 1.0, 3, privacy["delta"]), rel=1e-6)


def test_the_discrete_plan_counts_the_floats_of_the_model_planned_on_wide_vectors():
    """On wide feature vectors the planned model is logistic, and KLS21's d is its floats (d·C + C),
    not the MLP's: the events are those of the model that runs."""
    from fedvote.data.federation import PublicMetadata

    wide = PublicMetadata(pool_size=300, num_agents=20, num_classes=10, example_shape=(1_600,),
                          agent_records=(50,) * 20)
    planned = DpFedAvg(sigma=2.0, secure_noise=True, num_agents=20).with_public(wide)
    assert planned.model == "logistic" and planned.model_floats == 1_600 * 10 + 10
    given = DpFedAvg(sigma=2.0, secure_noise=True, num_agents=20, model_from_public=False).with_public(wide)
    assert given.model == "mlp" and given.model_floats > planned.model_floats
    assert planned.discrete_plan().dimension == planned.model_floats
