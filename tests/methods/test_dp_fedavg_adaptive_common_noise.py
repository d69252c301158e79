"""DP-FedAvg ``--clipping adaptive`` with common random numbers (issue 46): at the same seeds the
adaptive run's sampling coins and the noise on its d update coordinates are the fixed clip's (the
clip bit's noise comes from a stream of its own), and the count's noise is the σ_b the accounting
assumes."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from fedvote.agents.local_updates import ClipCountTraining, noise_shares, release_update
from fedvote.methods.dp_fedavg import DpFedAvg
from fedvote.models.local_training import LocalTraining
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.transport.local import LocalTransport

Q, Z = 0.3, 0.9


class Recording(LocalTransport):
    """Keeps what the server's side got each round: who took part, the sum (or the updates), the training."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.chosen: list[np.ndarray] = []
        self.totals: list[np.ndarray] = []
        self.trainings: list[LocalTraining] = []
        self.thetas: list[np.ndarray] = []

    def secure_update_sum(self, global_params, agent_ids, training):
        self.chosen.append(np.array(agent_ids))
        self.thetas.append(np.array(global_params))
        self.trainings.append(training)
        total = super().secure_update_sum(global_params, agent_ids, training)
        self.totals.append(total)
        return total

    def local_updates(self, global_params, agent_ids, training):
        self.chosen.append(np.array(agent_ids))
        self.trainings.append(training)
        return super().local_updates(global_params, agent_ids, training)


def _run(federation, *, sigma, clipping, rounds, noise="distributed", seed=3):
    method = DpFedAvg(sigma=sigma, sampling_rate=Q, rounds=rounds, local_steps=2, model="logistic",
                      clipping=clipping, noise=noise, noise_seed=seed)
    transport = Recording(federation, noise_seed=seed)
    outcome = method.run(federation.server_data(), transport, PrivacyLedger())
    return method, transport, outcome


def _clipped_sum(transport, round_index):
    """Σ of round ``round_index``'s chosen agents' clipped updates without noise (as the fixed run
    trained them: plain SGD's batches come from the training seed, so nothing private is drawn)."""
    training = dataclasses.replace(transport.trainings[round_index], noise_std=0.0)
    theta, chosen = transport.thetas[round_index], transport.chosen[round_index]
    received = LocalTransport.local_updates(transport, theta, chosen, training)
    return received.updates.astype(np.float64).sum(axis=0)


def test_round_one_update_sums_equal_the_fixed_clips_at_equal_update_noise(small_federation):
    """C_1 = S and the fixed run given the adaptive run's update multiplier σ_Δ: the same coins, the
    same update noise, so the sums' d update coordinates are equal to the bit (the count's excluded)."""
    adaptive, adaptive_run, _ = _run(small_federation, sigma=Z, clipping="adaptive", rounds=1)
    sigma_delta = adaptive.update_multiplier(small_federation.num_agents)
    assert sigma_delta > Z
    _, fixed_run, _ = _run(small_federation, sigma=sigma_delta, clipping="fixed", rounds=1)
    assert adaptive_run.trainings[0].clip_norm == fixed_run.trainings[0].clip_norm == 0.08
    assert adaptive_run.trainings[0].noise_std == pytest.approx(fixed_run.trainings[0].noise_std, rel=1e-15)
    assert np.array_equal(adaptive_run.chosen[0], fixed_run.chosen[0]) and adaptive_run.chosen[0].size > 0
    (fixed_total,), (adaptive_total,) = fixed_run.totals, adaptive_run.totals
    assert adaptive_total.shape == (fixed_total.shape[0] + 1,)
    assert np.array_equal(adaptive_total[:-1], fixed_total)


def test_default_runs_share_coins_and_standard_normals(small_federation):
    """The Bar's pair as run (fixed at z, adaptive at z with σ_Δ > z on the updates): the same coins in
    every round; round 1's update noise is the fixed run's times σ_Δ/z; and every agent's noise
    stream stands where the fixed run's does after each run (so later rounds draw the same normals)."""
    rounds = 4
    adaptive, adaptive_run, _ = _run(small_federation, sigma=Z, clipping="adaptive", rounds=rounds)
    _, fixed_run, _ = _run(small_federation, sigma=Z, clipping="fixed", rounds=rounds)
    for a, f in zip(adaptive_run.chosen, fixed_run.chosen, strict=True):
        assert np.array_equal(a, f)
    signal = _clipped_sum(fixed_run, 0)
    fixed_noise = fixed_run.totals[0] - signal
    adaptive_noise = adaptive_run.totals[0][:-1] - signal
    ratio = adaptive.update_multiplier(small_federation.num_agents) / Z
    assert ratio > 1.0
    scale = Z * 0.08
    assert np.std(fixed_noise) == pytest.approx(scale, rel=0.1)  # the noise is really there
    assert np.allclose(adaptive_noise, ratio * fixed_noise, rtol=0, atol=1e-5 * scale)
    for a, f in zip(adaptive_run._agents, fixed_run._agents, strict=True):
        assert a._noise_rng.bit_generator.state == f._noise_rng.bit_generator.state


def test_server_noise_keeps_the_coins_and_the_update_draws(small_federation):
    """``--noise server``: the server's count noise has its own stream, so the loop's generator (coins,
    update noise) advances as in the fixed run: the same participants in every round."""
    rounds = 6
    _, adaptive_run, _ = _run(small_federation, sigma=Z, clipping="adaptive", rounds=rounds, noise="server")
    _, fixed_run, _ = _run(small_federation, sigma=Z, clipping="fixed", rounds=rounds, noise="server")
    assert len(adaptive_run.chosen) == len(fixed_run.chosen) == rounds
    for a, f in zip(adaptive_run.chosen, fixed_run.chosen, strict=True):
        assert np.array_equal(a, f)
    # The server's draw itself: the same standard normals on the d coordinates, the count apart.
    method = DpFedAvg(sigma=Z, sampling_rate=Q, model="logistic", clipping="adaptive", noise="server",
                      noise_seed=3)
    fixed = DpFedAvg(sigma=Z, sampling_rate=Q, model="logistic", noise="server", noise_seed=3)
    n, d = small_federation.num_agents, 650
    empty = type("Received", (), {"updates": np.zeros((0, d + 1), dtype=np.float32)})()
    empty_fixed = type("Received", (), {"updates": np.zeros((0, d), dtype=np.float32)})()
    counted = method.round_training(0, 0.1, 0, n)
    rng_a, rng_f = np.random.default_rng(7), np.random.default_rng(7)
    total_a = method._noised_sum(empty, counted, rng_a, n)
    plain = LocalTraining(model="logistic", steps=1, learning_rate=1.0, clip_norm=0.08)
    total_f = fixed._noised_sum(empty_fixed, plain, rng_f, n)
    ratio = method.update_multiplier(n) / Z
    assert np.allclose(total_a[:-1], ratio * total_f, rtol=1e-12, atol=0)
    assert rng_a.bit_generator.state == rng_f.bit_generator.state


def test_count_noise_has_the_std_the_accounting_assumes(small_federation):
    """The released count Σ(b_i − ½) + noise: over K independent rounds of the N agents' releases (3
    sampled with their bit, the rest shares), the noise in count units has std σ_b = z/(2·√0.01)
    here — what z = (σ_Δ⁻² + (2σ_b)⁻²)^(−1/2) and the events assume — within 5 standard errors of the
    sample variance (relative √(2/(K − 1))); the update noise keeps σ_Δ·C/√N a coordinate."""
    method = DpFedAvg(sigma=Z, sampling_rate=Q, model="logistic", clipping="adaptive", noise_seed=0)
    n = small_federation.num_agents
    training = method.round_training(0, 0.1, 3, n)
    assert isinstance(training, ClipCountTraining)
    sigma_b = method.count_std(n)
    assert sigma_b == pytest.approx(Z / (2 * math.sqrt(0.01)), rel=1e-12)
    assert math.sqrt(n) * training.noise_std / training.count_scale == pytest.approx(sigma_b, rel=1e-12)
    agents = LocalTransport(small_federation, noise_seed=11)._agents
    width, rounds = 8, 3000
    counts = np.empty(rounds)
    update_noise = np.empty((rounds, width - 1))
    zero = np.zeros(width - 1, dtype=np.float32)  # norm 0 ≤ C: bit 1, centred +½
    for k in range(rounds):
        released = [release_update(agent, zero, training) for agent in agents[:3]]
        shares = noise_shares(agents[3:], width, training.noise_std)
        total = np.sum(released, axis=0, dtype=np.float64) + shares.sum(axis=0, dtype=np.float64)
        counts[k] = total[-1] / training.count_scale - 3 * 0.5
        update_noise[k] = total[:-1]
    tolerance = 5 * math.sqrt(2 / (rounds - 1))
    assert abs(np.var(counts, ddof=1) / sigma_b**2 - 1) < tolerance
    assert abs(np.mean(counts)) < 5 * sigma_b / math.sqrt(rounds)
    expected_update_std = method.update_multiplier(n) * 0.08
    samples = update_noise.size
    assert abs(np.var(update_noise, ddof=1) / expected_update_std**2 - 1) < 5 * math.sqrt(2 / (samples - 1))
    correlations = [np.corrcoef(counts, update_noise[:, j])[0, 1] for j in range(width - 1)]
    assert max(abs(c) for c in correlations) < 5 / math.sqrt(rounds)  # the count's stream is apart
