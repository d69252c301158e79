"""PriFedSync (federated-f-dp-prifedsync.txt, Algorithms 1 and 2, Theorem 2)."""

import math
import warnings

import numpy as np
import pytest
import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer

from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.data.client_test import client_test_indices
from fedvote.data.partition import PartitionSpec
from fedvote.errors import ConfigError
from fedvote.methods import METHODS
from fedvote.methods.gradient import GradientOptions
from fedvote.methods.prifedsync import PriFedSync, PriFedSyncOptions, helper_models
from fedvote.models.batched_dp_sgd import (
    NoisyTraining,
    clipped_gradient_sum,
    noisy_local_training,
    perceptron_layer_sizes,
)
from fedvote.models.local_training import flat_parameters
from fedvote.models.zoo import build_model
from fedvote.privacy.fdp import prifedsync_mu
from fedvote.runner import run

SIZES = (64, 16, 10)


def _models(m, seed=0):
    models = [build_model("mlp", (1, 8, 8), 10, hidden=16, generator=torch.Generator().manual_seed(seed + i)) for i in range(m)]
    return models, torch.as_tensor(np.stack([flat_parameters(model) for model in models]))


def _opacus_clipped_sum(model, x, y, clip):
    """Σ clip(vₗ, C) by Opacus: GradSampleModule + DPOptimizer with no noise, lr 1, one step."""
    wrapped = GradSampleModule(model, loss_reduction="sum")
    optimizer = DPOptimizer(
        torch.optim.SGD(wrapped.parameters(), lr=1.0),
        noise_multiplier=0.0,
        max_grad_norm=clip,
        expected_batch_size=None,
        loss_reduction="sum",
    )
    before = torch.cat([p.detach().reshape(-1).clone() for p in wrapped.parameters()])
    optimizer.zero_grad()
    with warnings.catch_warnings():  # Opacus's hook note about inputs that need no gradient
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        torch.nn.functional.cross_entropy(wrapped(x), y, reduction="sum").backward()
    optimizer.step()
    after = torch.cat([p.detach().reshape(-1) for p in wrapped.parameters()])
    return before - after


@pytest.mark.parametrize("clip", [0.05, 1.0, 100.0])
def test_batched_clipped_sum_equals_opacus(clip):
    """Three clients with their own models and records: each clipped sum is Opacus's."""
    models, params = _models(3)
    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.random((3, 12, 64)), dtype=torch.float32)
    y = torch.as_tensor(rng.integers(0, 10, (3, 12)))
    summed, norms = clipped_gradient_sum(params, SIZES, x, y, clip)
    for j, model in enumerate(models):
        reference = _opacus_clipped_sum(model, x[j].reshape(12, 1, 8, 8), y[j], clip)
        np.testing.assert_allclose(summed[j].numpy(), reference.numpy(), rtol=1e-4, atol=1e-6)
    # the per-sample norms are those of the materialised per-sample gradients
    model = _models(1)[0][0]
    loss = torch.nn.functional.cross_entropy(model(x[0, :1].reshape(1, 1, 8, 8)), y[0, :1], reduction="sum")
    grads = torch.autograd.grad(loss, list(model.parameters()))
    assert norms[0, 0].item() == pytest.approx(torch.sqrt(sum(g.pow(2).sum() for g in grads)).item(), rel=1e-5)


def test_noisy_sgd_step_is_algorithm_2():
    """One SGD step: w − γ/B·(Σ clip(vₗ) + N(0, 4C²σ²)); the noise is the generator's next normal draw."""
    _, params = _models(2)
    rng = np.random.default_rng(1)
    features = torch.as_tensor(rng.random((40, 64)), dtype=torch.float32)
    labels = torch.as_tensor(rng.integers(0, 10, 40))
    offsets, counts = torch.tensor([0, 20]), torch.tensor([20, 20])
    training = NoisyTraining(SIZES, steps=1, batch_size=20, clip=0.5, sigma=0.7, learning_rate=0.3, optimizer="sgd")
    out = noisy_local_training(params, features, labels, offsets, counts, training, torch.Generator().manual_seed(5))
    # B = n: every record is in the batch; replay the generator to get the same noise
    generator = torch.Generator().manual_seed(5)
    torch.rand(2, 20, generator=generator)
    noise = torch.randn(2, params.shape[1], generator=generator)
    x = features.reshape(2, 20, 64)
    summed, _ = clipped_gradient_sum(params, SIZES, x, labels.reshape(2, 20), 0.5)
    expected = params - 0.3 / 20 * (summed + 2 * 0.5 * 0.7 * noise)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_noise_std_is_two_c_sigma():
    """Zero gradients (zero weights, uniform logits still give a gradient): compare against σ = 0."""
    _, params = _models(1)
    features = torch.zeros(50, 64)
    labels = torch.zeros(50, dtype=torch.int64)
    kwargs = dict(steps=1, batch_size=10, clip=2.0, learning_rate=1.0, optimizer="sgd")
    args = (params, features, labels, torch.tensor([0]), torch.tensor([50]))
    noisy = noisy_local_training(*args, NoisyTraining(SIZES, sigma=1.5, **kwargs), torch.Generator().manual_seed(0))
    clean = noisy_local_training(*args, NoisyTraining(SIZES, sigma=0.0, **kwargs), torch.Generator().manual_seed(0))
    noise = (clean - noisy).numpy().ravel() * 10  # = N(0, (2Cσ)²) per coordinate
    d = noise.shape[0]
    # std estimate from d draws: relative error ~ 1/√(2d); allow 5 of those
    assert noise.std() == pytest.approx(2 * 2.0 * 1.5, rel=5 / math.sqrt(2 * d))


def test_batches_are_drawn_without_replacement_within_a_client():
    _, params = _models(2)
    features = torch.arange(30, dtype=torch.float32).repeat_interleave(64).reshape(30, 64)
    labels = torch.zeros(30, dtype=torch.int64)
    offsets, counts = torch.tensor([0, 10]), torch.tensor([10, 20])
    generator = torch.Generator().manual_seed(3)
    width = 20
    keys = torch.rand(2, width, generator=generator)
    keys.masked_fill_(torch.arange(width) >= counts.unsqueeze(1), 2.0)
    picked = keys.topk(10, dim=1, largest=False).indices + offsets.unsqueeze(1)
    assert sorted(picked[0].tolist()) == list(range(10))  # B = n₀: all of client 0, none of client 1
    assert len(set(picked[1].tolist())) == 10 and all(10 <= i < 30 for i in picked[1].tolist())
    with pytest.raises(ConfigError, match="batch_size"):
        noisy_local_training(
            params, features, labels, offsets, counts,
            NoisyTraining(SIZES, steps=1, batch_size=11, clip=1.0, sigma=1.0, learning_rate=0.1),
            torch.Generator(),
        )


def test_perceptron_layer_sizes_and_refusals():
    assert perceptron_layer_sizes(build_model("mlp", (1, 28, 28), 10)) == (784, 128, 10)
    assert perceptron_layer_sizes(build_model("logistic", (1, 8, 8), 10)) == (64, 10)
    with pytest.raises(ConfigError, match="perceptron"):
        perceptron_layer_sizes(build_model("cnn", (1, 8, 8), 10))


def test_helper_interpolation_eq_2_1():
    local = np.array([[1.0, 2.0], [3.0, 5.0]], dtype=np.float32)
    global_model = np.array([10.0, 20.0], dtype=np.float32)
    np.testing.assert_allclose(
        helper_models(local, global_model, "interpolate", 0.1), 0.9 * local + 0.1 * global_model, rtol=1e-6
    )
    np.testing.assert_array_equal(helper_models(local, global_model, "identity", 0.1), np.tile(global_model, (2, 1)))
    np.testing.assert_array_equal(helper_models(local, global_model, "interpolate", 1.0), np.tile(global_model, (2, 1)))


def test_client_test_sets_hold_only_the_clients_labels():
    rng = np.random.default_rng(0)
    test_labels = rng.integers(0, 10, 2000)
    train = [np.array([1, 1, 1, 3]), np.array([7, 8, 9] * 5)]
    index = client_test_indices(train, test_labels, 200, rng)
    assert index.shape == (2, 200)
    assert set(test_labels[index[0]]) <= {1, 3} and set(test_labels[index[1]]) <= {7, 8, 9}
    assert np.sum(test_labels[index[0]] == 1) > 100  # proportions follow training (3/4 of label 1)
    assert len(set(index[1].tolist())) == 200  # without replacement when the pool allows


def test_registered_options_and_refusals():
    assert METHODS["prifedsync"] is PriFedSync
    config = RunConfig(
        method="prifedsync",
        privacy=PrivacyConfig(sigma=0.75),
        gradient=GradientOptions(rounds=7, sampling_rate=1.0, local_steps=5, batch_size=8),
        options={"helper": "identity", "alpha": 0.3, "target_accuracy": 0.9},
    )
    method = PriFedSync.from_config(config, sigma=0.75, queries=1, min_responders=1)
    assert (method.rounds, method.sampling_rate, method.local_steps, method.batch_size) == (7, 1.0, 5, 8)
    assert method.options == PriFedSyncOptions(helper="identity", alpha=0.3, target_accuracy=0.9)
    with pytest.raises(ConfigError, match="helper"):
        RunConfig(method="prifedsync", options={"helper": "mean"})
    with pytest.raises(ConfigError, match="alpha"):
        PriFedSyncOptions(alpha=1.5)
    with pytest.raises(ConfigError, match="clip_norm"):
        PriFedSync.from_config(
            RunConfig(method="prifedsync", gradient=GradientOptions(clip_norm=1.0)), sigma=1.0, queries=1, min_responders=1
        )
    with pytest.raises(ConfigError, match="batch_size"):
        PriFedSync(batch_size=50).with_agent_records(np.array([40, 60]))


def test_record_privacy_is_theorem_2_and_strong_is_sqrt_m_minus_1_weak():
    method = PriFedSync(sigma=1.0, batch_size=16, local_steps=38)
    record = method.record_privacy(194, np.full(100, 600))
    assert record["weak"]["mu"] == pytest.approx(prifedsync_mu(1.0, 16, 600, 38, 194))
    assert round(record["weak"]["mu"], 2) == 3.92  # the paper's Table 1, p = 0.5, σ = 1
    assert record["strong"]["mu"] == pytest.approx(math.sqrt(99) * record["weak"]["mu"])
    assert record["strong"]["epsilon"] > record["weak"]["epsilon"] > record["weak"]["epsilon_pld"] > 0
    # the smallest client sets μ_max
    uneven = method.record_privacy(10, np.array([600, 300, 900]))
    assert uneven["weak"]["mu"] == pytest.approx(prifedsync_mu(1.0, 16, 300, 38, 10))
    assert PriFedSync(sigma=0.0).record_privacy(3, np.full(4, 50))["weak"]["mu"] is None


def test_ledger_events_compose_to_theorem_2():
    """R rounds of the per-round Gaussian event are exactly Theorem 2's μ for K·R steps."""
    from fedvote.privacy.accountant import gaussian_mu

    method = PriFedSync(sigma=0.9, rounds=176).with_agent_records(np.full(100, 600))
    assert gaussian_mu(method.planned_events().instance) == pytest.approx(prifedsync_mu(0.9, 16, 600, 38, 176))


def _digits_config(**options):
    return RunConfig(
        method="prifedsync",
        federation=FederationConfig(dataset="digits", agents=6, partition=PartitionSpec("shards", shards_per_agent=3)),
        privacy=PrivacyConfig(sigma=0.8, noise_seed=0),
        gradient=GradientOptions(rounds=12, sampling_rate=1.0, local_steps=8, batch_size=8, learning_rate=0.02),
        options={"client_test_size": 40, **options},
    )


def test_end_to_end_on_digits_and_target_stop():
    result = run(_digits_config()).to_dict()
    record = result["privacy"]["record"]
    assert record["strong"]["mu"] == pytest.approx(math.sqrt(6 - 1) * record["weak"]["mu"])
    n_min = min(result["agent_records"])
    assert record["weak"]["mu"] == pytest.approx(prifedsync_mu(0.8, 8, n_min, 8, 12))
    assert result["privacy"]["instance"]["epsilon"] == pytest.approx(record["weak"]["epsilon"], rel=0.02)
    assert result["privacy"]["agent"]["epsilon"] is None
    history = result["accuracy_history"]
    assert len(history) == 12 and result["rounds"] == 12
    assert history[-1]["personalised"] > 0.5  # learns: 6 clients of ~3 digits each
    # stop at the first round where the mean personalised accuracy reaches a target that
    # the full run crosses; the privacy is that of the rounds run
    target = history[5]["personalised"]
    first = next(h["round"] for h in history if h["personalised"] >= target)
    stopped = run(_digits_config(target_accuracy=target)).to_dict()
    assert stopped["round_reached"] == first == stopped["rounds"]
    assert stopped["privacy"]["record"]["weak"]["mu"] == pytest.approx(prifedsync_mu(0.8, 8, n_min, 8, first))


def test_epsilon_calibrates_sigma_to_the_weak_record_level():
    from dataclasses import replace

    config = replace(_digits_config(), privacy=PrivacyConfig(epsilon=8.0, delta=1e-3, noise_seed=0))
    config = replace(config, gradient=replace(config.gradient, rounds=2))
    result = run(config).to_dict()
    assert result["privacy"]["calibrated_level"] == "instance"
    assert result["privacy"]["instance"]["epsilon"] <= 8.0
    assert result["privacy"]["record"]["weak"]["epsilon"] == pytest.approx(8.0, rel=0.02)
