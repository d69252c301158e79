"""FixMatch and VAT students: they learn from unlabelled points, reproducibly, and refuse what they cannot do."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedvote.errors import ConfigError
from fedvote.models.semi_supervised import ConsistencySettings, train_consistency
from fedvote.models.student import resolve_student_training, train_student
from fedvote.models.training import TrainingConfig, predict_labels
from fedvote.models.zoo import build_model


def _rings(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two concentric rings in 2-D (radius 1 and 3, noise 0.15): points (n, 2), labels (n,)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    angle = rng.uniform(0, 2 * np.pi, n)
    radius = np.where(labels == 0, 1.0, 3.0) + rng.normal(0, 0.15, n)
    points = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1).astype(np.float32)
    return points, labels.astype(np.int64)


def test_vat_learns_the_rings_from_eight_labels() -> None:
    # Eight labels (four per ring) and 600 unlabelled points: the rings are separated by a
    # low-density gap, which VAT's smoothness finds. The same MLP on the eight labels alone
    # scores 0.915 here; a broken VAT (e.g. collapsing to one class) about 0.5.
    points, labels = _rings(800, seed=0)
    labelled = np.concatenate([np.flatnonzero(labels == c)[:4] for c in (0, 1)])
    unlabelled = np.setdiff1d(np.arange(600), labelled)
    config = TrainingConfig(model="mlp", epochs=40, learning_rate=1e-2)
    student = train_student(
        points[labelled], labels[labelled], num_classes=2, config=config, seed=0,
        unlabeled=points[unlabelled], semi_supervised="vat",
    )
    test = np.arange(600, 800)
    accuracy = float(np.mean(predict_labels(student, points[test]) == labels[test]))
    assert accuracy >= 0.97


def _tiny_images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Bright left half (class 0) or right half (class 1) images (n, 1, 8, 8) with noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n).astype(np.int64)
    images = rng.uniform(0, 0.2, (n, 1, 8, 8)).astype(np.float32)
    for i, label in enumerate(labels):
        images[i, 0, :, 4 * label : 4 * label + 4] += 0.8
    return images, labels


@pytest.mark.parametrize("method", ["fixmatch", "vat"])
def test_consistency_training_is_reproducible_and_returns_an_eval_model(method: str) -> None:
    images, labels = _tiny_images(40, seed=1)
    config = TrainingConfig(model="cnn", epochs=2)

    def train(seed: int) -> torch.nn.Module:
        generator = torch.Generator().manual_seed(seed)
        model = build_model("cnn", (1, 8, 8), 2, generator=generator)
        return train_consistency(model, images[:8], labels[:8], images[8:], config, generator, method=method)

    first, again, other = train(0), train(0), train(1)
    assert not first.training
    for a, b in zip(first.parameters(), again.parameters(), strict=True):
        assert torch.equal(a, b)
    assert any(not torch.equal(a, b) for a, b in zip(first.parameters(), other.parameters(), strict=True))


@pytest.mark.parametrize(("epochs", "max_steps", "expected"), [(3, 100, 3 * 5), (50, 7, 7)])
def test_steps_are_epochs_over_the_pool_up_to_the_cap(monkeypatch, epochs, max_steps, expected) -> None:
    # 8 labelled + 32 unlabelled points, batch 8: an epoch is ⌈40 / 8⌉ = 5 steps.
    images, labels = _tiny_images(40, seed=2)
    steps = []
    original = torch.optim.Adam.step
    monkeypatch.setattr(torch.optim.Adam, "step", lambda self, *a, **k: (steps.append(1), original(self, *a, **k))[1])
    generator = torch.Generator().manual_seed(0)
    model = build_model("cnn", (1, 8, 8), 2, generator=generator)
    config = TrainingConfig(model="cnn", epochs=epochs, batch_size=8)
    train_consistency(
        model, images[:8], labels[:8], images[8:], config, generator, method="vat",
        settings=ConsistencySettings(max_steps=max_steps),
    )
    assert len(steps) == expected


def test_fixmatch_refuses_inputs_that_are_not_images() -> None:
    points, labels = _rings(50, seed=2)
    generator = torch.Generator().manual_seed(0)
    model = build_model("mlp", (2,), 2, generator=generator)
    with pytest.raises(ValueError, match="image"):
        train_consistency(model, points[:5], labels[:5], points[5:], TrainingConfig(), generator, method="fixmatch")


def test_auto_is_fixmatch_for_large_images_and_vat_otherwise_and_unknown_names_are_refused() -> None:
    assert resolve_student_training("auto", (1, 28, 28)) == "fixmatch"
    assert resolve_student_training("auto", (3, 16, 16)) == "fixmatch"
    assert resolve_student_training("auto", (1, 8, 8)) == "vat"  # digits
    assert resolve_student_training("auto", (64,)) == "vat"
    assert resolve_student_training("self-training", (1, 28, 28)) == "self-training"
    with pytest.raises(ConfigError, match="semi_supervised"):
        resolve_student_training("mixmatch", (64,))


def test_a_student_without_labels_or_pool_trains_supervised() -> None:
    images, labels = _tiny_images(30, seed=3)
    config = TrainingConfig(model="cnn", epochs=1)
    no_pool = train_student(images, labels, num_classes=2, config=config, seed=0, unlabeled=None)
    no_labels = train_student(images[:0], labels[:0], num_classes=2, config=config, seed=0, unlabeled=images)
    assert predict_labels(no_pool, images).shape == (30,)
    assert predict_labels(no_labels, images).shape == (30,)
