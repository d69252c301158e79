"""FixMatch and VAT students: they learn from unlabelled points, reproducibly, and refuse what they cannot do."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from fedvote.errors import ConfigError
from fedvote.models.semi_supervised import (
    ConsistencySettings,
    fixmatch_losses,
    relabel_pool,
    train_consistency,
)
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


@pytest.mark.parametrize(
    ("epochs", "max_steps", "fraction", "expected"),
    [(3, 100, 1.0, 3 * 5), (50, 7, 1.0, 7), (4, 100, 0.5, 10), (50, 7, 0.5, 4), (1, 100, 0.01, 1)],
)
def test_steps_are_epochs_over_the_pool_up_to_the_cap_times_the_fraction(
    monkeypatch, epochs, max_steps, fraction, expected
) -> None:
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
        settings=ConsistencySettings(max_steps=max_steps), step_fraction=fraction,
    )  # fmt: skip
    assert len(steps) == expected


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.5])
def test_a_relabeller_step_fraction_outside_zero_to_one_is_refused(fraction) -> None:
    with pytest.raises(ValueError, match="relabeller_step_fraction"):
        ConsistencySettings(relabeller_step_fraction=fraction)


@pytest.mark.parametrize(("method", "expected"), [("fixmatch", [0.25, 1.0]), ("vat", [1.0])])
def test_only_a_relabelling_first_student_trains_the_shorter_share(monkeypatch, method, expected) -> None:
    # The first FixMatch student only picks the round's labels: it trains for the settings'
    # share of the steps, the round's student (the result) for all of them; VAT has no round.
    images, labels = _tiny_images(120, seed=4)
    images = images.repeat(2, axis=2).repeat(2, axis=3)  # (n, 1, 16, 16): FixMatch's minimum side
    fractions: list[float] = []
    original = train_consistency

    def recording(*args, **kwargs):
        fractions.append(kwargs.get("step_fraction", 1.0))
        return original(*args, **kwargs)

    monkeypatch.setattr("fedvote.models.student.train_consistency", recording)
    settings = ConsistencySettings(relabel_cnn_widths=(8, 12), relabel_confidence=0.6, relabeller_step_fraction=0.25)
    train_student(
        images[:10], labels[:10], num_classes=2, config=TrainingConfig(model="cnn", epochs=2, batch_size=8),
        seed=0, unlabeled=images[10:], semi_supervised=method, consistency=settings,
    )  # fmt: skip
    assert fractions == expected


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


def _conv_widths(model: torch.nn.Module) -> list[int]:
    return [layer.out_channels for layer in model.modules() if isinstance(layer, torch.nn.Conv2d)]


def test_the_self_training_rounds_student_is_the_wider_cnn_and_the_first_the_teachers(monkeypatch) -> None:
    # Xie et al. 2020's noisy student: each round's fresh student is at least as large as the
    # one whose predictions labelled its pool. Separable 16x16 images: the first student is
    # sure of the pool, so the round runs.
    images, labels = _tiny_images(120, seed=4)
    images = images.repeat(2, axis=2).repeat(2, axis=3)  # (n, 1, 16, 16): FixMatch's minimum side
    trained: list[list[int]] = []
    original = train_consistency

    def recording(model, *args, **kwargs):
        trained.append(_conv_widths(model))
        return original(model, *args, **kwargs)

    monkeypatch.setattr("fedvote.models.student.train_consistency", recording)
    config = TrainingConfig(model="cnn", epochs=2, batch_size=8)
    settings = ConsistencySettings(relabel_cnn_widths=(8, 12), relabel_confidence=0.6)
    student = train_student(
        images[:10], labels[:10], num_classes=2, config=config, seed=0, unlabeled=images[10:],
        semi_supervised="fixmatch", consistency=settings,
    )  # fmt: skip
    assert trained == [[16, 32], [8, 12]]
    assert _conv_widths(student) == [8, 12]


def test_fixmatch_losses_equal_the_papers_loss_on_one_concatenated_batch() -> None:
    # Sohn et al. 2020, eq. 4, as one batch (labelled, weak, strong) with the mask applied
    # after the fact: the split computation (weak views without autograd, strong views of
    # the confident points only) must give the same losses and the same gradient.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    inputs, targets = torch.randn(4, 1, 4, 4), torch.tensor([0, 1, 2, 1])
    pool = torch.randn(12, 1, 4, 4) * 10  # large logits: some points pass τ, some not

    def weak(x: torch.Tensor) -> torch.Tensor:
        return x

    def strong(x: torch.Tensor) -> torch.Tensor:
        return x.flip(-1) * 0.9

    logits = model(torch.cat([inputs, weak(pool), strong(pool)]))
    confidence, guessed = torch.softmax(logits[4:16].detach(), dim=1).max(dim=1)
    mask = (confidence >= 0.9).float()
    assert 0 < mask.sum() < 12
    paper_s = torch.nn.functional.cross_entropy(logits[:4], targets)
    paper_u = (torch.nn.functional.cross_entropy(logits[16:], guessed, reduction="none") * mask).mean()
    paper_grad = torch.autograd.grad(paper_s + paper_u, list(model.parameters()))

    ours_s, ours_u = fixmatch_losses(model, inputs, targets, pool, threshold=0.9, weak=weak, strong=strong)
    ours_grad = torch.autograd.grad(ours_s + ours_u, list(model.parameters()))
    assert torch.allclose(ours_s, paper_s) and torch.allclose(ours_u, paper_u, atol=1e-6)
    for a, b in zip(ours_grad, paper_grad, strict=True):
        assert torch.allclose(a, b, atol=1e-6)


class _FixedLogits(torch.nn.Module):
    """A 'model' whose logits for point i are row i of a table (the points are their indices)."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = table

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.table[x.reshape(x.shape[0], -1)[:, 0].long()]


def test_relabel_pool_adds_the_confident_points_keeps_the_released_labels_and_the_rest_unlabelled() -> None:
    # Pool points 0-5; the model is sure (softmax ~1) of points 1, 4 (class 2, class 0).
    table = torch.zeros(6, 3)
    table[1, 2] = table[4, 0] = 20.0
    pool = np.arange(6, dtype=np.float32).reshape(6, 1, 1, 1)
    queries, released = np.full((2, 1, 1, 1), 9.0, dtype=np.float32), np.array([1, 1])
    result = relabel_pool(_FixedLogits(table), queries, released, pool, confidence=0.99, min_unlabeled=2)
    assert result.added == 2
    assert result.features[:, 0, 0, 0].tolist() == [9.0, 9.0, 1.0, 4.0]
    assert result.labels.tolist() == [1, 1, 2, 0]  # the released labels untouched
    assert result.unlabeled[:, 0, 0, 0].tolist() == [0.0, 2.0, 3.0, 5.0]
    # Too few would stay unlabelled (4 < 5): the whole pool stays the unlabelled set.
    whole = relabel_pool(_FixedLogits(table), queries, released, pool, confidence=0.99, min_unlabeled=5)
    assert whole.unlabeled.shape[0] == 6 and whole.added == 2
    # Nobody passes a confidence no softmax reaches.
    none = relabel_pool(_FixedLogits(table), queries, released, pool, confidence=1.01, min_unlabeled=1)
    assert none.added == 0 and none.labels.tolist() == [1, 1]


def test_the_student_is_the_same_on_the_named_cpu_as_on_auto_without_a_gpu(monkeypatch):
    """Without a GPU, ``"auto"`` trains where ``"cpu"`` does, draw for draw: the same weights."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    points, labels = _rings(60, seed=4)
    config = TrainingConfig(model="mlp", epochs=2, batch_size=8)
    students = [
        train_student(points[:10], labels[:10], num_classes=2, config=config, seed=3, unlabeled=points[10:],
                      semi_supervised="vat", device=device)
        for device in ("auto", "cpu")
    ]  # fmt: skip
    for first, second in zip(students[0].parameters(), students[1].parameters(), strict=True):
        assert first.device.type == "cpu"
        assert torch.equal(first, second)


@pytest.mark.parametrize("closed", [True, False])
def test_the_student_decides_flips_once_from_the_whole_pool_for_every_round(monkeypatch, closed) -> None:
    # flip None (asked for; the default is False): the pool's rule (fedvote.models.augment.mirror_closed_pool) decides, once, on the
    # whole unlabelled pool; the first student and the round's both train with that answer.
    images, labels = _tiny_images(120, seed=4)
    # (n, 1, 16, 16), the bright half on top or at the bottom: a mirror keeps the class.
    images = np.ascontiguousarray(images.repeat(2, axis=2).repeat(2, axis=3).transpose(0, 1, 3, 2))
    asked: list[int] = []
    flips: list[bool | None] = []
    original = train_consistency

    def rule(pool: np.ndarray) -> bool:
        asked.append(pool.shape[0])
        return closed

    def recording(*args, **kwargs):
        flips.append(kwargs["settings"].flip)
        return original(*args, **kwargs)

    monkeypatch.setattr("fedvote.models.semi_supervised.mirror_closed_pool", rule)
    monkeypatch.setattr("fedvote.models.student.train_consistency", recording)
    settings = ConsistencySettings(relabel_cnn_widths=(8, 12), relabel_confidence=0.6, flip=None)
    train_student(
        images[:10], labels[:10], num_classes=2, config=TrainingConfig(model="cnn", epochs=2, batch_size=8),
        seed=0, unlabeled=images[10:], semi_supervised="fixmatch", consistency=settings,
    )  # fmt: skip
    assert asked == [110]
    assert flips == [closed, closed]


def test_flipped_views_train_another_student_and_unflipped_the_same_as_before() -> None:
    images, labels = _tiny_images(60, seed=5)
    images = images.repeat(2, axis=2).repeat(2, axis=3)  # (n, 1, 16, 16)

    def weights(flip: bool | None) -> torch.Tensor:
        generator = torch.Generator().manual_seed(0)
        model = build_model("cnn", (1, 16, 16), 2, generator=generator)
        trained = train_consistency(
            model, images[:10], labels[:10], images[10:], TrainingConfig(model="cnn", epochs=1, batch_size=8),
            generator, method="fixmatch", settings=ConsistencySettings(flip=flip),
        )  # fmt: skip
        return torch.cat([p.detach().flatten() for p in trained.parameters()])

    assert torch.equal(weights(False), weights(False))
    assert not torch.equal(weights(True), weights(False))


def test_by_default_the_student_never_flips_and_never_asks_the_pool(monkeypatch) -> None:
    # Measured on Fashion-MNIST (docs/defaults.md): the pool's rule picked flips and they cost
    # accuracy on every seed, so the default is no flip, whatever the pool.
    monkeypatch.setattr("fedvote.models.semi_supervised.mirror_closed_pool", lambda pool: pytest.fail("asked"))
    assert ConsistencySettings().flip is False
    assert ConsistencySettings().resolved(np.zeros((4, 1, 16, 16), dtype=np.float32)).flip is False


@pytest.mark.parametrize("method", ["fixmatch", "vat"])
def test_each_training_pass_shows_a_tick_a_step(method: str) -> None:
    """The student's passes report their steps (an ETA on slow students), one progress step each."""
    import io

    from fedvote.progress import LineProgress

    images, labels = _tiny_images(40, seed=3)
    stream = io.StringIO()
    config = TrainingConfig(model="cnn", epochs=3, batch_size=8)  # 3 passes of ⌈40 / 8⌉ = 5 steps
    train_student(
        images[:8], labels[:8], num_classes=2, config=config, seed=0, unlabeled=images[8:],
        semi_supervised=method, progress=LineProgress("run", stream, interval_s=0.0),
    )  # fmt: skip
    lines = stream.getvalue().splitlines()
    started = re.fullmatch(rf"run \[[0-9:]+\] training the student \({method}\): started \((\d+) parts\)", lines[0])
    assert started is not None, lines
    steps = int(started.group(1))  # VAT: 3 passes of ⌈40 / 8⌉ = 5 steps; FixMatch's first student a share
    assert steps == 15 if method == "vat" else 1 < steps < 15, lines
    assert any(f"training the student ({method}): {steps - 1}/{steps}, ETA " in line for line in lines), lines
    assert any(f"training the student ({method}): done in " in line for line in lines), lines
