"""The (ε, δ) a Flower run reports is the deployed mechanism's, SecAgg+'s slack included.

SecAgg+ clips every noisy vote coordinate to [−c, c] and rounds it onto an integer grid;
the Gaussian mechanism's (ε, δ) does not cover either step. ``docs/privacy.md``
("Clipping range", "Quantisation") bounds what they add; these tests check that the
headline ``privacy`` of a Flower run carries it, that the Gaussian-only figure stays
beside it labelled, and that a clipping range whose slack could exceed 1 % of δ is
refused before anything is trained, released or charged.

The ServerApp's own code runs here (``run_on_flower``) with the agents in process: the
transport is a :class:`LocalTransport` that records its rounds and SecAgg+ settings as
:class:`FlowerTransport` does, so no Flower process starts.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

import fedvote.flower.transport as flower_module
from fedvote.cli import main
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.errors import ConfigError
from fedvote.flower.app import ServerSettings, run_on_flower
from fedvote.flower.files import write_deployment_files
from fedvote.flower.secagg import secagg_settings
from fedvote.flower.transport import RoundRecord
from fedvote.models.training import TrainingConfig
from fedvote.privacy.accountant import epsilon_for
from fedvote.results import LevelPrivacy, PrivacyReport
from fedvote.runner import make_federation
from fedvote.transport.local import LocalTransport

AGENTS, QUERIES, CLASSES, DELTA = 5, 100, 10, 1e-3
COORDINATES = QUERIES * CLASSES  # what each agent releases


def deployment_config(ledger: Path | None = None) -> RunConfig:
    """PATE-FL on digits, 5 agents, calibrated to agent-level ε = 4 at δ = 1e-3."""
    return RunConfig(
        federation=FederationConfig(dataset="digits", agents=AGENTS),
        privacy=PrivacyConfig(epsilon=4.0, delta=DELTA, noise_seed=3, ledger=str(ledger) if ledger else None),
        teacher=TrainingConfig(model="logistic", epochs=5),
        student=TrainingConfig(model="logistic", epochs=5),
        queries=QUERIES,
        self_training_rounds=0,
    )


def server_settings(directory: Path, clip_sigmas: float) -> ServerSettings:
    return ServerSettings.from_run_config(
        {
            "config": str(directory / "run.json"),
            "server-data": str(directory / "server.npz"),
            "out": str(directory / "out"),
            "clip-sigmas": clip_sigmas,
            "secure-noise": False,  # the seeded Gaussian path, whose slack these tests check
        }
    )


def in_process_flower(config: RunConfig):
    """A FlowerTransport stand-in over the in-process agents of ``config``'s federation."""
    federation = make_federation(config)

    class InProcessFlower(LocalTransport):
        stated_privacy = flower_module.FlowerTransport.stated_privacy  # the deployment's own account

        def __init__(self, grid, context, *, clip_sigmas, **kwargs):
            super().__init__(federation, seed=config.seed, noise_seed=config.privacy.noise_seed)
            self._num_classes = federation.num_classes
            self.clip_sigmas = clip_sigmas
            self.rounds: list[RoundRecord] = []
            self.secagg = None
            self.dropped_agents: list[int] = []

        def vote_sum(self, query_indices, noise_std, min_responders):
            result = super().vote_sum(query_indices, noise_std, min_responders)
            self.secagg = secagg_settings(noise_std, self.num_agents, min_responders, clip_sigmas=self.clip_sigmas)
            released = result is not None
            record = RoundRecord(len(self.rounds) + 1, "pate", len(query_indices), self.num_agents,
                                 self.num_agents if released else 0, released)
            self.rounds.append(record)
            return result

    return InProcessFlower


class _Untouchable:
    """A grid or context the run must not reach."""

    def __getattr__(self, name):
        raise AssertionError(f"the run reached Flower ({name}) before refusing its plan")


def gaussian_epsilons(sigma: float) -> dict[str, float]:
    """ε at both levels of Q PATE-FL queries with noise σ: the Gaussian mechanism alone."""
    from fedvote.privacy.events import pate_fl_events

    events = pate_fl_events(sigma, QUERIES)
    return {level: epsilon_for(events.at(level), DELTA, "pld") for level in ("agent", "instance")}


def test_flower_headline_includes_clipping_slack(tmp_path, monkeypatch):
    config = deployment_config()
    write_deployment_files(config, tmp_path)
    monkeypatch.setattr(flower_module, "FlowerTransport", in_process_flower(config))
    clip_sigmas = 7.0  # clipping adds about 0.6 % of δ here: allowed, and visible
    result = run_on_flower(server_settings(tmp_path, clip_sigmas), _Untouchable(), _Untouchable())

    gaussian = gaussian_epsilons(result.sigma)
    worst = max(gaussian.values())
    # Clipping: p ≤ N·K·2Φ̄(k), worth (1 + e^(ε + ε_q))·p of δ; rounding: ε_q = 0 here (s/Δ ~ 1e7).
    p = AGENTS * COORDINATES * 2 * norm.sf(clip_sigmas)
    expected_delta = DELTA + (1 + math.exp(worst)) * p
    assert 0 < expected_delta - DELTA < 0.01 * DELTA
    privacy = result.privacy
    assert privacy.delta == pytest.approx(expected_delta, rel=1e-9)
    assert privacy.delta > DELTA  # the headline δ is the deployed mechanism's, not the Gaussian's
    assert privacy.agent.epsilon == pytest.approx(gaussian["agent"], rel=1e-6)
    assert privacy.instance.epsilon == pytest.approx(gaussian["instance"], rel=1e-6)

    secagg = result.details["flower"]["secagg"]
    assert secagg["delta_slack"] == pytest.approx(expected_delta - DELTA, rel=1e-9)
    assert secagg["epsilon_slack"] == 0.0 and secagg["coordinates"] == COORDINATES
    beside = secagg["gaussian_mechanism"]  # the Gaussian-only figure, kept and labelled
    assert beside["delta"] == DELTA
    assert beside["agent_epsilon"] == pytest.approx(gaussian["agent"], rel=1e-6)
    assert beside["instance_epsilon"] == pytest.approx(gaussian["instance"], rel=1e-6)
    assert "not the deployment's guarantee" in beside["label"]
    on_disk = result.to_dict()
    assert on_disk["privacy"]["delta"] == pytest.approx(expected_delta, rel=1e-9)
    json.dumps(on_disk)  # standard JSON


def test_clip_settings_whose_slack_exceeds_one_percent_of_delta_are_refused(tmp_path, monkeypatch):
    ledger = tmp_path / "ledger.sqlite"
    config = deployment_config(ledger)
    write_deployment_files(config, tmp_path)

    def never(*args, **kwargs):
        raise AssertionError("the transport was built before the clipping range was checked")

    monkeypatch.setattr(flower_module, "FlowerTransport", never)
    # k = 6: clipping could add (1 + e^6.2)·2·5·1000·Φ̄(6) ≈ 5e-3 to δ = 1e-3.
    with pytest.raises(ConfigError) as error:
        run_on_flower(server_settings(tmp_path, 6.0), _Untouchable(), _Untouchable())
    assert error.value.argument == "clip_sigmas"
    assert "\n" not in str(error.value) and "1%" in error.value.detail
    assert not ledger.exists()  # nothing charged: the ledger was never opened


def test_deploy_server_refuses_the_clipping_range_before_flower_starts(tmp_path, monkeypatch, capsys):
    import fedvote.cli.deploy as deploy_cli

    write_deployment_files(deployment_config(), tmp_path)
    monkeypatch.setattr(deploy_cli, "_flower_executable", lambda name: pytest.fail(f"started {name}"))
    monkeypatch.setattr(deploy_cli, "background", lambda *a, **k: pytest.fail("started a SuperLink"))
    with pytest.raises(SystemExit) as exit_info:
        main(["deploy", "server", "--config", str(tmp_path / "run.json"), "--data", str(tmp_path / "server.npz"),
              "--out", str(tmp_path / "out"), "--insecure", "--clip-sigmas", "6", "--no-secure-noise"])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedvote: error: --clip-sigmas: "), lines


def test_deployed_guarantee_adds_rounding_to_epsilon_and_both_slacks_to_delta():
    # A noise comparable to the rounding step (hypothetical) makes ε_q visible.
    real = secagg_settings(1.0, 2, 2, clip_sigmas=5.0)
    settings = type(real)(**{**real.__dict__, "noise_std": 0.35 * real.step})
    eps_q = settings.epsilon_slack(3)
    assert eps_q > 0
    p = settings.clip_probability(3)
    epsilon, delta = 1.5, 1e-5
    deployed = settings.deployed(3, epsilon, delta)
    # P[M'(D) ∈ S] ≤ e^(ε_q)·(e^ε P[M(D') ∈ S] + δ) + p-terms: δ is scaled by e^(ε_q) too.
    assert deployed[0] == pytest.approx(epsilon + eps_q)
    assert deployed[1] == pytest.approx(math.exp(eps_q) * delta + (1 + math.exp(epsilon + eps_q)) * p)
    assert settings.delta_slack(3, epsilon, delta) == pytest.approx(deployed[1] - delta)


def test_secagg_privacy_raises_every_level_and_keeps_the_gaussian_figures():
    from fedvote.flower.secagg import secagg_privacy

    def report(agent: float | None, instance: float | None) -> PrivacyReport:
        return PrivacyReport(
            private=agent is not None or instance is not None, delta=DELTA, accountant="pld",
            agent=LevelPrivacy(agent, 1.0, "zero-out"), instance=LevelPrivacy(instance, math.sqrt(2), "replace-one"),
            noise_source="os-entropy",
        )

    settings = secagg_settings(2.0, AGENTS, AGENTS, clip_sigmas=7.0)
    headline, entry = secagg_privacy(report(4.0, 6.2), settings, COORDINATES)
    slack = settings.delta_slack(COORDINATES, 6.2, DELTA)  # at the larger ε: both levels hold at one δ
    assert slack == pytest.approx((1 + math.exp(6.2)) * AGENTS * COORDINATES * 2 * norm.sf(7.0), rel=1e-9)
    assert headline.delta == DELTA + slack and entry["delta_slack"] == slack
    assert (headline.agent.epsilon, headline.instance.epsilon) == (4.0, 6.2)  # ε_q = 0 here
    assert entry["gaussian_mechanism"]["delta"] == DELTA
    assert (entry["gaussian_mechanism"]["agent_epsilon"], entry["gaussian_mechanism"]["instance_epsilon"]) == (4.0, 6.2)
    # One level unbounded: the other still gets the slack; nothing private: nothing changes.
    partial, _ = secagg_privacy(report(None, 6.2), settings, COORDINATES)
    assert partial.agent.epsilon is None and partial.delta == DELTA + slack
    untouched, entry = secagg_privacy(report(None, None), secagg_settings(0.0, AGENTS, AGENTS), COORDINATES)
    assert untouched.delta == DELTA and entry["delta_slack"] == 0.0


@pytest.mark.parametrize(
    ("agents", "coordinates", "epsilon", "clip_sigmas", "refused"),
    [
        (5, 1000, 6.2, 6.0, True),  # the case: δ slack ≈ 5e-3 > 1e-5
        (5, 1000, 6.2, 7.0, False),  # ≈ 6.5e-6: within 1 % of δ = 1e-3
        (10**4, 10**8, 10.0, 20.0, False),  # the default k holds for very large runs
        (50, 1000, 800.0, 20.0, True),  # e^ε overflows: nothing bounds the slack
    ],
)
def test_the_clip_check_refuses_exactly_the_slack_above_one_percent_of_delta(
    agents, coordinates, epsilon, clip_sigmas, refused
):
    settings = secagg_settings(1.0, agents, agents, clip_sigmas=clip_sigmas)
    if refused:
        with pytest.raises(ConfigError) as error:
            settings.check_clip_slack(coordinates, epsilon, DELTA)
        assert error.value.argument == "clip_sigmas"
        if math.isfinite(settings.min_clip_sigmas(coordinates, epsilon, DELTA)):
            needed = float(error.value.detail.rsplit(" ", 1)[-1])
            enough = secagg_settings(1.0, agents, agents, clip_sigmas=needed)
            enough.check_clip_slack(coordinates, epsilon, DELTA)  # the advice is enough
            assert enough.clip_slack(coordinates, epsilon) <= 0.01 * DELTA
    else:
        settings.check_clip_slack(coordinates, epsilon, DELTA)
        assert settings.clip_slack(coordinates, epsilon) <= 0.01 * DELTA
    assert secagg_settings(0.0, agents, agents, clip_sigmas=1.0).clip_slack(coordinates, epsilon) == 0.0


def test_the_deploy_commands_default_clip_matches_the_transports():
    from fedvote.cli.deploy import DEFAULT_CLIP_SIGMAS as cli_default
    from fedvote.flower.secagg import DEFAULT_CLIP_SIGMAS

    assert cli_default == DEFAULT_CLIP_SIGMAS
    assert np.isclose(secagg_settings(1.0, 2, 2).clip_sigmas, cli_default)


def test_label_release_is_refused_before_flower_trains_anything(tmp_path, monkeypatch):
    """Flower decodes SecAgg+ sums at the server: a --release labels run would release sums
    (or fail after training and a charge), so it is refused before the transport or ledger exist."""
    ledger = tmp_path / "ledger.sqlite"
    config = dataclasses.replace(deployment_config(ledger), options={"release": "labels"})
    write_deployment_files(config, tmp_path)
    monkeypatch.setattr(flower_module, "FlowerTransport", lambda *a, **k: pytest.fail("built the transport"))
    with pytest.raises(ConfigError) as error:
        run_on_flower(server_settings(tmp_path, 20.0), _Untouchable(), _Untouchable())
    assert error.value.argument == "config" and error.value.detail.startswith("options.release: ")
    assert not ledger.exists()


def test_the_flower_server_charges_the_federation_by_its_records_content(tmp_path, monkeypatch):
    """The server never holds the records, yet its ledger key is their content key (computed when
    `fedvote deploy` dealt them): a later in-process run on the same records meets the Flower
    run's charge and the stored budget."""
    from fedvote.flower.files import load_server_file
    from fedvote.privacy.ledger import PersistentLedger, PrivacyBudgetExceeded
    from fedvote.runner import federation_content_key, run

    ledger = tmp_path / "ledger.db"
    config = dataclasses.replace(
        deployment_config(ledger),
        privacy=dataclasses.replace(deployment_config(ledger).privacy, budget_epsilon=6.0),
    )
    write_deployment_files(config, tmp_path)
    key = load_server_file(tmp_path / "server.npz").ledger_key
    assert key == federation_content_key(make_federation(config))
    monkeypatch.setattr(flower_module, "FlowerTransport", in_process_flower(config))
    run_on_flower(server_settings(tmp_path, 7.0), _Untouchable(), _Untouchable())
    with PersistentLedger(ledger, federation=key, budget_epsilon=None) as stored:
        charges = [row for row in stored.history() if row["kind"] == "charge"]
        assert len(charges) == 1 and stored.spent("agent") == pytest.approx(4.0, rel=1e-3)
    with pytest.raises(PrivacyBudgetExceeded):  # 4 spent on Flower + 4 more > 6
        run(config)
