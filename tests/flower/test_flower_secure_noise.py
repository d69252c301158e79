"""``fedvote deploy``'s default, secure noise: integer sums through SecAgg+ with no rounding slack.

The integer SecAgg+ settings pass every integer through Flower's own quantisation
unchanged, the clip probability is the discrete Gaussian's sub-Gaussian bound, a sum that
could wrap the 2³² modulus is refused, and the ServerApp's own ``run_on_flower`` (agents in
process, as in ``test_flower_headline.py``) reports exactly the discrete Gaussian
accountant's ε — no ε slack, no rounding — and the seeded Gaussian path only when asked.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from flwr.common.secure_aggregation.quantization import dequantize, quantize

import fedvote.flower.transport as flower_module
from fedvote.aggregation.secure_noise import discrete_gaussian
from fedvote.cli import main
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.errors import ConfigError
from fedvote.flower.app import ServerSettings, run_on_flower
from fedvote.flower.files import deployed_config, write_deployment_files
from fedvote.flower.secagg import DISCRETE_LABEL, MODULUS_RANGE, secagg_settings
from fedvote.flower.transport import RoundRecord, exact_integer_sums
from fedvote.models.training import TrainingConfig
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import pate_fl_discrete_events
from fedvote.runner import make_federation
from fedvote.transport.local import LocalTransport

AGENTS, QUERIES, CLASSES, DELTA = 5, 60, 10, 1e-3


def test_integer_settings_pass_integers_through_flowers_quantisation_unchanged() -> None:
    settings = secagg_settings(3.7, AGENTS, AGENTS, integer=True)
    c = settings.clipping_range
    assert c == math.ceil(1 + 20 * 3.7) and settings.quantization_range == 2 * c and settings.step == 1.0
    votes = np.eye(CLASSES)[np.arange(400) % CLASSES] + discrete_gaussian(3.7, (400, CLASSES))  # (Q, C)
    quantized = quantize([votes], settings.clipping_range, settings.quantization_range)[0]
    assert np.array_equal(quantized, votes + c)  # the same integers, shifted: no coin changed any
    restored = dequantize([quantized], settings.clipping_range, settings.quantization_range)[0]
    assert np.array_equal(restored, votes)
    assert settings.rounding_eta() == 0.0 and settings.epsilon_slack(10**6) == 0.0
    assert settings.sum_error_bound(AGENTS) == 0.0


def test_integer_clip_probability_is_the_sub_gaussian_union_bound_and_vanishes_at_k20() -> None:
    settings = secagg_settings(2.0, AGENTS, AGENTS, clip_sigmas=3.0, integer=True)
    assert settings.clip_probability(1) == pytest.approx(2 * AGENTS * math.exp(-4.5), rel=1e-12)
    # Monte Carlo: honest values clipped no more often than the bound says, per coordinate.
    share = 2.0
    draws = discrete_gaussian(share, (200_000,)) + 1  # a vote of 1 plus its share, the worst side
    observed = np.mean(np.abs(draws) > settings.clipping_range)
    assert observed <= 2 * math.exp(-4.5)
    default = secagg_settings(2.0, AGENTS, AGENTS, integer=True)
    assert default.clip_probability(QUERIES * CLASSES) < 1e-80
    assert default.min_clip_sigmas(QUERIES * CLASSES, 4.0, DELTA) < 8.0


def test_integer_sums_that_could_wrap_the_modulus_are_refused() -> None:
    noise = (MODULUS_RANGE / (2 * 1000) - 1) / 20  # N·2c just reaches 2^32 for N = 1000
    with pytest.raises(ConfigError, match="wrap"):
        secagg_settings(noise, 1000, 1000, integer=True)
    secagg_settings(noise / 2, 1000, 1000, integer=True)  # half the noise fits


def test_exact_integer_sums_undo_flowers_mean_and_refuse_non_integers() -> None:
    sums = np.array([[12345.0, -7.0, 3.0]])
    mean = sums / 7.0
    assert np.array_equal(exact_integer_sums(mean * 7.0), sums)
    with pytest.raises(RuntimeError, match="non-integer"):
        exact_integer_sums(np.array([[1.5]]))


def deployment_config(noise_seed: int | None = None, method: str = "pate-fl") -> RunConfig:
    return RunConfig(
        method=method,
        federation=FederationConfig(dataset="digits", agents=AGENTS),
        privacy=PrivacyConfig(epsilon=4.0, delta=DELTA, noise_seed=noise_seed),
        teacher=TrainingConfig(model="logistic", epochs=5),
        student=TrainingConfig(model="logistic", epochs=5),
        queries=QUERIES,
        self_training_rounds=0,
    )


def test_deployed_config_is_secure_by_default_and_refuses_what_cannot_be() -> None:
    assert deployed_config(deployment_config(), secure_noise=True).privacy.secure_noise is True
    with pytest.raises(ConfigError, match="--no-secure-noise") as error:
        deployed_config(deployment_config(noise_seed=3), secure_noise=True)
    assert error.value.argument == "secure_noise"
    with pytest.raises(ConfigError, match="kNN"):
        deployed_config(deployment_config(method="private-knn-fl"), secure_noise=True)
    plain = deployed_config(deployment_config(noise_seed=3), secure_noise=False)
    assert plain.privacy.secure_noise is False and plain.privacy.noise_seed == 3


def in_process_flower(config: RunConfig):
    """The FlowerTransport of run_on_flower, over in-process agents (as test_flower_headline's)."""
    federation = make_federation(config)

    class InProcessFlower(LocalTransport):
        stated_privacy = flower_module.FlowerTransport.stated_privacy

        def __init__(self, grid, context, *, clip_sigmas, secure_noise, **kwargs):
            super().__init__(federation, seed=config.seed, secure_noise=secure_noise)
            self._num_classes = federation.num_classes
            self.clip_sigmas, self.secure = clip_sigmas, secure_noise
            self.rounds: list[RoundRecord] = []
            self.secagg = None
            self.dropped_agents: list[int] = []
            self.sums: list[np.ndarray] = []

        def vote_sum(self, query_indices, noise_std, min_responders):
            result = super().vote_sum(query_indices, noise_std, min_responders)
            self.secagg = secagg_settings(noise_std, self.num_agents, min_responders,
                                          clip_sigmas=self.clip_sigmas, integer=self.secure)
            self.sums.append(result.sums)
            self.rounds.append(RoundRecord(len(self.rounds) + 1, "pate", len(query_indices), self.num_agents,
                                           self.num_agents, True))
            return result

    return InProcessFlower


class _Untouchable:
    def __getattr__(self, name):
        raise AssertionError(f"the run reached Flower ({name})")


def test_the_deployed_headline_is_the_discrete_gaussian_accountants_figure(tmp_path: Path, monkeypatch) -> None:
    config = deployment_config()
    write_deployment_files(config, tmp_path)
    monkeypatch.setattr(flower_module, "FlowerTransport", in_process_flower(config))
    settings = ServerSettings.from_run_config(
        {"config": str(tmp_path / "run.json"), "server-data": str(tmp_path / "server.npz"),
         "out": str(tmp_path / "out")}
    )
    assert settings.secure_noise is True  # the ServerApp's default
    result = run_on_flower(settings, _Untouchable(), _Untouchable())

    privacy = result.privacy
    events = pate_fl_discrete_events(result.sigma, AGENTS, QUERIES)
    assert privacy.agent.epsilon == epsilon_for(events.agent, DELTA, "rdp")  # equal, not approximately
    assert privacy.instance.epsilon == epsilon_for(events.instance, DELTA, "rdp")
    assert privacy.delta == DELTA and privacy.noise_source == "csprng-discrete-gaussian"
    assert privacy.accountant == "rdp" and privacy.agent.epsilon <= 4.0
    secagg = result.details["flower"]["secagg"]
    assert secagg["epsilon_slack"] == 0.0 and secagg["integer"] is True
    assert secagg["gaussian_mechanism"]["label"] == DISCRETE_LABEL
    assert secagg["gaussian_mechanism"]["agent_epsilon"] == privacy.agent.epsilon
    assert result.config["privacy"]["secure_noise"] is True


def test_deploy_server_refuses_a_seeded_config_under_its_default_before_flower_starts(tmp_path, monkeypatch, capsys):
    import fedvote.cli.deploy as deploy_cli

    write_deployment_files(deployment_config(noise_seed=3), tmp_path)
    monkeypatch.setattr(deploy_cli, "_flower_executable", lambda name: pytest.fail(f"started {name}"))
    monkeypatch.setattr(deploy_cli, "background", lambda *a, **k: pytest.fail("started a SuperLink"))
    with pytest.raises(SystemExit) as exit_info:
        main(["deploy", "server", "--config", str(tmp_path / "run.json"), "--data", str(tmp_path / "server.npz"),
              "--out", str(tmp_path / "out"), "--insecure"])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedvote: error: --secure-noise: "), lines
