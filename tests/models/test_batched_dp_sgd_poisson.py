"""PriFedSync's batched DP-SGD with Poisson batches (``fedvote.models.batched_dp_sgd``).

The batched training must be exactly the DP-SGD that the accountant prices:
``PoissonSampled(B/n_j, Gaussian(σ))`` per step — every record drawn independently at rate
B/n_j, per-sample clip C, N(0, σ²C²) on the sum, divided by the expected batch size B.
Checked against Opacus (one client at a time, the same drawn batches), against a replay
of the privacy generator, and statistically.
"""

import math
import warnings

import numpy as np
import pytest
import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer

from fedvote.errors import ConfigError
from fedvote.models.batched_dp_sgd import (
    NoisyTraining,
    clipped_gradient_sum,
    noisy_local_training,
    poisson_batches,
    poisson_rates,
)
from fedvote.models.local_training import flat_parameters
from fedvote.models.zoo import build_model

SIZES = (64, 16, 10)


def _models(m, seed=0):
    models = [
        build_model("mlp", (1, 8, 8), 10, hidden=16, generator=torch.Generator().manual_seed(seed + i))
        for i in range(m)
    ]
    return models, torch.as_tensor(np.stack([flat_parameters(model) for model in models]))


def _records(counts, seed=0):
    rng = np.random.default_rng(seed)
    total = int(sum(counts))
    features = torch.as_tensor(rng.random((total, 64)), dtype=torch.float32)
    labels = torch.as_tensor(rng.integers(0, 10, total))
    offsets = torch.as_tensor(np.concatenate([[0], np.cumsum(counts)[:-1]]))
    return features, labels, offsets, torch.as_tensor(counts)


def _drawn(batches, client):
    """Client ``client``'s drawn local indices in one step."""
    return batches.index[client][batches.weight[client] > 0]


def _opacus_poisson_dp_sgd(model, x, y, steps_drawn, clip, lr, batch_size):
    """Opacus DP-SGD (noise 0) on the given Poisson batches: clip, sum, divide by the expected B."""
    wrapped = GradSampleModule(model, loss_reduction="mean")
    optimizer = DPOptimizer(
        torch.optim.SGD(wrapped.parameters(), lr=lr),
        noise_multiplier=0.0,
        max_grad_norm=clip,
        expected_batch_size=batch_size,
        loss_reduction="mean",
    )
    for drawn in steps_drawn:
        optimizer.zero_grad()
        with warnings.catch_warnings():  # Opacus's hook note about inputs that need no gradient
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            loss = torch.nn.functional.cross_entropy(wrapped(x[drawn].reshape(-1, 1, 8, 8)), y[drawn])
            loss.backward()
        optimizer.step()
    return torch.cat([p.detach().reshape(-1) for p in wrapped.parameters()])


@pytest.mark.parametrize("clip", [0.05, 1.0])
def test_poisson_dp_sgd_matches_opacus_on_the_same_batches(clip):
    """Three clients of different sizes, four SGD steps: each model is Opacus's on its own batches."""
    counts = [30, 45, 60]
    batch_size, steps, lr = 9, 4, 0.5
    features, labels, offsets, count_tensor = _records(counts)
    models, params = _models(3)
    training = NoisyTraining(SIZES, steps=steps, batch_size=batch_size, clip=clip, sigma=0.0,
                             learning_rate=lr, optimizer="sgd")
    out = noisy_local_training(params, features, labels, offsets, count_tensor, training,
                               torch.Generator().manual_seed(11))
    # σ = 0 draws no noise: the generator's draws are the K steps' batch keys alone.
    replay = torch.Generator().manual_seed(11)
    drawn = [poisson_batches(count_tensor, batch_size, replay) for _ in range(steps)]
    for j, model in enumerate(models):
        rows = slice(int(offsets[j]), int(offsets[j]) + counts[j])
        steps_drawn = [_drawn(batches, j) for batches in drawn]
        assert all(len(d) > 0 for d in steps_drawn)  # Opacus would skip an empty step; ours adds 0
        reference = _opacus_poisson_dp_sgd(model, features[rows], labels[rows], steps_drawn, clip, lr, batch_size)
        np.testing.assert_allclose(out[j].numpy(), reference.numpy(), rtol=1e-4, atol=1e-6)


def test_noisy_step_replays_the_generator():
    """One step: w − γ/B·(Σ_{ℓ∈I} clip(vₗ) + σC·ξ), I and ξ the generator's next draws."""
    counts = [20, 25]
    features, labels, offsets, count_tensor = _records(counts, seed=1)
    _, params = _models(2)
    training = NoisyTraining(SIZES, steps=1, batch_size=6, clip=0.5, sigma=0.7, learning_rate=0.3, optimizer="sgd")
    out = noisy_local_training(params, features, labels, offsets, count_tensor, training,
                               torch.Generator().manual_seed(5))
    replay = torch.Generator().manual_seed(5)
    batches = poisson_batches(count_tensor, 6, replay)
    noise = torch.randn(2, params.shape[1], generator=replay)
    picked = batches.index + offsets.unsqueeze(1)
    summed, _ = clipped_gradient_sum(params, SIZES, features[picked], labels[picked], 0.5, batches.weight)
    expected = params - 0.3 / 6 * (summed + 0.7 * 0.5 * noise)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_noise_std_is_sigma_times_c():
    """Records with zero features: the clipped sum is the same with or without noise; the rest is N(0, (σC)²)."""
    _, params = _models(1)
    features = torch.zeros(50, 64)
    labels = torch.zeros(50, dtype=torch.int64)
    kwargs = dict(steps=1, batch_size=10, clip=2.0, learning_rate=1.0, optimizer="sgd")
    args = (params, features, labels, torch.tensor([0]), torch.tensor([50]))
    noisy = noisy_local_training(*args, NoisyTraining(SIZES, sigma=1.5, **kwargs), torch.Generator().manual_seed(0))
    clean = noisy_local_training(*args, NoisyTraining(SIZES, sigma=0.0, **kwargs), torch.Generator().manual_seed(0))
    noise = (clean - noisy).numpy().ravel() * 10  # γ/B = 1/10
    d = noise.shape[0]
    # std estimate from d draws: relative error ~ 1/√(2d); allow 5 of those
    assert noise.std() == pytest.approx(1.5 * 2.0, rel=5 / math.sqrt(2 * d))


def test_each_record_is_drawn_independently_at_rate_b_over_n():
    """Inclusion frequencies over T steps match B/n_j within 5 binomial standard errors; batches stay in their client."""
    counts = torch.tensor([20, 50, 200])
    batch_size, trials = 10, 4000
    generator = torch.Generator().manual_seed(3)
    hits = [np.zeros(int(n)) for n in counts]
    sizes = []
    for _ in range(trials):
        batches = poisson_batches(counts, batch_size, generator)
        assert torch.all(batches.weight[:, 1:] <= batches.weight[:, :-1])  # drawn rows first, then padding
        for j, n in enumerate(counts.tolist()):
            drawn = _drawn(batches, j).numpy()
            assert len(set(drawn.tolist())) == len(drawn) and (drawn < n).all()
            hits[j][drawn] += 1
        sizes.append(batches.sizes.numpy())
    for j, n in enumerate(counts.tolist()):
        q = batch_size / n
        # 5 standard errors per record: P(|Z| > 5) ≈ 6e-7, below 2e-4 over all 270 records
        assert np.abs(hits[j] / trials - q).max() <= 5 * math.sqrt(q * (1 - q) / trials)
        # per-record pairs are independent: the batch size is Binomial(n, q), mean B
        mean_size = np.mean([s[j] for s in sizes])
        assert mean_size == pytest.approx(batch_size, abs=5 * math.sqrt(n * q * (1 - q) / trials))


def test_rates_never_exceed_b_over_n():
    counts = torch.tensor([3, 7, 600, 10**6 + 3])
    rates = poisson_rates(counts, 3)
    exact = [3 / n for n in counts.tolist()]
    assert all(r <= e and e - r < 2.0**-52 for r, e in zip(rates.tolist(), exact, strict=True))
    assert rates[0].item() == 1.0  # B = n: every record, every step


def test_padding_rows_add_nothing():
    """A zero weight drops a row exactly: the weighted sum equals the sum over the drawn rows alone."""
    _, params = _models(2)
    rng = np.random.default_rng(2)
    x = torch.as_tensor(rng.random((2, 7, 64)), dtype=torch.float32)
    y = torch.as_tensor(rng.integers(0, 10, (2, 7)))
    weight = torch.tensor([[1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0]], dtype=torch.float32)
    summed, _ = clipped_gradient_sum(params, SIZES, x, y, 1.0, weight)
    for j, kept in enumerate((3, 6)):
        alone, _ = clipped_gradient_sum(params[j : j + 1], SIZES, x[j : j + 1, :kept], y[j : j + 1, :kept], 1.0)
        np.testing.assert_allclose(summed[j].numpy(), alone[0].numpy(), rtol=1e-5, atol=1e-7)


def test_empty_batches_step_on_noise_alone_and_b_above_n_is_refused():
    _, params = _models(1)
    features, labels, offsets, counts = _records([40])
    # B = 1 of 40 records over 200 steps: some steps draw nothing; training still runs
    training = NoisyTraining(SIZES, steps=200, batch_size=1, clip=1.0, sigma=0.0, learning_rate=0.1, optimizer="sgd")
    out = noisy_local_training(params, features, labels, offsets, counts, training, torch.Generator().manual_seed(0))
    assert torch.isfinite(out).all()
    with pytest.raises(ConfigError, match="batch_size"):
        noisy_local_training(
            params, features, labels, offsets, counts,
            NoisyTraining(SIZES, steps=1, batch_size=41, clip=1.0, sigma=1.0, learning_rate=0.1),
            torch.Generator(),
        )
