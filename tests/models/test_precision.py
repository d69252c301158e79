"""The student's arithmetic: what "auto" resolves to, and that the training steps (only they) run in it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedvote.errors import ConfigError
from fedvote.models import precision
from fedvote.models.config import TrainingConfig
from fedvote.models.multilabel import fit_attributes
from fedvote.models.precision import compute_device, native_bfloat16, resolve_precision, training_arithmetic
from fedvote.models.semi_supervised import ConsistencySettings, train_consistency
from fedvote.models.training import fit_classifier


@pytest.mark.parametrize(("bf16", "amx", "expected"), [(True, False, True), (False, True, True), (False, False, False)])
def test_native_bfloat16_is_avx512_bf16_or_amx(monkeypatch, bf16: bool, amx: bool, expected: bool) -> None:
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: bf16, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    assert native_bfloat16() is expected
    assert resolve_precision("auto", (1, 28, 28)) == ("bfloat16" if expected else "float32")


def test_a_torch_without_the_checks_counts_as_without_bfloat16(monkeypatch) -> None:
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported", raising=False)
    assert native_bfloat16() is False
    assert resolve_precision("auto", (1, 28, 28)) == "float32"


@pytest.mark.parametrize(
    ("shape", "expected"),
    [((1, 28, 28), "bfloat16"), ((3, 16, 16), "bfloat16"), ((1, 16, 15), "float32"), ((1, 8, 8), "float32"),
     ((784,), "float32"), ((32,), "float32")],
)
def test_auto_takes_bfloat16_for_images_of_at_least_16x16_only(monkeypatch, shape, expected) -> None:
    monkeypatch.setattr(precision, "native_bfloat16", lambda: True)
    assert resolve_precision("auto", shape) == expected


def test_a_named_precision_is_kept_whatever_the_cpu_and_shape_and_unknown_names_are_refused(monkeypatch) -> None:
    monkeypatch.setattr(precision, "native_bfloat16", lambda: False)
    assert resolve_precision("bfloat16", (8,)) == "bfloat16"
    monkeypatch.setattr(precision, "native_bfloat16", lambda: True)
    assert resolve_precision("float32", (1, 28, 28)) == "float32"
    with pytest.raises(ValueError, match="half"):
        resolve_precision("half", (1, 28, 28))
    with pytest.raises(ValueError, match="resolved"):
        training_arithmetic("auto")
    with pytest.raises(ConfigError) as refused:
        TrainingConfig(precision="half")
    assert refused.value.argument == "precision"


@pytest.mark.parametrize(("name", "dtype"), [("float32", torch.float32), ("bfloat16", torch.bfloat16)])
def test_products_run_in_the_named_arithmetic(name: str, dtype: torch.dtype) -> None:
    layer = nn.Linear(8, 4)
    with training_arithmetic(name):
        out = layer(torch.randn(3, 8))
    assert out.dtype == dtype
    assert layer.weight.dtype == torch.float32


class _Recorder(nn.Module):
    """A linear model that records, per call, whether autocast was on and whether it was training."""

    def __init__(self, inputs: int, outputs: int) -> None:
        super().__init__()
        self.linear = nn.Linear(inputs, outputs)
        self.calls: list[tuple[bool, bool]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append((torch.is_autocast_enabled("cpu"), self.training))
        return self.linear(torch.flatten(x, 1))


def _separable(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two Gaussian blobs in 8-D (means ±1): points (n, 8), labels (n,)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n).astype(np.int64)
    points = (rng.normal(0, 0.5, (n, 8)) + np.where(labels[:, None] == 1, 1.0, -1.0)).astype(np.float32)
    return points, labels


@pytest.mark.parametrize("name", ["float32", "bfloat16"])
def test_fit_classifier_trains_in_the_configured_arithmetic_and_keeps_float32_weights(name: str) -> None:
    points, labels = _separable(200, seed=0)
    model = _Recorder(8, 2)
    config = TrainingConfig(model="logistic", epochs=3, precision=name)
    fit_classifier(model, points, labels, config, torch.Generator().manual_seed(0))
    assert model.calls and all(autocast == (name == "bfloat16") for autocast, _ in model.calls)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    with torch.no_grad():
        accuracy = float((model(torch.as_tensor(points)).argmax(1).numpy() == labels).mean())
    assert accuracy >= 0.95  # the blobs are 4 standard deviations apart: either arithmetic learns them


def test_fit_classifier_in_bfloat16_differs_from_float32_from_the_same_seed() -> None:
    # The same seed and data: equal weights would mean the arithmetic was never applied.
    points, labels = _separable(200, seed=1)
    weights = {}
    for name in ("float32", "bfloat16"):
        torch.manual_seed(0)
        model = nn.Linear(8, 2)
        config = TrainingConfig(epochs=2, precision=name)
        fit_classifier(model, points, labels, config, torch.Generator().manual_seed(0))
        weights[name] = model.weight.detach().clone()
    assert not torch.equal(weights["float32"], weights["bfloat16"])
    assert torch.allclose(weights["float32"], weights["bfloat16"], atol=0.05)  # 8 significant bits, 2 epochs


@pytest.mark.parametrize("method", ["vat", "fixmatch"])
def test_consistency_steps_run_in_bfloat16_and_return_a_float32_average(method: str) -> None:
    rng = np.random.default_rng(2)
    images = rng.uniform(0, 1, (48, 1, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 2, 48).astype(np.int64)
    model = _Recorder(64, 2)
    config = TrainingConfig(model="logistic", epochs=1, batch_size=4, precision="bfloat16")
    average = train_consistency(
        model, images[:8], labels[:8], images[8:], config, torch.Generator().manual_seed(0),
        method=method, settings=ConsistencySettings(unlabeled_ratio=2, max_steps=5),
    )  # fmt: skip
    training_calls = [autocast for autocast, training in model.calls if training]
    assert training_calls and all(training_calls)
    assert all(p.dtype == torch.float32 for p in average.parameters())
    assert not average.training


def test_fit_attributes_trains_in_the_configured_arithmetic() -> None:
    points, labels = _separable(64, seed=3)
    targets = np.stack([labels, 1 - labels], axis=1).astype(np.float32)  # (n, 2)
    model = _Recorder(8, 2)
    config = TrainingConfig(model="logistic", epochs=1, precision="bfloat16")
    fit_attributes(model, points, targets, config, torch.Generator().manual_seed(0))
    assert model.calls and all(autocast for autocast, _ in model.calls)


def test_an_auto_student_on_small_inputs_trains_in_float32(monkeypatch) -> None:
    monkeypatch.setattr(precision, "native_bfloat16", lambda: True)
    points, labels = _separable(64, seed=4)
    model = _Recorder(8, 2)
    fit_classifier(model, points, labels, TrainingConfig(epochs=1, precision="auto"), torch.Generator().manual_seed(0))
    assert model.calls and not any(autocast for autocast, _ in model.calls)


def test_auto_takes_a_gpu_only_when_it_can_multiply_in_the_precision(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert compute_device("auto", "float32") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert compute_device("auto", "bfloat16") == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert compute_device("auto", "bfloat16") == torch.device("cpu")  # an older GPU: bfloat16 on the CPU
    assert compute_device("auto", "float32") == torch.device("cuda")
    assert compute_device("cpu", "float32") == torch.device("cpu")  # a named device is kept

