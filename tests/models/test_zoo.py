"""SmallCNN: the conv-ReLU-pool network it stands for, on channels-last kernels."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedvote.models.zoo import SmallCNN, build_model


@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32), (1, 8, 8)])
@pytest.mark.parametrize("widths", [(16, 32), (24, 48)])
def test_every_kernel_is_stored_channels_last(shape, widths):
    # With one input channel a contiguous kernel also passes is_contiguous(channels_last); only
    # true channels-last strides (the channel step 1) send the convolutions down the fast path.
    model = build_model("cnn", shape, 10, cnn_widths=widths, generator=torch.Generator().manual_seed(0))
    assert [layer.out_channels for layer in model.features if isinstance(layer, nn.Conv2d)] == list(widths)
    for layer in model.features:
        if isinstance(layer, nn.Conv2d):
            out_channels, in_channels, height, width = layer.weight.shape
            assert layer.weight.stride() == (in_channels * height * width, 1, width * in_channels, in_channels)


@pytest.mark.parametrize("widths", [(16, 32), (24, 48)])
def test_logits_and_gradients_equal_the_contiguous_conv_relu_pool_network(widths):
    torch.manual_seed(0)
    first, second = widths
    model = SmallCNN((1, 28, 28), 10, widths=widths)
    reference = nn.Sequential(
        nn.Conv2d(1, first, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(first, second, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(second * 49, 10),
    )  # fmt: skip
    with torch.no_grad():
        for mine, theirs in zip(
            [model.features[0], model.features[3], model.head], [reference[0], reference[3], reference[7]], strict=True
        ):
            theirs.weight.copy_(mine.weight)
            theirs.bias.copy_(mine.bias)
    x, y = torch.randn(16, 1, 28, 28), torch.randint(0, 10, (16,))
    nn.functional.cross_entropy(model(x), y).backward()
    nn.functional.cross_entropy(reference(x), y).backward()
    torch.testing.assert_close(model(x), reference(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model.features[3].weight.grad, reference[3].weight.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model.features[0].weight.grad, reference[0].weight.grad, rtol=1e-4, atol=1e-5)
