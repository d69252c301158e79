"""Every audited release: the statistics it uses, and that a broken one is caught."""

from __future__ import annotations

import numpy as np
import pytest

from fedvote.agents.agent import Agent
from fedvote.audit import audit
from fedvote.audit.canaries import vote_canary
from fedvote.audit.distinguishers import projection_scores, subsampled_gaussian_scores


def test_without_sampling_the_mixture_ratio_is_the_gaussian_one() -> None:
    # q = 1: log N(a, 1)/N(0, 1) at z is az - a^2/2; against N(-a, 1) it is 2az (closed forms).
    z = np.array([[-1.0, 0.5, 2.0]])
    assert np.allclose(
        subsampled_gaussian_scores(z, shift=0.6, noise_std=1.0, rate=1.0, antipodal=False), 0.6 * z[0] - 0.18
    )
    assert np.allclose(
        subsampled_gaussian_scores(2 * z, shift=1.2, noise_std=2.0, rate=1.0, antipodal=True), 2 * 0.6 * z[0]
    )
    part = np.array([[True, False, True]])
    masked = subsampled_gaussian_scores(
        z, shift=0.6, noise_std=1.0, rate=0.3, antipodal=True, taking_part=part
    )
    assert masked[1] == 0.0


def test_canaries_reach_the_sensitivity_of_each_vote() -> None:
    others = np.array([[5.0, 3.0, 0.0], [1.0, 1.0, 4.0]])  # favourite, runner-up: (0, 1), (2, 0)
    agent = vote_canary("agent", others)
    assert np.array_equal(agent.present, [[0, 1, 0], [1, 0, 0]]) and agent.absent is None
    instance = vote_canary("instance", others, weight=3.0)
    assert np.allclose(np.linalg.norm(instance.difference, axis=1), 3.0 * np.sqrt(2))
    knn = vote_canary("instance", others, k=4)
    assert np.allclose(np.linalg.norm(knn.difference, axis=1), np.sqrt(2) / 4)
    assert np.allclose(knn.absent.sum(axis=1), 1.0)  # still a mean of k labels
    received = np.stack([others + instance.present, others + instance.baseline])
    scores = projection_scores(received, others + instance.baseline, instance.difference)
    assert scores == pytest.approx([np.linalg.norm(instance.difference), 0.0])


HEADS = {"epsilon_classes": 2.0, "seed": 0, "noise_seed": 3}


def test_perturbed_heads_are_audited_below_their_claim() -> None:
    result = audit("fedd-p", "instance", 10_000, **HEADS)
    assert 0.4 * result.claimed_epsilon <= result.epsilon_lower_bound <= result.claimed_epsilon


def test_a_head_released_with_half_its_noise_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    release = Agent.release
    monkeypatch.setattr(Agent, "release", lambda self, v, s, e: release(self, v, s / 2, e))
    result = audit("fedd-p", "instance", 6000, **HEADS)
    assert result.epsilon_lower_bound > result.claimed_epsilon


def test_one_run_audit_of_dp_fedavg_stays_below_its_claim() -> None:
    result = audit("dp-fedavg", "instance", 100, seed=0, noise_seed=2, rounds=20)
    assert result.mode == "one-run" and result.details["canaries"] == 100
    assert 0.0 <= result.epsilon_lower_bound <= result.claimed_epsilon


def test_methods_without_a_finite_claim_are_refused() -> None:
    from fedvote.errors import ConfigError

    with pytest.raises(ConfigError, match="level"):
        audit("dp-fedsgd", "agent", 100)
    with pytest.raises(ConfigError, match="not private"):
        audit("fedavg", "agent", 100)


def test_a_release_the_audit_does_not_simulate_is_refused_not_misreported() -> None:
    from fedvote.errors import ConfigError

    # --secure-noise is audited for PATE-FL's sums and DP-FedAvg's run only: kNN's count-scale release is refused
    with pytest.raises(ConfigError, match="dp-fedavg's run and pate-fl's vote sums only, not private-knn-fl"):
        audit("private-knn-fl", "agent", 100, agents=5, queries=10, secure_noise=True)
