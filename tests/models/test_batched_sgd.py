"""The gradient baselines' local rounds for many agents at once (``fedvote.models.batched_sgd``).

A batched round must be the per-agent loop's: plain SGD equal to
:func:`~fedvote.models.local_training.sgd_steps` on the same mini-batches, and DP-SGD equal to
Opacus (:func:`~fedvote.models.local_training.dp_sgd_steps`, one agent at a time) on the
batches and noise that :func:`~fedvote.models.local_training.dp_sgd_draws` takes from the same
generator — the agents of different sizes, with empty Poisson batches, noise and clipping.
Tolerances: float32 results of up to 20 steps, compared elementwise (rtol 1e-4, atol 1e-6).
"""

import numpy as np
import pytest
import torch

from fedvote.models.batched_dp_sgd import PaddedBatches, PaddedSteps, perceptron_layer_sizes
from fedvote.models.batched_sgd import batched_dp_sgd, batched_sgd
from fedvote.models.local_training import (
    DpSgdSpec,
    dp_sgd_draws,
    dp_sgd_steps,
    flat_parameters,
    load_flat_parameters,
    minibatch_rows,
    sgd_steps,
)
from fedvote.models.zoo import build_model

SHAPE = (1, 8, 8)
COUNTS = [7, 40, 25, 61]  # one agent below the batch size: its batch is all 7 records, padded


def _records(counts, seed=0):
    rng = np.random.default_rng(seed)
    total = int(sum(counts))
    features = rng.random((total, 64), dtype=np.float32)
    labels = rng.integers(0, 10, total)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    return features, labels, offsets


def _theta(model_name):
    model = build_model(model_name, SHAPE, 10, hidden=16, generator=torch.Generator().manual_seed(3))
    return model, flat_parameters(model)


def _own(features, labels, offsets, j):
    rows = slice(int(offsets[j]), int(offsets[j]) + COUNTS[j])
    return features[rows].reshape(-1, *SHAPE), labels[rows]


def _loop(model_name, theta, train):
    model = build_model(model_name, SHAPE, 10, hidden=16)
    load_flat_parameters(model, theta)
    train(model)
    return flat_parameters(model)


@pytest.mark.parametrize("model_name", ["logistic", "mlp"])
def test_batched_sgd_is_each_agents_sgd_steps_on_its_own_minibatches(model_name):
    features, labels, offsets = _records(COUNTS)
    model, theta = _theta(model_name)
    sizes = perceptron_layer_sizes(model)
    steps, batch, lr = 20, 16, 0.3
    rows = [minibatch_rows(n, steps=steps, batch_size=batch, generator=torch.Generator().manual_seed(j))
            for j, n in enumerate(COUNTS)]
    padded = PaddedSteps.pad([[r[k] for r in rows] for k in range(steps)], torch.device("cpu"))
    assert padded.index.shape == (steps, len(COUNTS), batch)
    assert padded.weight[:, 0].sum(dim=-1).tolist() == [7.0] * steps  # the small agent is padded
    out = batched_sgd(torch.as_tensor(np.tile(theta, (len(COUNTS), 1))), sizes, torch.as_tensor(features),
                      torch.as_tensor(labels), torch.as_tensor(offsets), padded, lr)
    for j in range(len(COUNTS)):
        x, y = _own(features, labels, offsets, j)
        reference = _loop(model_name, theta, lambda m, x=x, y=y, j=j: sgd_steps(
            m, x, y, steps=steps, learning_rate=lr, batch_size=batch, generator=torch.Generator().manual_seed(j)))
        np.testing.assert_allclose(out[j].numpy(), reference, rtol=1e-4, atol=1e-6)
        assert not np.allclose(reference, theta)  # it trained


@pytest.mark.parametrize("model_name", ["logistic", "mlp"])
@pytest.mark.parametrize(
    ("spec", "steps"),
    [
        (DpSgdSpec(sampling_rate=0.25, noise_multiplier=1.1, max_grad_norm=0.5), 3),  # clipping bites (C < norms)
        (DpSgdSpec(sampling_rate=0.03, noise_multiplier=0.7, max_grad_norm=1.0), 8),  # empty batches: noise alone
        (DpSgdSpec(sampling_rate=0.2, noise_multiplier=0.0, max_grad_norm=1.0), 6),  # no noise: nothing drawn for it
    ],
    ids=["clipped", "empty-batches", "no-noise"],
)
def test_batched_dp_sgd_equals_opacus_on_the_generators_own_draws(model_name, spec, steps):
    """Each agent's Opacus DP-SGD (the loop) from seed j equals the batched run on dp_sgd_draws(seed j)."""
    features, labels, offsets = _records(COUNTS, seed=1)
    model, theta = _theta(model_name)
    sizes = perceptron_layer_sizes(model)
    shapes = [tuple(p.shape) for p in model.parameters()]
    lr = 1.0
    draws = [dp_sgd_draws(n, steps=steps, spec=spec, parameter_shapes=shapes,
                          generator=torch.Generator().manual_seed(100 + j)) for j, n in enumerate(COUNTS)]
    padded = [PaddedBatches.pad([d.batches[k] for d in draws], torch.device("cpu")) for k in range(steps)]
    if spec.sampling_rate < 0.1:
        assert any(int(b.sizes.min()) == 0 for b in padded)  # some agent's batch was empty
    if spec.noise_multiplier == 0:
        assert all(float(d.noise.abs().max()) == 0 for d in draws)
    noise = torch.stack([d.noise for d in draws], dim=1)  # (E, m, d)
    step_sizes = torch.tensor([lr / (spec.sampling_rate * n) for n in COUNTS])
    out = batched_dp_sgd(torch.as_tensor(np.tile(theta, (len(COUNTS), 1))), sizes, torch.as_tensor(features),
                         torch.as_tensor(labels), torch.as_tensor(offsets), padded, noise, step_sizes,
                         spec.max_grad_norm)
    for j in range(len(COUNTS)):
        x, y = _own(features, labels, offsets, j)
        reference = _loop(model_name, theta, lambda m, x=x, y=y, j=j: dp_sgd_steps(
            m, x, y, steps=steps, learning_rate=lr, spec=spec, generator=torch.Generator().manual_seed(100 + j)))
        np.testing.assert_allclose(out[j].numpy(), reference, rtol=1e-4, atol=1e-6)


def test_dp_sgd_draws_are_poisson_batches_and_noise_of_std_z_c():
    """The draws themselves: batches inside the agent's records, noise N(0, (zC)²) per coordinate."""
    spec = DpSgdSpec(sampling_rate=0.3, noise_multiplier=2.0, max_grad_norm=0.5)
    shapes = [(16, 64), (16,), (10, 16), (10,)]
    draws = dp_sgd_draws(50, steps=400, spec=spec, parameter_shapes=shapes, generator=torch.Generator().manual_seed(0))
    sizes = np.array([len(b) for b in draws.batches])
    assert all(len(set(b.tolist())) == len(b) and all(0 <= i < 50 for i in b.tolist()) for b in draws.batches)
    # batch size Binomial(50, 0.3) over 400 steps: mean 15 within 5 standard errors
    assert abs(sizes.mean() - 15) <= 5 * np.sqrt(50 * 0.3 * 0.7 / 400)
    values = draws.noise.numpy().ravel()  # 400 × 1210 draws
    assert draws.noise.shape == (400, 16 * 64 + 16 + 160 + 10)
    # std estimate: relative error ~ 1/sqrt(2·count); allow 5 of those
    assert values.std() == pytest.approx(1.0, rel=5 / np.sqrt(2 * values.size))
    assert dp_sgd_draws(0, steps=3, spec=spec, parameter_shapes=shapes,
                        generator=torch.Generator().manual_seed(0)).batches == ()


def test_padded_batches_weight_real_rows_only():
    padded = PaddedBatches.pad([torch.tensor([4, 1]), torch.tensor([], dtype=torch.int64), torch.tensor([0, 2, 3])],
                               torch.device("cpu"))
    assert padded.index.tolist() == [[4, 1, 0], [0, 0, 0], [0, 2, 3]]
    assert padded.weight.tolist() == [[1, 1, 0], [0, 0, 0], [1, 1, 1]]
    assert padded.sizes.tolist() == [2, 0, 3]


def test_batched_sgd_gathers_in_blocks_with_the_same_result(monkeypatch):
    """Blocks of one step, three steps, or all of them: the same trained parameters."""
    import fedvote.models.batched_sgd as module

    features, labels, offsets = _records(COUNTS)
    model, theta = _theta("mlp")
    rows = [minibatch_rows(n, steps=7, batch_size=16, generator=torch.Generator().manual_seed(j))
            for j, n in enumerate(COUNTS)]
    padded = PaddedSteps.pad([[r[k] for r in rows] for k in range(7)], torch.device("cpu"))
    step_bytes = len(COUNTS) * 16 * 64 * 4  # one step's gathered records, float32
    results = []
    for block in (1, 3, 100):
        monkeypatch.setattr(module, "GATHER_BYTES", block * step_bytes)
        results.append(batched_sgd(torch.as_tensor(np.tile(theta, (len(COUNTS), 1))), perceptron_layer_sizes(model),
                                   torch.as_tensor(features), torch.as_tensor(labels), torch.as_tensor(offsets),
                                   padded, 0.3))
    for other in results[1:]:
        torch.testing.assert_close(other, results[0], rtol=0, atol=0)


def test_padded_steps_pad_every_step_to_the_longest_batch_of_any_step():
    """Client 0 draws 2 rows a step, client 1 none at step 1 and 3 at step 0: L = 3 for both steps."""
    rows = [[torch.tensor([4, 1]), torch.tensor([2, 0, 3])], [torch.tensor([0, 5]), torch.tensor([], dtype=torch.int64)]]
    padded = PaddedSteps.pad(rows, torch.device("cpu"))  # rows[k][j]: step k, client j
    assert padded.index.tolist() == [[[4, 1, 0], [2, 0, 3]], [[0, 5, 0], [0, 0, 0]]]
    assert padded.weight.tolist() == [[[1, 1, 0], [1, 1, 1]], [[1, 1, 0], [0, 0, 0]]]
    same = PaddedSteps.pad([[torch.tensor([1, 2]), torch.tensor([0, 3])]], torch.device("cpu"))  # no padding
    assert same.index.tolist() == [[[1, 2], [0, 3]]] and same.weight.tolist() == [[[1, 1], [1, 1]]]


def test_batched_sgd_leaves_an_agent_with_only_padding_where_it_started():
    """An agent whose every batch is empty (weight 0) keeps θ; the other agent trains."""
    features, labels, offsets = _records([30, 30])
    model, theta = _theta("mlp")
    rows = [[torch.tensor([1, 2, 3]), torch.tensor([], dtype=torch.int64)]] * 4  # step-major: client 1 never draws
    out = batched_sgd(torch.as_tensor(np.tile(theta, (2, 1))), perceptron_layer_sizes(model),
                      torch.as_tensor(features), torch.as_tensor(labels), torch.as_tensor(offsets),
                      PaddedSteps.pad(rows, torch.device("cpu")), 0.5)
    np.testing.assert_array_equal(out[1].numpy(), theta)
    assert not np.allclose(out[0].numpy(), theta)


def test_dp_fedsgds_batched_clip_is_opacus_factor():
    """min(1, C/(‖v‖ + δ)) with Opacus's δ: in float64 with a visible δ, the clipped norm is C·‖v‖/(‖v‖ + δ)."""
    from fedvote.models.batched_dp_sgd import clipped_gradient_sum
    from fedvote.models.batched_sgd import OPACUS_NORM_OFFSET

    assert OPACUS_NORM_OFFSET == 1e-6  # opacus/optimizers/optimizer.py: max_grad_norm / (norms + 1e-6)
    model, theta = _theta("mlp")
    sizes = perceptron_layer_sizes(model)
    params = torch.as_tensor(theta, dtype=torch.float64).unsqueeze(0) * 50  # large weights: large gradients
    x = torch.as_tensor(np.random.default_rng(0).random((1, 1, 64)))
    y = torch.tensor([[3]])
    plain, norms = clipped_gradient_sum(params, sizes, x, y, 1e9)  # nothing clipped: the gradient itself
    assert float(norms[0, 0]) > 1.0
    np.testing.assert_allclose(float(plain.norm()), float(norms[0, 0]), rtol=1e-12)
    clip, offset = 0.5, 0.25
    clipped, _ = clipped_gradient_sum(params, sizes, x, y, clip, norm_offset=offset)
    norm = float(norms[0, 0])
    np.testing.assert_allclose(float(clipped.norm()), clip * norm / (norm + offset), rtol=1e-12)
    exact, _ = clipped_gradient_sum(params, sizes, x, y, clip)  # PriFedSync's min(1, C/‖v‖)
    np.testing.assert_allclose(float(exact.norm()), clip, rtol=1e-12)
