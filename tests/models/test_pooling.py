"""max_pool_2x2: nn.MaxPool2d(2)'s values without its indices, and the forwards that use it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedvote.models.pooling import is_max_pool_2x2, max_pool_2x2
from fedvote.models.stacked_conv import StackedConvNet
from fedvote.models.zoo import build_model


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(3, 4, 28, 28), (2, 5, 7, 9), (1, 1, 2, 2), (2, 3, 14, 3)])
@pytest.mark.parametrize("channels_last", [True, False])
def test_values_and_layout_equal_max_pool2d(dtype, shape, channels_last):
    # Rounded values: many windows hold ties; odd sizes drop their last row or column.
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1)).mul(2).round().to(dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    expected = nn.MaxPool2d(2)(x)
    pooled = max_pool_2x2(x)
    assert pooled.dtype == dtype and pooled.shape == expected.shape
    assert torch.equal(pooled, expected)
    if channels_last and min(pooled.shape[1:]) > 1:
        assert pooled.is_contiguous(memory_format=torch.channels_last)


def test_nan_propagates_as_in_max_pool2d():
    x = torch.zeros(1, 2, 4, 4)
    x[0, 0, 1, 3] = float("nan")
    pooled = max_pool_2x2(x)
    assert torch.equal(pooled.isnan(), nn.MaxPool2d(2)(x).isnan())
    assert int(pooled.isnan().sum()) == 1


def test_refuses_anything_but_a_batch_of_images_of_at_least_2x2():
    with pytest.raises(ValueError, match="B, C, H, W"):
        max_pool_2x2(torch.zeros(4, 4))
    with pytest.raises(ValueError, match="at least 2x2"):
        max_pool_2x2(torch.zeros(2, 3, 14, 1))


@pytest.mark.parametrize(
    ("layer", "expected"),
    [
        (nn.MaxPool2d(2), True),
        (nn.MaxPool2d((2, 2), stride=2), True),
        (nn.MaxPool2d(2, stride=1), False),
        (nn.MaxPool2d(3), False),
        (nn.MaxPool2d(2, padding=1), False),
        (nn.MaxPool2d(2, ceil_mode=True), False),
        (nn.MaxPool2d(2, return_indices=True), False),
        (nn.AvgPool2d(2), False),
    ],
)
def test_recognises_exactly_the_layers_it_computes(layer, expected):
    assert is_max_pool_2x2(layer) is expected


def _count_max_pool2d_calls(monkeypatch) -> list[int]:
    calls = [0]
    original = nn.functional.max_pool2d

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(nn.functional, "max_pool2d", counted)
    return calls


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_small_cnn_pools_by_maxima_only_where_autograd_does_not_record(monkeypatch, precision):
    model = build_model(
        "cnn", (1, 28, 28), 10, cnn_widths=(24, 48), generator=torch.Generator().manual_seed(0)
    )
    x = torch.rand(8, 1, 28, 28, generator=torch.Generator().manual_seed(2))
    calls = _count_max_pool2d_calls(monkeypatch)
    context = (
        torch.autocast("cpu", dtype=torch.bfloat16)
        if precision == "bfloat16"
        else torch.autocast("cpu", enabled=False)
    )
    with context:
        recorded = model(x)
        assert calls[0] == 2 and recorded.requires_grad
        with torch.no_grad():
            unrecorded = model(x)
        assert calls[0] == 2  # no MaxPool2d call without autograd
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        frozen = model(x)  # nothing to differentiate: pooled by maxima too
        assert calls[0] == 2
        assert model(x.clone().requires_grad_(True)).requires_grad  # a gradient wanted for the input
        assert calls[0] == 4
    assert torch.equal(unrecorded, recorded.detach()) and torch.equal(frozen, unrecorded)


def test_small_cnn_feeds_its_first_convolution_true_channels_last_strides(monkeypatch):
    # A one-channel batch is "contiguous" in both formats; only strides with a channel step of 1
    # take the fast convolution (as for the kernels).
    model = build_model("cnn", (1, 28, 28), 10, generator=torch.Generator().manual_seed(0))
    seen: list[tuple[int, ...]] = []
    model.features[0].register_forward_pre_hook(lambda module, inputs: seen.append(inputs[0].stride()))
    model(torch.rand(4, 1, 28, 28))
    assert seen == [(784, 1, 28, 1)]


def test_stacked_networks_predict_by_maxima_and_train_by_max_pool2d(monkeypatch):
    template = build_model(
        "cnn", (1, 12, 12), 3, cnn_widths=(4, 6), generator=torch.Generator().manual_seed(0)
    )
    layers = list(template.features) + [nn.Flatten(), template.head]
    net = StackedConvNet(layers, activations_per_example=4 * 12 * 12)
    generator = torch.Generator().manual_seed(3)
    params = [torch.randn(2, *p.shape, generator=generator) * 0.3 for p in template.parameters()]
    x = torch.rand(2, 5, 1, 12, 12, generator=generator)  # (G, B, C, H, W)
    y = torch.randint(0, 3, (2, 5), generator=generator)
    calls = [0]
    original = torch.nn.functional.max_pool2d_with_indices

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "max_pool2d_with_indices", counted)
    logits = net.logits(params, x)
    assert calls[0] == 0
    net.grad(params, x, y, torch.ones(2, 5), [torch.empty_like(p) for p in params])
    assert calls[0] == 2
    for g in range(2):
        single = build_model("cnn", (1, 12, 12), 3, cnn_widths=(4, 6))
        with torch.no_grad():
            for mine, stacked in zip(single.parameters(), params, strict=True):
                mine.copy_(stacked[g])
            torch.testing.assert_close(logits[g], single(x[g]), rtol=1e-5, atol=1e-6)
