"""The global student, trained on pseudo-labelled public queries (Algorithm 1, line 9).

Following the voting paper's Digit experiments (appendix: "a semi-supervised model is
trained using both labeled and pseudo-labeled data", VAT) and PATE, the student also
learns from the unlabelled rest of the public pool:

* ``fixmatch`` (images) and ``vat`` (any input): consistency training,
  :mod:`fedvote.models.semi_supervised`; FixMatch then runs one round of self-training
  (the pool points it is sure of become labels, a fresh student trains again);
* ``self-training``: label the pool points the student is confident about and retrain;
* ``supervised``: the released labels alone.

The pool is public and the pseudo-labels are already released, so all of this is
post-processing and costs no privacy.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fedvote.models.config import check_student_training
from fedvote.models.precision import compute_device, resolve_precision
from fedvote.models.semi_supervised import (
    SEMI_SUPERVISED_METHODS,
    ConsistencySettings,
    relabel_pool,
    train_consistency,
)
from fedvote.models.training import TrainingConfig, fit_classifier
from fedvote.models.zoo import CNN_WIDTHS, build_model
from fedvote.progress import NO_PROGRESS, Progress

# FixMatch's strong views (rotation, shear, cutout) keep a 28x28 digit's identity, not an
# 8x8 one's: on digits (8x8) VAT scored 0.92 against FixMatch's 0.84, on MNIST FixMatch
# 0.96 against VAT's 0.90 (experiments/student_choice.py).
FIXMATCH_MIN_SIDE = 16


def resolve_student_training(name: str, example_shape: tuple[int, ...]) -> str:
    """``"auto"`` becomes ``"fixmatch"`` for images (channels, h, w) of at least 16x16, else ``"vat"``."""
    check_student_training(name)
    if name != "auto":
        return name
    large_image = len(example_shape) == 3 and min(example_shape[1:]) >= FIXMATCH_MIN_SIDE
    return "fixmatch" if large_image else "vat"


def train_student(
    features: np.ndarray,
    pseudo_labels: np.ndarray,
    *,
    num_classes: int,
    config: TrainingConfig,
    seed: int,
    unlabeled: np.ndarray | None = None,
    semi_supervised: str = "auto",
    self_training_rounds: int = 2,
    confidence: float = 0.9,
    consistency: ConsistencySettings | None = None,
    device: torch.device | str = "auto",
    progress: Progress = NO_PROGRESS,
) -> nn.Module:
    """A fresh ``config.model`` trained on (features, pseudo_labels) and the unlabelled pool; on the CPU.

    Parameters
    ----------
    features, pseudo_labels : np.ndarray
        Queries (Q, *shape) and their released labels (Q,).
    unlabeled : np.ndarray or None
        Public points without labels (U, *shape); None (or empty) trains on the labels alone.
    semi_supervised : str
        One of :data:`STUDENT_TRAINING` (``"auto"``: FixMatch for images of at least
        16x16, else VAT).
    self_training_rounds : int
        ``"self-training"`` only: rounds of predict ``unlabeled``, keep predictions with
        softmax ≥ ``confidence``, retrain a fresh model on the union.
    consistency : ConsistencySettings or None
        FixMatch's and VAT's knobs (None: their defaults; experiments vary them).
    device : torch.device or str
        Where FixMatch and VAT train: ``"auto"`` is CUDA when PyTorch sees a GPU that
        multiplies in the resolved precision, else the CPU. Every random draw stays on the
        CPU generator; the other students train on the CPU; the student is returned on the CPU.
    progress : Progress
        Shows each training pass (FixMatch's or VAT's a tick a step; a plain or self-training fit
        as one step each).

    """
    generator = torch.Generator().manual_seed(seed)
    shape = tuple(features.shape[1:])
    method = resolve_student_training(semi_supervised, shape)

    def fresh(cnn_widths: tuple[int, int] = CNN_WIDTHS) -> nn.Module:
        return build_model(config.model, shape, num_classes, cnn_widths=cnn_widths, generator=generator)

    no_pool = unlabeled is None or unlabeled.shape[0] == 0
    if method in SEMI_SUPERVISED_METHODS and not no_pool and features.shape[0] > 0:
        assert unlabeled is not None
        # Decided once, on the whole pool, for the first student and every round's.
        settings = (consistency or ConsistencySettings()).resolved(unlabeled)
        rounds = settings.relabel_rounds if method == "fixmatch" else 0
        where = compute_device(device, resolve_precision(config.precision, shape))
        student = train_consistency(
            fresh(), features, pseudo_labels, unlabeled, config, generator, method=method, settings=settings,
            step_fraction=settings.relabeller_step_fraction if rounds else 1.0, device=where,
            progress=progress, description=f"training the student ({method})",
        )  # fmt: skip
        for round_number in range(rounds):
            pool = relabel_pool(
                student,
                features,
                pseudo_labels,
                unlabeled,
                confidence=settings.relabel_confidence,
                min_unlabeled=settings.unlabeled_ratio * config.batch_size,
            )
            if pool.added == 0:
                break
            student = train_consistency(
                fresh(settings.relabel_cnn_widths), pool.features, pool.labels, pool.unlabeled, config,
                generator, method=method, settings=settings, device=where, progress=progress,
                description=f"training the student ({method}, self-training round {round_number + 1})",
            )  # fmt: skip
        return student.cpu()
    with progress.step("training the student", total=1) as bar:
        student = fit_classifier(fresh(), features, pseudo_labels, config, generator)
        bar.advance()
    if method != "self-training" or no_pool:
        return student
    assert unlabeled is not None
    for _ in range(self_training_rounds):
        with torch.no_grad():
            probs = torch.softmax(student(torch.as_tensor(unlabeled, dtype=torch.float32)), dim=1)
        best, guessed = probs.max(dim=1)  # (U,), (U,)
        keep = (best >= confidence).numpy()
        if not keep.any():
            break
        with progress.step("training the student (self-training round)", total=1) as bar:
            student = fit_classifier(
                fresh(),
                np.concatenate([features, unlabeled[keep]]),
                np.concatenate([pseudo_labels, guessed.numpy()[keep].astype(np.int64)]),
                config,
                generator,
            )
            bar.advance()
    return student
