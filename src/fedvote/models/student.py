"""The global student, trained on pseudo-labelled public queries (Algorithm 1, line 9).

Following the voting paper's Digit experiments (appendix: "a semi-supervised model is
trained using both labeled and pseudo-labeled data"), the student may also learn from
the unlabelled rest of the public pool by self-training: it labels the pool points it
is confident about and is retrained on them. The pool is public and the pseudo-labels
are already released, so this is post-processing and costs no privacy.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fedvote.models.training import TrainingConfig, fit_classifier
from fedvote.models.zoo import build_model


def train_student(
    features: np.ndarray,
    pseudo_labels: np.ndarray,
    *,
    num_classes: int,
    config: TrainingConfig,
    seed: int,
    unlabeled: np.ndarray | None = None,
    self_training_rounds: int = 2,
    confidence: float = 0.9,
) -> nn.Module:
    """A fresh ``config.model`` trained on (features, pseudo_labels), then self-trained.

    Parameters
    ----------
    features, pseudo_labels : np.ndarray
        Queries (Q, *shape) and their released labels (Q,).
    unlabeled : np.ndarray or None
        Public points without labels (U, *shape) for self-training; None to skip.
    self_training_rounds : int
        Rounds of: predict ``unlabeled``, keep predictions with softmax ≥ ``confidence``,
        retrain a fresh model on the union.

    """
    generator = torch.Generator().manual_seed(seed)

    def fit(x: np.ndarray, y: np.ndarray) -> nn.Module:
        model = build_model(config.model, tuple(x.shape[1:]), num_classes, generator=generator)
        return fit_classifier(model, x, y, config, generator)

    student = fit(features, pseudo_labels)
    if unlabeled is None or unlabeled.shape[0] == 0:
        return student
    for _ in range(self_training_rounds):
        with torch.no_grad():
            probs = torch.softmax(student(torch.as_tensor(unlabeled, dtype=torch.float32)), dim=1)
        best, guessed = probs.max(dim=1)  # (U,), (U,)
        keep = (best >= confidence).numpy()
        if not keep.any():
            break
        student = fit(
            np.concatenate([features, unlabeled[keep]]),
            np.concatenate([pseudo_labels, guessed.numpy()[keep].astype(np.int64)]),
        )
    return student
