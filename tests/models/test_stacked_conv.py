"""G stacked CNNs with a hand-written backward: each model's own autograd gradient and loss."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedvote.models import ensemble_kernels, stacked_conv
from fedvote.models.ensemble import fit_ensemble
from fedvote.models.ensemble_kernels import _activations_per_example, _stacked_layers
from fedvote.models.stacked_conv import StackedConvNet, compile_layers
from fedvote.models.training import TrainingConfig, fit_classifier
from fedvote.models.zoo import SmallCNN, build_model

NUM_CLASSES = 5


def _sparse_images(shape, generator, zero_fraction=0.6):
    """Images with most pixels exactly 0 (as MNIST's background): pooling windows tie often."""
    x = torch.rand(shape, generator=generator)
    return torch.where(torch.rand(shape, generator=generator) < zero_fraction, torch.zeros(()), x)


def _other_network(channels):
    """Strided and bias-free convolutions, a padded 3x3 pooling, pooling before ReLU, a hidden Linear."""
    return nn.Sequential(
        nn.Conv2d(channels, 6, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(3, stride=2, padding=1),
        nn.Conv2d(6, 4, 2, bias=False),
        nn.MaxPool2d(2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 1 * 1, 7),
        nn.ReLU(),
        nn.Linear(7, NUM_CLASSES),
    )


def _models(kind, count, shape, generator):
    models = []
    for _ in range(count):
        model = SmallCNN(shape, NUM_CLASSES) if kind == "small" else _other_network(shape[0])
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
        models.append(model)
    return models


def _reference(models, x, y, w):
    """Each model alone with autograd: its loss and its gradients (the independent reference)."""
    losses, grads = [], []
    for g, model in enumerate(models):
        model.zero_grad()
        loss = (F.cross_entropy(model(x[g]), y[g], reduction="none") * w[g]).sum()
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
    return torch.stack(losses), grads


@pytest.mark.parametrize(
    ("kind", "shape"),
    [("small", (1, 12, 12)), ("small", (2, 7, 9)), ("other", (3, 10, 10))],
)
@pytest.mark.parametrize("chunk_bytes", [None, 1])
def test_gradient_and_loss_are_each_models_own(kind, shape, chunk_bytes):
    generator = torch.Generator().manual_seed(4)
    count, batch = 5, 6
    models = _models(kind, count, shape, generator)
    x = _sparse_images((count, batch, *shape), generator)  # (G, B, C, H, W)
    y = torch.randint(0, NUM_CLASSES, (count, batch), generator=generator)
    w = torch.full((count, batch), 1.0 / batch)
    w[1, 4:] = 0.0  # padding rows of a short batch
    w[3] = 0.0  # an agent sitting out the step
    layers = [*models[0].features, nn.Flatten(), models[0].head] if kind == "small" else list(models[0])
    net = StackedConvNet(layers, _activations_per_example(models[0], shape), chunk_bytes=chunk_bytes)
    params = [
        torch.stack(ps) for ps in zip(*(m.parameters() for m in models), strict=True)
    ]  # each (G, *shape)
    params = [p.detach() for p in params]
    out = [torch.full_like(p, float("nan")) for p in params]
    net.grad(params, x, y, w, out)
    losses, grads = _reference(models, x, y, w)
    assert torch.allclose(net.loss(params, x, y, w), losses, atol=1e-5, rtol=1e-5)
    logits = net.logits(params, x)  # (G, B, classes)
    with torch.no_grad():
        assert all(torch.allclose(logits[g], models[g](x[g]), atol=1e-5) for g in range(count))
    for g in range(count):
        for k, expected in enumerate(grads[g]):
            assert torch.allclose(out[k][g], expected, atol=1e-5, rtol=1e-4), f"model {g}, parameter {k}"
    assert all(torch.all(o[3] == 0) for o in out)  # zero weight: zero gradient


def test_relu_next_to_pooling_is_fused_and_other_orders_are_kept():
    # ReLU before or after a pooling is one pool-then-ReLU op; a ReLU after a linear layer stays.
    ops = compile_layers(_other_network(3))
    assert [(op.kind, op.relu) for op in ops] == [
        ("conv", False), ("pool", True), ("conv", False), ("pool", True),
        ("flatten", False), ("linear", False), ("relu", False), ("linear", False),
    ]  # fmt: skip
    with pytest.raises(ValueError, match="unsupported"):
        compile_layers([nn.Conv2d(1, 2, 3), nn.Sigmoid()])


def test_pooling_ties_go_to_the_first_maximum():
    # Two models whose conv outputs are constant: every 2x2 window is a four-way tie, and
    # max_pool2d (the loop) routes the whole gradient to the window's top-left element.
    model = nn.Sequential(nn.Conv2d(1, 1, 1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4, 2))
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.fill_(0.5)
    x = torch.zeros((1, 3, 1, 4, 4))
    y = torch.tensor([[0, 1, 1]])
    w = torch.full((1, 3), 1.0 / 3)
    net = StackedConvNet(list(model), 64)
    params = [p.detach().unsqueeze(0) for p in model.parameters()]
    out = [torch.zeros_like(p) for p in params]
    net.grad(params, x, y, w, out)
    _, grads = _reference([model], x, y, w)
    assert torch.allclose(out[1][0], grads[0][1], atol=1e-6)  # the bias gradient sums the routed ones
    assert out[1][0].abs().item() > 0


def test_fit_ensemble_on_sparse_images_matches_each_agent_alone(monkeypatch):
    # MNIST-like zeros, unequal sizes (a partial batch, a padded agent), a chunk per agent
    shape, sizes, seeds = (1, 8, 8), (11, 20, 4), (3, 14, 15)
    generator = torch.Generator().manual_seed(9)
    features = [_sparse_images((n, *shape), generator).numpy() for n in sizes]
    labels = [torch.randint(0, NUM_CLASSES, (n,), generator=generator).numpy() for n in sizes]
    config = TrainingConfig(model="cnn", epochs=3, batch_size=8)
    monkeypatch.setattr(stacked_conv, "CHUNK_BYTES", 1)
    ensemble = fit_ensemble(features, labels, config, seeds, num_classes=NUM_CLASSES)
    for i, seed in enumerate(seeds):
        g = torch.Generator().manual_seed(seed)
        alone = fit_classifier(
            build_model("cnn", shape, NUM_CLASSES, generator=g), features[i], labels[i], config, g
        )
        gap = max(
            (p.detach() - ensemble.params[name][i]).abs().max().item() for name, p in alone.named_parameters()
        )
        assert gap < 1e-5, f"agent {i}"
    assert np.isfinite(ensemble.flat_params.numpy()).all()


def test_small_cnn_is_stacked():
    assert _stacked_layers(SmallCNN((1, 28, 28), 10)) is not None


def test_autograd_path_kept_for_accelerators_gives_the_same_teachers(monkeypatch):
    generator = torch.Generator().manual_seed(2)
    shape, sizes = (1, 8, 8), (9, 16)
    features = [_sparse_images((n, *shape), generator).numpy() for n in sizes]
    labels = [torch.randint(0, NUM_CLASSES, (n,), generator=generator).numpy() for n in sizes]
    config = TrainingConfig(model="cnn", epochs=2, batch_size=8)
    manual = fit_ensemble(features, labels, config, (1, 2), num_classes=NUM_CLASSES)
    monkeypatch.setattr(ensemble_kernels, "_CONV_BACKWARD", "autograd")
    autograd = fit_ensemble(features, labels, config, (1, 2), num_classes=NUM_CLASSES)
    assert torch.allclose(manual.flat_params, autograd.flat_params, atol=1e-5, rtol=0)


def test_agents_are_chunked_to_the_budget_on_a_cpu_only():
    template = SmallCNN((1, 28, 28), 10)
    activations = _activations_per_example(template, (1, 28, 28))
    per_agent = 4 * 32 * activations  # bytes of one agent's activations at batch 32
    net = StackedConvNet(_stacked_layers(template), activations, chunk_bytes=3 * per_agent)
    assert net._chunks(torch.empty((7, 32, 1, 28, 28))) == [(0, 3), (3, 6), (6, 7)]
    assert net._chunks(torch.empty((7, 32, 1, 28, 28), device="meta")) == [(0, 7)]  # accelerators: one pass


@pytest.mark.parametrize("in_channels", [1, 16])
def test_grouped_kernels_are_laid_out_channels_last_even_with_one_input_channel(in_channels):
    """(G * out, in, kh, kw) kernels with unit channel stride: with one input channel a
    contiguous kernel also counts as channels-last, and PyTorch's CPU convolution with a bias
    then took 1.7 ms where the channels-last kernel takes 0.3 ms (5 agents' first layer)."""
    stacked = torch.randn(5, 16, in_channels, 3, 3)  # (G, out, in, kh, kw)
    kernels = stacked_conv._grouped_weight(stacked)
    assert kernels.shape == (80, in_channels, 3, 3)
    assert kernels.stride() == (9 * in_channels, 1, 3 * in_channels, in_channels)
    assert torch.equal(kernels, stacked.reshape(80, in_channels, 3, 3))
