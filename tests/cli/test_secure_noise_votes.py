"""``--secure-noise`` for Private-kNN-FL and weighted PATE: integer votes on a public scale.

End to end on digits: the released sums are integers, the noise is the CSPRNG's discrete
Gaussian, and the ε reported equals an independent computation — KLS21's bound with τ ≈ 0
(τ < 1e-100 at these σ) is the Gaussian's RDP at the ratio r = sensitivity/σ evaluated at
⌈α⌉, Q·m·⌈α⌉r²/2 for m moved coordinates, converted by dp-accounting's ``compute_epsilon``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

from fedvote.aggregation.voting import WeightRule, integer_weight, noise_share_std
from fedvote.cli import main
from fedvote.models.config import TrainingConfig
from fedvote.models.features import fit_feature_extractor
from fedvote.privacy.accountant import RDP_ORDERS, epsilon_for
from fedvote.privacy.discrete import kls21_tau
from fedvote.privacy.events import (
    private_knn_fl_discrete_events,
    weighted_voting_discrete_events,
)
from fedvote.transport.local import LocalTransport


def rdp_epsilon(ratio_squared: float, delta: float) -> float:
    """ε of RDP ⌈α⌉·``ratio_squared``/2 at fedvote's orders, by dp-accounting's conversion."""
    orders = np.asarray(RDP_ORDERS)
    return float(compute_epsilon(orders, np.ceil(orders) * ratio_squared / 2.0, delta)[0])

SMALL = ["--agents", "10", "--epochs", "5", "--teacher-model", "logistic", "--student-model", "logistic"]


def invoke(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
        raise SystemExit(0)
    captured = capsys.readouterr()
    assert int(exit_info.value.code or 0) == 0, captured.err
    return json.loads(captured.out)


def test_knn_secure_noise_reports_the_gaussian_ratio_epsilon_of_its_integer_counts(capsys):
    result = invoke(["run", "--method", "private-knn-fl", *SMALL, "--queries", "40", "--secure-noise",
                     "--epsilon", "4", "--json"], capsys)
    privacy, sigma, queries = result["privacy"], result["sigma"], result["queries"]
    assert privacy["noise_source"] == "csprng-discrete-gaussian"
    assert privacy["accountant"] == "rdp"  # a K-dimensional, 10-share event has no PLD
    k = int(result["k"])
    scale = int(result["count_scale"])
    assert scale >= k >= 1
    delta = privacy["delta"]
    # Independent: the Gaussian mechanism at the mean-unit ratios 1/σ and √2/(Kσ), RDP orders.
    assert kls21_tau(scale * sigma, 10) < 1e-100
    agent = rdp_epsilon(queries / sigma**2, delta)  # Δ₂ = K counts over σ_count = Kσ
    instance = rdp_epsilon(queries * 2 / (scale * sigma) ** 2, delta)  # two coordinates by 1 count
    assert privacy["agent"]["epsilon"] == pytest.approx(agent, rel=1e-9)
    assert privacy["instance"]["epsilon"] == pytest.approx(instance, rel=1e-9)
    assert privacy["agent"]["epsilon"] <= 4.0
    assert privacy["agent"]["sensitivity"] == 1.0
    # the events the run charged are the discrete ones on the count scale
    events = private_knn_fl_discrete_events(sigma, 10, queries, k, scale)
    assert privacy["agent"]["epsilon"] == pytest.approx(epsilon_for(events.agent, delta, "rdp"), rel=1e-12)


def test_weighted_pate_secure_noise_is_accounted_at_the_integer_max_weight(capsys):
    result = invoke(["run", "--method", "weighted-pate", *SMALL, "--queries", "40", "--secure-noise",
                     "--weight-scale", "7", "--sigma", "20", "--json"], capsys)
    privacy, queries = result["privacy"], result["queries"]
    assert privacy["noise_source"] == "csprng-discrete-gaussian"
    top = integer_weight(3.0, 7)  # w_max 3 on the grid of 1/7: 21
    assert top == 21
    delta = privacy["delta"]
    # Count-unit ratio W_max/(Kσ) = 21/140 = w_max/σ: the Gaussian's figure at s = 3, σ = 20.
    assert kls21_tau(7 * 20.0, 10) < 1e-100
    agent = rdp_epsilon(queries * (21 / 140) ** 2, delta)
    instance = rdp_epsilon(2 * queries * (21 / 140) ** 2, delta)
    assert privacy["agent"]["epsilon"] == pytest.approx(agent, rel=1e-9)
    assert privacy["instance"]["epsilon"] == pytest.approx(instance, rel=1e-9)
    assert result["weight_scale"] == 7


def test_a_scale_that_rounds_w_max_off_the_grid_is_charged_at_the_rounded_weight():
    """K = 3, w_max = 0.5: round(1.5) = 2, so Δ = 2 counts, ratio 2/(3σ) > w_max/σ (never the real w_max)."""
    events = weighted_voting_discrete_events(10.0, 1, 5, 0.5, 3)
    assert events.agent_sensitivity == pytest.approx(2 / 3)
    assert events.agent.event.sensitivity == 2 and events.agent.event.sigma == 30.0


def test_secure_knn_votes_leave_as_integer_counts_and_sum_to_integers(small_federation):
    transport = LocalTransport(small_federation, seed=0, secure_noise=True)
    extractor = fit_feature_extractor("pca", small_federation.public.features, dim=10, seed=0)
    ks = transport.prepare_knn(extractor, k=4)
    assert set(ks.tolist()) == {4}
    batch = np.arange(30)
    released = transport.knn_vote_sum(batch, noise_share_std(4 * 2.0, 10), 10)
    assert released is not None
    assert np.array_equal(released.sums, np.round(released.sums))  # exact integers
    clean = transport.clean_vote_histograms(batch) * 4  # (Q, C) counts
    noise = released.sums - clean
    assert 0 < float(np.std(noise)) < 3 * 8.0


def test_secure_weighted_votes_are_integer_multiples_of_the_rounded_weights(small_federation):
    transport = LocalTransport(small_federation, seed=0, secure_noise=True)
    transport.train_teachers(TrainingConfig(model="logistic", epochs=1))
    transport.assign_weights(None, WeightRule(scheme="one-vote", scale=13))
    clean = transport.weighted_vote_sum(np.arange(20), 0.0, 10)  # no noise: 13 × the vote counts
    assert clean is not None and np.all(clean.sums.sum(axis=1) == 13 * 10)
    assert np.array_equal(clean.sums % 13, np.zeros_like(clean.sums))
    released = transport.weighted_vote_sum(np.arange(20), 13 * 2.0, 10)
    assert released is not None
    assert np.array_equal(released.sums, np.round(released.sums))  # exact integers
    assert not np.array_equal(released.sums, clean.sums)
