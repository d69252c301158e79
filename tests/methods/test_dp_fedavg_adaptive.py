"""DP-FedAvg ``--clipping adaptive`` (Andrew et al. 2021): ε against an independent computation,
the noise each agent really adds, the clip's movement, the bit, and the one-line refusals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from dp_accounting import dp_event, pld

from fedvote.agents.local_updates import ClipCountTraining, release_update
from fedvote.errors import ConfigError
from fedvote.methods.dp_fedavg import DpFedAvg
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.transport.local import LocalTransport


class SharesSeen(LocalTransport):
    """Records each round's training as the agents receive it (clip, share std, the bit's scale)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trainings: list[ClipCountTraining] = []
        self.widths: list[int] = []

    def secure_update_sum(self, global_params, agent_ids, training):
        total = super().secure_update_sum(global_params, agent_ids, training)
        self.trainings.append(training)
        self.widths.append(int(total.shape[0]))
        return total


def test_epsilon_equals_an_independent_pld_computation_from_the_noise_really_added(small_federation):
    """Each round's shares, read off what the agents were asked to add: σ_Δ·C_t/√N on the update
    coordinates and, in the count's own units, σ_b/√N on the bit. The pair is one Gaussian of
    multiplier z = (σ_Δ⁻² + (2σ_b)⁻²)^(−1/2) (Andrew et al. §3.1); dp-accounting's PLD of T
    Poisson-sampled Gaussians of that z, built here by hand, is the run's agent ε."""
    q, z, rounds, delta = 0.3, 0.9, 8, 1e-3
    method = DpFedAvg(sigma=z, sampling_rate=q, rounds=rounds, local_steps=2, model="logistic",
                      clipping="adaptive", noise_seed=0)
    transport = SharesSeen(small_federation, noise_seed=0)
    ledger = PrivacyLedger()
    outcome = method.run(small_federation.server_data(), transport, ledger)
    n = small_federation.num_agents
    d = outcome.details["model_floats"]
    assert transport.widths == [d + 1] * rounds  # every release carried its bit
    clips = outcome.details["clip_norms"]
    assert len(clips) == rounds + 1 and clips[0] == 0.08
    for t, training in enumerate(transport.trainings):
        assert training.clip_norm == pytest.approx(clips[t], rel=1e-12)
        total_update_std = training.noise_std * math.sqrt(n)  # σ_Δ·C_t
        update_multiplier = total_update_std / training.clip_norm
        count_std = total_update_std / training.count_scale  # the bit's noise in count units: σ_b
        combined = (update_multiplier**-2 + (2.0 * count_std) ** -2) ** -0.5
        assert combined == pytest.approx(z, rel=1e-9)
    independent = pld.PLDAccountant().compose(
        dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), rounds
    ).get_epsilon(delta)
    assert epsilon_for(ledger.event("agent"), delta, "pld") == pytest.approx(independent, rel=0.01)
    assert outcome.details["update_noise_multiplier"] > z  # the count took some of z⁻²


def test_cli_adaptive_epsilon_is_at_most_the_target_and_equals_an_independent_computation(invoke):
    code, out, err = invoke(["run", "--method", "dp-fedavg", "--clipping", "adaptive", "--epsilon", "4",
                             "--rounds", "10", "--agents", "10", "--noise-seed", "0", "--json"])
    assert code == 0, err
    result = json.loads(out)
    privacy = result["privacy"]
    z = (result["update_noise_multiplier"] ** -2 + (2 * result["clip_count_stddev"]) ** -2) ** -0.5
    assert z == pytest.approx(result["sigma"], rel=1e-9)
    independent = pld.PLDAccountant().compose(
        dp_event.PoissonSampledDpEvent(result["sampling_rate"], dp_event.GaussianDpEvent(z)), 10
    ).get_epsilon(privacy["delta"])
    assert privacy["agent"]["epsilon"] == pytest.approx(independent, rel=0.01)
    assert privacy["agent"]["epsilon"] <= 4.0
    assert result["clipping"] == "adaptive" and len(result["clip_norms"]) == 11


def test_clip_settles_at_the_quantile_without_noise(small_federation):
    """Non-private (σ = 0), every agent each round: the exact fraction under C_t oscillates around γ."""
    method = DpFedAvg(sigma=0.0, sampling_rate=1.0, rounds=30, local_steps=2, model="logistic",
                      clipping="adaptive", clip_quantile=0.5, clip_learning_rate=1.0, noise_seed=0)
    outcome = method.run(small_federation.server_data(), LocalTransport(small_federation, noise_seed=0),
                         PrivacyLedger())
    fractions = outcome.details["clip_fractions"]
    assert fractions[0] == pytest.approx(0.0, abs=1e-6)  # every logistic update starts far above 0.08
    assert 0.2 <= float(np.mean(fractions[-10:])) <= 0.8
    assert outcome.details["clip_norms"][-1] > 0.08  # it grew toward the median norm


def test_each_clip_move_uses_the_damped_step(small_federation):
    """With few agents a round the count is noisier than the paper's m/20: every move of the clip is
    exp(−η(b̃ − γ)) with η = η_C·(qN/20)/σ_b < η_C, read back from the run's public clips and fractions."""
    q, z, rounds = 0.3, 0.9, 6
    method = DpFedAvg(sigma=z, sampling_rate=q, rounds=rounds, local_steps=2, model="logistic",
                      clipping="adaptive", noise_seed=0)
    outcome = method.run(small_federation.server_data(), LocalTransport(small_federation, noise_seed=0),
                         PrivacyLedger())
    details = outcome.details
    expected = q * small_federation.num_agents
    count_std = details["clip_count_stddev"]
    assert count_std == pytest.approx(max(expected / 20.0, z / (2.0 * math.sqrt(0.01))), rel=1e-12)
    step = details["clip_step"]
    assert step == pytest.approx(0.2 * (expected / 20.0) / count_std, rel=1e-12) and step < 0.2
    clips, fractions = details["clip_norms"], details["clip_fractions"]
    for t, fraction in enumerate(fractions):
        assert math.log(clips[t + 1] / clips[t]) == pytest.approx(-step * (fraction - 0.5), rel=1e-9, abs=1e-12)


def test_the_bit_is_below_or_at_the_clip_centred_and_scaled(small_federation):
    agent = LocalTransport(small_federation, noise_seed=0)._agents[0]
    training = ClipCountTraining(model="logistic", steps=1, learning_rate=0.1, clip_norm=1.0, count_scale=3.0)
    above = release_update(agent, np.array([3.0, 4.0], dtype=np.float32), training)  # norm 5 > 1
    below = release_update(agent, np.array([0.3, 0.4], dtype=np.float32), training)  # norm 0.5 ≤ 1
    assert above.shape == (3,) and above[2] == pytest.approx(-1.5)
    assert np.linalg.norm(above[:2]) == pytest.approx(1.0, rel=1e-5)
    assert below[2] == pytest.approx(1.5) and np.allclose(below[:2], [0.3, 0.4])


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--clip-quantile", "1.5"], "clip_quantile"),
        (["--clipping", "adaptive", "--noise", "distributed-unmasked"], "clipping"),
        (["--clipping", "adaptive", "--clip-count-stddev", "0.1", "--sigma", "1"], "clip_count_stddev"),
        (["--clip-learning-rate", "-1"], "clip_learning_rate"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, flag, invoke, tmp_path):
    code, _, err = invoke(["run", "--method", "dp-fedavg", "--agents", "10", "--rounds", "2",
                           "--ledger", str(tmp_path / "ledger.db"), *args])
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("fedvote run [")]
    assert len(lines) == 1, err
    assert flag.replace("_", "-") in lines[0] or flag in lines[0], err
    assert not (tmp_path / "ledger.db").exists()  # nothing charged


def test_adaptive_refused_for_the_multilabel_variant():
    from fedvote.methods.multilabel_dp_fedavg import MultiLabelDpFedAvg

    with pytest.raises(ConfigError) as error:
        MultiLabelDpFedAvg(sigma=1.0, clipping="adaptive")
    assert error.value.argument == "clipping"
