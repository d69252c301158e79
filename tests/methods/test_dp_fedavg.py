import json
import math

import numpy as np
import pytest
from dp_accounting import dp_event, pld
from dp_accounting.privacy_accountant import NeighboringRelation

from fedvote.agents.local_updates import local_update
from fedvote.aggregation import secure_sum as secure_sum_module
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.errors import ConfigError
from fedvote.methods import METHODS
from fedvote.methods.dp_fedavg import DpFedAvg
from fedvote.models.local_training import LocalTraining, LocalUpdates, clip_to_norm
from fedvote.privacy.accountant import epsilon_for, gaussian_epsilon
from fedvote.privacy.events import dp_fedavg_events
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.transport.local import LocalTransport


def _std_tolerance(n):
    """5 standard errors of a sample std from n normal draws (relative)."""
    return 5.0 / math.sqrt(2.0 * n)


class ServerView(LocalTransport):
    """A LocalTransport that records what the server receives: each update it is handed
    individually (with the noise std its agent added, and the round) and each secure sum."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.individual: list[tuple[int, int, float]] = []  # (round, agent, noise std)
        self.sums: list[np.ndarray] = []
        self.round = 0

    def local_updates(self, global_params, agent_ids, training):
        received = super().local_updates(global_params, agent_ids, training)
        self.individual += [(self.round, int(i), training.noise_std) for i in received.agent_ids]
        self.round += 1
        return received

    def secure_update_sum(self, global_params, agent_ids, training):
        total = super().secure_update_sum(global_params, agent_ids, training)
        self.sums.append(total)
        self.round += 1
        return total


def test_registered_and_from_config():
    assert METHODS["dp-fedavg"] is DpFedAvg
    config = RunConfig(
        method="dp-fedavg",
        federation=FederationConfig(agents=7),
        privacy=PrivacyConfig(sigma=0.9, delta=1e-4),
        options={"rounds": 9, "clip_norm": 0.5, "noise": "server"},
    )
    method = DpFedAvg.from_config(config, sigma=0.9, queries=1, min_responders=1)
    assert (method.sigma, method.rounds, method.clip_norm, method.noise) == (0.9, 9, 0.5, "server")
    assert (method.sampling_rate, method.local_steps) == (0.05, 20)  # the paper's q and E
    assert method.num_agents == 7
    assert DpFedAvg().noise == "distributed"  # secure aggregation is the default


def test_clip_to_norm():
    rng = np.random.default_rng(0)
    for scale in (1e-3, 1.0, 1e3):
        update = (scale * rng.normal(size=5000)).astype(np.float32)
        clipped = clip_to_norm(update, 0.08)
        assert np.linalg.norm(clipped.astype(np.float64)) <= 0.08
        if np.linalg.norm(update) <= 0.08:
            np.testing.assert_array_equal(clipped, update)
        else:  # same direction
            cos = clipped @ update / (np.linalg.norm(clipped) * np.linalg.norm(update))
            assert cos == pytest.approx(1.0, abs=1e-5)


def test_every_sent_update_is_clipped(small_federation):
    transport = LocalTransport(small_federation, seed=0, noise_seed=0)
    method = DpFedAvg(sigma=1.0, model="logistic", local_steps=5, learning_rate=0.5)
    theta = np.zeros(650, np.float32)
    ids = np.arange(small_federation.num_agents)
    training = LocalTraining(model="logistic", steps=5, learning_rate=0.5, clip_norm=method.clip_norm)
    received = transport.local_updates(theta, ids, training)
    norms = np.linalg.norm(received.updates.astype(np.float64), axis=1)
    assert np.all(norms <= method.clip_norm)
    assert np.all(norms > 0.5 * method.clip_norm)  # these updates were large: clipping bit


@pytest.mark.parametrize(
    ("noise", "expected"),
    [("distributed", 2.0 * 0.08 / math.sqrt(10)), ("distributed-unmasked", 2.0 * 0.08 / 2.0), ("server", 0.0)],
)
def test_noise_share_of_each_placement(noise, expected):
    """Distributed: every one of N agents adds σS/√N; unmasked (Algorithm 5): each of m_t sampled
    agents adds σS/√m_t; server (Algorithm 3): the agents add nothing."""
    method = DpFedAvg(sigma=2.0, model="logistic", noise=noise, num_agents=10)
    training = method.round_training(3, 0.1, 4, 10)  # m_t = 4 of N = 10
    assert training.noise_std == pytest.approx(expected)


def test_distributed_noise_share_statistics(small_federation):
    """Algorithm 6: an agent's sent update = clipped update + N(0, share²) per coordinate."""
    method = DpFedAvg(sigma=2.0, model="logistic", noise="distributed-unmasked", num_agents=10)
    training = method.round_training(3, 0.1, 4, 10)
    clean = LocalTraining(**{**training.__dict__, "noise_std": 0.0})
    ids = np.array([1])
    noised = LocalTransport(small_federation, seed=0, noise_seed=5).local_updates(np.zeros(650, np.float32), ids, training)
    plain = LocalTransport(small_federation, seed=0, noise_seed=5).local_updates(np.zeros(650, np.float32), ids, clean)
    residual = (noised.updates - plain.updates).astype(np.float64).ravel()  # same SGD, only the noise differs
    assert abs(residual.mean()) < 5 * training.noise_std / math.sqrt(residual.size)
    assert residual.std() == pytest.approx(training.noise_std, rel=_std_tolerance(residual.size))


@pytest.mark.parametrize("noise", ["server", "distributed-unmasked"])
def test_server_step_is_noised_sum_over_q_n(noise):
    """θ' − θ = (Σ Δ̃ + N(0, σ²S²)) / (qN); with m_t = 0 the server still adds the noise."""
    method = DpFedAvg(sigma=1.5, clip_norm=0.1, sampling_rate=0.2, noise=noise, num_agents=10)
    d, n = 20000, 10
    theta = np.zeros(d, np.float32)
    empty = LocalUpdates(agent_ids=np.zeros(0, int), updates=np.zeros((0, d), np.float32), records=np.zeros(0, int))
    step = method.aggregate(theta, empty, np.random.default_rng(0), n) * (0.2 * n)
    assert step.std() == pytest.approx(1.5 * 0.1, rel=_std_tolerance(d))
    updates = np.full((2, d), 0.01, np.float32)
    received = LocalUpdates(agent_ids=np.arange(2), updates=updates, records=np.array([5, 5]))
    step = method.aggregate(theta, received, np.random.default_rng(0), n) * (0.2 * n)
    if noise == "server":
        assert step.mean() == pytest.approx(0.02, abs=5 * 0.15 / math.sqrt(d))
        assert step.std() == pytest.approx(0.15, rel=_std_tolerance(d))
    else:  # the agents already added their shares: the server adds nothing
        np.testing.assert_allclose(step, 0.02, rtol=1e-5)


def test_dp_fedavg_server_sees_only_the_sum_of_updates(small_federation, monkeypatch):
    """Distributed noise (the default): no update reaches the server on its own; every agent
    sends a uniformly masked vector every round (so the sample is hidden), and the server's
    total is the sum of all agents' releases with noise N(0, σ²S²)."""
    unmasked_inputs = []
    real_unmask = secure_sum_module.SecureSumRound.unmask

    def spy_unmask(self, masked, responders):
        unmasked_inputs.append({agent: vector.copy() for agent, vector in masked.items()})
        return real_unmask(self, masked, responders)

    monkeypatch.setattr(secure_sum_module.SecureSumRound, "unmask", spy_unmask)
    n, rounds, d = small_federation.num_agents, 4, 650
    method = DpFedAvg(sigma=1.0, sampling_rate=0.3, rounds=rounds, local_steps=2, model="logistic", noise_seed=0)
    plain = ServerView(small_federation, seed=0, noise_seed=0)  # the in-process sum stands for secure aggregation
    method.run(small_federation.server_data(), plain, PrivacyLedger())
    assert plain.individual == [] and len(plain.sums) == rounds and unmasked_inputs == []
    transport = ServerView(small_federation, seed=0, noise_seed=0, secure_sum=True)  # --secure-sum: real masks
    method.run(small_federation.server_data(), transport, PrivacyLedger())
    assert transport.individual == []  # no individual update was ever handed to the server
    assert len(transport.sums) == rounds and all(total.shape == (d,) for total in transport.sums)
    # every agent, sampled or not, sent one masked vector per round: who trained is not visible
    assert [sorted(inputs) for inputs in unmasked_inputs] == [list(range(n))] * rounds
    assert transport.communication.upload_floats == rounds * n * d
    for inputs in unmasked_inputs:  # masked words look uniform: the low byte takes many values
        for vector in inputs.values():
            assert len(np.unique(vector & np.uint64(0xFF))) > 200


@pytest.mark.parametrize("centred", [False, True])
def test_secure_update_sum_is_the_sum_of_every_agents_release(small_federation, centred):
    """The securely summed total equals the plain sum of the agents' releases: the sampled agents'
    clipped, noised updates plus the others' noise shares (same seeds, fixed-point error only);
    with the public input shift too."""
    import dataclasses

    method = DpFedAvg(sigma=1.0, model="logistic", local_steps=2)
    n, d = small_federation.num_agents, 650
    training = method.round_training(0, 0.1, 3, n)
    if centred:
        shift = DpFedAvg(center_inputs=True).input_shift(small_federation.server_data())
        assert shift is not None
        training = dataclasses.replace(training, input_shift=shift)
    theta = np.zeros(d, np.float32)
    chosen = np.array([1, 4, 7])
    total = LocalTransport(small_federation, seed=0, noise_seed=3, secure_sum=True).secure_update_sum(
        theta, chosen, training
    )
    twin = LocalTransport(small_federation, seed=0, noise_seed=3)
    releases = [
        local_update(agent, theta, training).astype(np.float64) if i in chosen else agent.noise_share((d,), training.noise_std)
        for i, agent in enumerate(twin._agents)
    ]
    np.testing.assert_allclose(total, np.sum(releases, axis=0), rtol=0, atol=n * 2.0**-24)
    noise_only = [r for i, r in enumerate(releases) if i not in chosen]
    assert np.std(np.concatenate(noise_only)) == pytest.approx(training.noise_std, rel=0.05)


def _server_epsilon_from_view(view, clip_norm, delta):
    """ε against the server from what it saw on its own: each individually received update of an
    agent is a Gaussian release (sensitivity S, noise std as sent) and the server knows the sample,
    so no sampling credit; the worst agent's composition (exact μ-GDP)."""
    mu_squared = {}
    for _, agent, noise_std in view:
        mu_squared[agent] = mu_squared.get(agent, 0.0) + (math.inf if noise_std == 0 else (clip_norm / noise_std) ** 2)
    if not mu_squared:
        return 0.0
    return gaussian_epsilon(math.sqrt(max(mu_squared.values())), delta)


@pytest.mark.parametrize("noise", ["distributed", "distributed-unmasked"])
def test_dp_fedavg_headline_holds_against_the_server(small_federation, noise):
    """With distributed noise the agent-level headline must hold against the server: it is never
    below the ε of what the server received individually (no sampling credit: it saw the sample)."""
    n, delta = small_federation.num_agents, 1e-3
    unmasked = {"num_agents": n} if noise == "distributed-unmasked" else {}
    method = DpFedAvg(
        sigma=3.0, sampling_rate=0.5, rounds=6, local_steps=2, model="logistic", noise=noise, noise_seed=0, **unmasked
    )
    transport = ServerView(small_federation, seed=0, noise_seed=0)
    ledger = PrivacyLedger()
    outcome = method.run(small_federation.server_data(), transport, ledger)
    headline = epsilon_for(ledger.event("agent"), delta)
    assert headline >= _server_epsilon_from_view(transport.individual, method.clip_norm, delta)
    assert "server" in outcome.details["epsilon_holds_against"]
    if noise == "distributed-unmasked":  # the planned figure, against the server: Gaussian(σ/√N) × T
        reference = gaussian_epsilon(math.sqrt(6 * n) / 3.0, delta)
        assert headline == pytest.approx(reference, rel=1e-3)
        assert epsilon_for(method.planned_events().agent, delta) == pytest.approx(headline, rel=1e-9)


def test_unmasked_placement_refuses_a_transport_of_another_size(small_federation):
    method = DpFedAvg(sigma=1.0, rounds=1, model="logistic", noise="distributed-unmasked", num_agents=3)
    with pytest.raises(ConfigError) as error:
        method.run(small_federation.server_data(), LocalTransport(small_federation), PrivacyLedger())
    assert error.value.argument == "agents"


def test_accounting_matches_dp_accounting_pld(small_federation):
    q, sigma, rounds, delta = 0.3, 0.9, 12, 1e-3
    method = DpFedAvg(sigma=sigma, sampling_rate=q, rounds=rounds, local_steps=2, model="logistic", noise_seed=0)
    ledger = PrivacyLedger()
    outcome = method.run(small_federation.server_data(), LocalTransport(small_federation, noise_seed=0), ledger)
    reference = pld.PLDAccountant().compose(
        dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), rounds
    ).get_epsilon(delta)
    ours = epsilon_for(ledger.event("agent"), delta, "pld")
    assert ours == pytest.approx(reference, rel=0.01)
    assert epsilon_for(method.planned_events().agent, delta, "pld") == pytest.approx(ours, rel=1e-9)
    details = outcome.details
    assert (details["sampling_rate"], details["noise_multiplier"], details["clip_norm"], details["rounds"]) == (
        q, sigma, 0.08, rounds
    )
    assert details["noise"] == "distributed" and details["noise_share_std"] == pytest.approx(sigma * 0.08 / math.sqrt(10))


def test_dp_fedavg_instance_headline_credits_agent_sampling(small_federation):
    """The instance-level headline is replace-one with amplification by agent sampling:
    dp-accounting's REPLACE_ONE pair (1−q)N(0, σ²) + qN(∓1, σ²) per round, computed independently,
    and far below the no-credit Gaussian(σ/2) × T."""
    q, sigma, rounds, delta = 0.05, 1.0, 200, 1e-3
    events = dp_fedavg_events(q, sigma, rounds)
    independent = pld.PLDAccountant(
        neighboring_relation=NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-4
    ).compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), rounds).get_epsilon(delta)
    headline = epsilon_for(events.instance, delta)
    assert headline == pytest.approx(independent, rel=1e-6)
    assert headline == pytest.approx(5.137, abs=0.01)  # dp-accounting 0.6.0 PLD
    assert headline < gaussian_epsilon(2.0 * math.sqrt(rounds) / sigma, delta) / 50  # no credit: ≈ 486
    from fedvote.privacy.events import replace_one

    assert events.instance == replace_one(dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), rounds
    ))
    # the run's ledger charges the same, round by round
    method = DpFedAvg(sigma=sigma, sampling_rate=0.3, rounds=5, local_steps=1, model="logistic", noise_seed=0)
    ledger = PrivacyLedger()
    method.run(small_federation.server_data(), LocalTransport(small_federation, noise_seed=0), ledger)
    assert epsilon_for(ledger.event("instance"), delta) == pytest.approx(
        epsilon_for(method.planned_events().instance, delta), rel=1e-6
    )


@pytest.mark.parametrize("sigma", [1.0, 3.0])
def test_replace_one_pair_is_sensitivity_two_without_sampling(sigma):
    """The factor: with q = 1 the REPLACE_ONE pair N(−1, σ²) vs N(1, σ²) is a shift of 2S with noise
    σS — the exact Gaussian with μ = 2√T/σ."""
    rounds, delta = 10, 1e-5
    events = dp_fedavg_events(1.0, sigma, rounds)
    assert epsilon_for(events.instance, delta) == pytest.approx(
        gaussian_epsilon(2.0 * math.sqrt(rounds) / sigma, delta), rel=1e-3
    )


def _hockey_stick_2d(q, s, gamma, a, b, n=401, half_width=8.0):
    """H_γ(P_a ‖ P_b), P_x = (1−q)N(0, s²I) + qN(x, s²I) in the plane, by quadrature on a grid."""
    grid = np.linspace(-half_width * s - 1.5, half_width * s + 1.5, n)
    step = grid[1] - grid[0]
    x, y = np.meshgrid(grid, grid, indexing="ij")

    def density(cx, cy):
        return np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * s * s)) / (2 * np.pi * s * s)

    p = (1 - q) * density(0, 0) + q * density(*a)
    r = (1 - q) * density(0, 0) + q * density(*b)
    return float(np.sum(np.maximum(p - gamma * r, 0.0)) * step * step)


@pytest.mark.parametrize(("q", "s"), [(0.05, 0.5), (0.25, 1.0), (0.6, 2.0)])
def test_replace_one_pair_dominates_every_pair_of_updates_in_the_ball(q, s):
    """Brute force behind the instance event: a replaced record moves one sampled agent's clipped
    update from a to b anywhere in the S-ball (S = 1 here; the plane spanned by a and b carries
    everything). No such pair has a larger hockey-stick divergence than the antipodal unit pair
    (−e, e) that dp-accounting's REPLACE_ONE uses, at any of the ε tried."""
    for epsilon in (0.0, 0.5, 1.0, 2.0):
        gamma = math.exp(epsilon)
        worst = _hockey_stick_2d(q, s, gamma, (1.0, 0.0), (-1.0, 0.0))
        for r1 in (0.5, 1.0):
            for r2 in (0.0, 0.5, 1.0):
                for angle in np.linspace(0.0, np.pi, 5):
                    b = (r2 * math.cos(angle), r2 * math.sin(angle))
                    assert _hockey_stick_2d(q, s, gamma, (r1, 0.0), b) <= worst + 1e-9


def test_instance_level_needs_the_pld_accountant():
    config = RunConfig(method="dp-fedavg", privacy=PrivacyConfig(sigma=1.0, accountant="rdp"))
    with pytest.raises(ConfigError) as error:
        DpFedAvg.from_config(config, sigma=1.0, queries=1, min_responders=1)
    assert error.value.argument == "accountant"


def test_zero_sigma_is_non_private():
    events = DpFedAvg(sigma=0.0).planned_events()
    assert isinstance(events.agent, dp_event.NonPrivateDpEvent)
    assert math.isinf(epsilon_for(events.agent, 1e-3))


def test_noise_shares_drawn_at_once_are_each_agents_own_in_order(small_federation):
    """The agents draw their noise shares on one thread a core: the total is the same, to the bit, on one
    thread and on two, and it is the in-order sum of what each agent releases from its own generator."""
    import torch

    method = DpFedAvg(sigma=1.0, model="logistic", local_steps=2)
    n, d = small_federation.num_agents, 650
    training = method.round_training(0, 0.1, 3, n)
    theta, chosen = np.zeros(d, np.float32), np.array([2, 5])
    before = torch.get_num_threads()
    totals = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            transport = LocalTransport(small_federation, seed=0, noise_seed=3)
            totals.append(transport.secure_update_sum(theta, chosen, training))
    finally:
        torch.set_num_threads(before)
    np.testing.assert_array_equal(totals[1], totals[0])
    twin = LocalTransport(small_federation, seed=0, noise_seed=3)
    expected = np.zeros(d, dtype=np.float64)
    for i, agent in enumerate(twin._agents):  # the loop's updates: equal to the batched ones up to float32 rounding
        expected += (local_update(agent, theta, training).astype(np.float64) if i in chosen
                     else agent.noise_share((d,), training.noise_std))
    np.testing.assert_allclose(totals[0], expected, rtol=0, atol=1e-6)


# --- --min-responders t (issue 42, defect 4) ----------------------------------------------


def test_with_min_responders_each_share_carries_sigma_s_over_root_t(capsys):
    """`fedvote run --agents 10 --min-responders 5`: any 5 honest shares carry the σS the events assume.

    Before the fix each share was σS/√N whatever t: 5 honest shares carried σS/√2, whose ε
    is 8.985 (agent) / 9.174 (instance) where 4.000 / 4.144 were reported (σ = 0.4972, q = 0.05,
    T = 5, δ = 1e-3).
    """
    from fedvote.cli import main

    code = main(["run", "--method", "dp-fedavg", "--agents", "10", "--min-responders", "5", "--epsilon", "4",
                 "--rounds", "5", "--noise-seed", "1", "--json"])  # fmt: skip
    assert code in (0, None)
    result = json.loads(capsys.readouterr().out)
    assert result["min_responders"] == 5
    total = result["noise_multiplier"] * result["clip_norm"]
    assert result["noise_share_std"] * math.sqrt(5) >= total * (1 - 1e-12)
    honest = dp_fedavg_events(0.05, result["noise_share_std"] * math.sqrt(5) / result["clip_norm"], 5)
    for level in ("agent", "instance"):  # the reported ε holds with only t honest shares
        assert epsilon_for(honest.at(level), 1e-3, "pld") <= result["privacy"][level]["epsilon"] * (1 + 1e-9)


def test_without_the_flag_each_share_is_sigma_s_over_root_n():
    method = DpFedAvg(sigma=0.9, clip_norm=0.5)
    assert method.noise_share(0, 16) == pytest.approx(0.9 * 0.5 / 4)
    assert method.with_min_responders(4).noise_share(0, 16) == pytest.approx(0.9 * 0.5 / 2)


@pytest.mark.parametrize("noise", ["server", "distributed-unmasked"])
def test_min_responders_is_refused_where_no_honest_shares_carry_the_noise(noise):
    config = RunConfig(
        method="dp-fedavg",
        federation=FederationConfig(agents=10),
        privacy=PrivacyConfig(sigma=0.9, min_responders=5),
        options={"noise": noise},
    )
    with pytest.raises(ConfigError) as error:
        DpFedAvg.from_config(config, sigma=0.9, queries=1, min_responders=5)
    assert error.value.argument == "min_responders"


def test_t_beyond_the_transports_agents_is_refused():
    method = DpFedAvg(sigma=0.9).with_min_responders(11)

    class Ten:
        num_agents = 10

    with pytest.raises(ConfigError, match="exceeds"):
        method.check_transport(Ten())  # type: ignore[arg-type]
