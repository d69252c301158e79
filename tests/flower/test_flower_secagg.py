"""SecAgg+ settings for vote histograms, the dropout rule, and the Flower deployment files.

Fast checks without processes; the deployment itself is in test_flower_integration.py.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from flwr.common.secure_aggregation.quantization import dequantize, quantize
from scipy.stats import norm

from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.errors import ConfigError
from fedvote.flower.app import RUN_CONFIG_DEFAULTS, app_pyproject
from fedvote.flower.files import load_agent_file, load_server_file, write_deployment_files
from fedvote.flower.secagg import (
    DEFAULT_CLIP_SIGMAS,
    MODULUS_RANGE,
    quantization_range_for,
    secagg_settings,
)
from fedvote.flower.transport import FlowerTransport, export_extractor, load_extractor
from fedvote.models.features import fit_feature_extractor
from fedvote.runner import federation_fingerprint, make_federation
from fedvote.transport.base import agent_training_seeds

# --- clipping range and quantisation -------------------------------------------------------


@pytest.mark.parametrize("agents", [1, 2, 3, 5, 7, 8, 50, 200, 1023, 5000])
def test_quantization_range_keeps_the_sum_below_the_modulus(agents):
    t = quantization_range_for(agents)
    assert t & (t - 1) == 0 and t <= 2**30  # a power of two that Flower's int32 rounding holds
    assert agents * t < MODULUS_RANGE  # N values in {0..T} (and N unit weights, each T) sum below M
    assert 2 * agents * t >= MODULUS_RANGE or t == 2**30  # and T is the largest such power


def _secagg_sum(votes: np.ndarray, clipping_range: float, target: int) -> np.ndarray:
    """What SecAggPlusWorkflow unmasks, times n: Flower's own quantize/dequantize, summed in Z_M."""
    n = votes.shape[0]
    quantized = [quantize([vote], clipping_range, target)[0].astype(np.int64) for vote in votes]
    total = np.sum(quantized, axis=0) % MODULUS_RANGE  # the masks cancel; the sum is mod M
    (mean,) = dequantize([total], clipping_range, target)
    mean = (mean - (n - 1) * clipping_range) / n  # the workflow's offset and 1/n weight
    return mean * n


def test_quantised_sum_is_within_the_documented_bound_of_the_exact_sum():
    rng = np.random.default_rng(0)
    sigma, agents, t = 3.0, 7, 5
    settings = secagg_settings(sigma / math.sqrt(t), agents, t)
    votes = np.eye(10)[rng.integers(0, 10, size=(agents, 40))]  # (N, Q, C) one-hot
    noisy = votes + rng.normal(0.0, settings.noise_std, size=votes.shape)
    released = _secagg_sum(noisy, settings.clipping_range, settings.quantization_range)
    error = np.abs(released - noisy.sum(axis=0))
    assert error.max() <= settings.sum_error_bound(agents)
    assert settings.sum_error_bound(agents) < 1e-5 * sigma  # far below the noise


def test_without_noise_the_quantised_sum_rounds_to_the_exact_vote_counts():
    rng = np.random.default_rng(1)
    settings = secagg_settings(0.0, 5, 5)
    assert settings.clipping_range == 1.0
    votes = np.eye(4)[rng.integers(0, 4, size=(5, 30))]  # (N, Q, C)
    released = _secagg_sum(votes, settings.clipping_range, settings.quantization_range)
    np.testing.assert_array_equal(np.rint(released), votes.sum(axis=0))


def test_flower_stochastic_rounding_is_unbiased():
    # The rounding error of one value x is ceil(x) − x w.p. x − floor(x) ...: mean 0,
    # std ≤ 1/2 step; the mean of n errors is within 5·(1/2)/√n of 0 but for 6e-7.
    settings = secagg_settings(1.0, 5, 5)
    x = np.full(200_000, 0.123456789)
    q = quantize([x], settings.clipping_range, settings.quantization_range)[0]
    (back,) = dequantize([q], settings.clipping_range, settings.quantization_range)
    errors = (back - x) / settings.step  # in steps
    assert np.all(np.abs(errors) < 1.0)
    assert abs(errors.mean()) < 5 * 0.5 / math.sqrt(x.size)


def test_clipping_probability_is_the_union_bound_and_no_noisy_vote_is_clipped():
    settings = secagg_settings(2.0, 5, 5, clip_sigmas=DEFAULT_CLIP_SIGMAS)
    expected = 2 * 5 * 1000 * norm.sf(DEFAULT_CLIP_SIGMAS)
    assert settings.clip_probability(1000) == pytest.approx(expected, rel=1e-9)
    assert settings.clip_probability(10**9) < 1e-75
    assert settings.clip_slack(1000, 3.0) == pytest.approx(expected * (1 + math.e**3), rel=1e-9)
    # A Monte Carlo check at k = 2, where clipping is frequent enough to count:
    loose = secagg_settings(2.0, 5, 5, clip_sigmas=2.0)
    rng = np.random.default_rng(2)
    votes = rng.integers(0, 2, size=400_000).astype(float)  # coordinates in {0, 1}
    noisy = votes + rng.normal(0.0, loose.noise_std, size=votes.size)
    rate = np.mean(np.abs(noisy) > loose.clipping_range)
    per_coordinate = loose.clip_probability(1) / loose.num_agents
    assert rate <= per_coordinate + 4 * math.sqrt(per_coordinate / votes.size)
    assert secagg_settings(0.0, 5, 5).clip_probability(10**6) == 0.0


def test_rounding_eta_bounds_the_periodised_gaussian():
    # n = 2 honest agents: given the sum, w₁ ~ N(0, s²/2); its position modulo Δ has density
    # Σₖ φ(u + kΔ) which η bounds relative to uniform. Checked numerically where η is visible.
    real = secagg_settings(1.0, 2, 2)
    step = real.step
    s = 0.35 * step  # a (hypothetical) noise comparable to the step, so η is not 0
    eta = dataclasses.replace(real, noise_std=s).rounding_eta()
    assert 0 < eta < 1
    u = np.linspace(0, step, 2001)
    k = np.arange(-50, 51)
    density = norm.pdf(u[:, None] + k[None, :] * step, scale=s / math.sqrt(2)).sum(axis=1) * step
    assert np.max(np.abs(density - 1.0)) <= eta + 1e-12
    assert secagg_settings(2.0, 5, 5).rounding_eta() == 0.0  # the real case: s/Δ ~ 1e7
    assert secagg_settings(2.0, 5, 5).epsilon_slack(10**6) == 0.0
    assert secagg_settings(0.0, 5, 5).epsilon_slack(10) == math.inf


def test_settings_refuse_what_secagg_plus_cannot_do():
    assert secagg_settings(1.0, 5, 4).reconstruction_threshold == 4  # no sum of < t agents
    assert secagg_settings(1.0, 5, 1).reconstruction_threshold == 2  # Shamir needs 2
    with pytest.raises(ConfigError, match="agents"):
        secagg_settings(1.0, 1, 1)
    with pytest.raises(ConfigError, match="min_responders"):
        secagg_settings(1.0, 5, 6)
    with pytest.raises(ConfigError, match="clip_sigmas"):
        secagg_settings(1.0, 5, 5, clip_sigmas=0.0)


# --- the dropout rule ------------------------------------------------------------------------


class _NoGrid:
    """A grid that must not be used."""

    def __getattr__(self, name):
        raise AssertionError(f"the transport used the grid ({name}) though too few agents are left")


def test_below_t_live_agents_a_round_asks_nobody_and_releases_nothing():
    transport = FlowerTransport(_NoGrid(), object(), num_agents=5, num_classes=10)  # type: ignore[arg-type]
    transport._agents.agent_of = {101: 0, 102: 1, 103: 3}  # agents 2 and 4 dropped out
    assert transport.vote_sum(np.arange(8), 1.0, min_responders=4) is None
    assert transport.knn_vote_sum(np.arange(8), 1.0, min_responders=4) is None
    record = transport.rounds[-1]
    assert (record.asked, record.responders, record.released) == (3, 0, False)
    assert transport.communication.upload_floats == 0


def test_transport_refuses_a_federation_secagg_cannot_serve():
    with pytest.raises(ConfigError, match="at least 2 agents"):
        FlowerTransport(_NoGrid(), object(), num_agents=1, num_classes=10)  # type: ignore[arg-type]


# --- what travels and what is stored -----------------------------------------------------------


@pytest.mark.parametrize("kind", ["pca", "random", "autoencoder", "contrastive"])
def test_phi_travels_as_an_exported_program_and_computes_the_same_features(digits, kind):
    pool = digits.features[:300]
    extractor = fit_feature_extractor(kind, pool, dim=12, seed=0, normalize=True, epochs=1)
    shipped = load_extractor(export_extractor(extractor), pool, normalize=True)
    np.testing.assert_allclose(shipped.transform(digits.features[300:340]),
                               extractor.transform(digits.features[300:340]), atol=1e-6)


def test_deployment_files_hold_each_agent_its_data_seeds_and_the_pool(tmp_path):
    config = RunConfig(
        federation=FederationConfig(dataset="digits", agents=3),
        privacy=PrivacyConfig(sigma=1.0, noise_seed=5),
        seed=4,
    )
    write_deployment_files(config, tmp_path)
    federation = make_federation(config)
    seeds = agent_training_seeds(4, 3)
    for i in range(3):
        agent = load_agent_file(tmp_path / f"agent-{i}.npz")
        assert (agent.agent_id, agent.num_agents, agent.seed, agent.noise_seed) == (i, 3, seeds[i], 5)
        np.testing.assert_array_equal(agent.data.features, federation.agents[i].features)
        np.testing.assert_array_equal(agent.public_features, federation.public.features)
        assert agent.fingerprint == federation_fingerprint(config)
    server = load_server_file(tmp_path / "server.npz")
    np.testing.assert_array_equal(server.agent_records, federation.agent_sizes())
    np.testing.assert_array_equal(server.server.test.labels, federation.test.labels)
    with pytest.raises(ConfigError, match="not a fedvote agent file|no fedvote agent file"):
        load_agent_file(tmp_path / "server.npz")
    with pytest.raises(ConfigError, match="no agent file"):
        load_agent_file(tmp_path / "missing.npz")


def test_the_flower_app_project_is_valid_for_flower(tmp_path):
    import tomli
    from flwr.common.config import validate_config

    config = tomli.loads(app_pyproject())
    valid, errors, _ = validate_config(config, check_module=True, project_dir=tmp_path)
    assert valid, errors
    assert config["tool"]["flwr"]["app"]["config"]["clip-sigmas"] == DEFAULT_CLIP_SIGMAS
    assert set(config["tool"]["flwr"]["app"]["config"]) == set(RUN_CONFIG_DEFAULTS)
