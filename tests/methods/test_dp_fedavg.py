import math

import numpy as np
import pytest
from dp_accounting import dp_event, pld

from fedvote.config import PrivacyConfig, RunConfig
from fedvote.methods import METHODS
from fedvote.methods.dp_fedavg import DpFedAvg
from fedvote.methods.gradient import GradientOptions
from fedvote.models.local_training import LocalTraining, LocalUpdates, clip_to_norm
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import dp_fedavg_events
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.transport.local import LocalTransport


def _std_tolerance(n):
    """5 standard errors of a sample std from n normal draws (relative)."""
    return 5.0 / math.sqrt(2.0 * n)


def test_registered_and_from_config():
    assert METHODS["dp-fedavg"] is DpFedAvg
    config = RunConfig(
        method="dp-fedavg",
        privacy=PrivacyConfig(sigma=0.9, delta=1e-4),
        gradient=GradientOptions(rounds=9, clip_norm=0.5, noise="server"),
    )
    method = DpFedAvg.from_config(config, sigma=0.9, queries=1, min_responders=1)
    assert (method.sigma, method.rounds, method.clip_norm, method.noise, method.delta) == (0.9, 9, 0.5, "server", 1e-4)
    assert (method.sampling_rate, method.local_steps) == (0.05, 20)  # the paper's q and E


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


def test_distributed_noise_share_statistics(small_federation):
    """Algorithm 6: an agent's sent update = clipped update + N(0, σ²S²/m_t) per coordinate."""
    method = DpFedAvg(sigma=2.0, model="logistic", noise="distributed")
    m_t = 4
    training = method.round_training(3, 0.1, m_t)
    assert training.noise_std == pytest.approx(2.0 * 0.08 / 2.0)
    clean = LocalTraining(**{**training.__dict__, "noise_std": 0.0})
    ids = np.array([1])
    noised = LocalTransport(small_federation, seed=0, noise_seed=5).local_updates(np.zeros(650, np.float32), ids, training)
    plain = LocalTransport(small_federation, seed=0, noise_seed=5).local_updates(np.zeros(650, np.float32), ids, clean)
    residual = (noised.updates - plain.updates).astype(np.float64).ravel()  # same SGD, only the noise differs
    assert abs(residual.mean()) < 5 * training.noise_std / math.sqrt(residual.size)
    assert residual.std() == pytest.approx(training.noise_std, rel=_std_tolerance(residual.size))


@pytest.mark.parametrize("noise", ["server", "distributed"])
def test_server_step_is_noised_sum_over_q_n(noise):
    """θ' − θ = (Σ Δ̃ + N(0, σ²S²)) / (qN); with m_t = 0 the server still adds the noise."""
    method = DpFedAvg(sigma=1.5, clip_norm=0.1, sampling_rate=0.2, noise=noise)
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
    # instance level: the loose Gaussian(σ/2) bound is charged; the tight replace-one figure is reported
    assert ledger.event("instance") == dp_fedavg_events(q, sigma, rounds).instance
    assert 0 < details["instance_epsilon_replace_one"] < epsilon_for(ledger.event("instance"), delta)


def test_zero_sigma_is_non_private():
    events = DpFedAvg(sigma=0.0).planned_events()
    assert isinstance(events.agent, dp_event.NonPrivateDpEvent)
    assert math.isinf(epsilon_for(events.agent, 1e-3))
