"""The plain (non-private) training loop shared by teachers and the student."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from fedvote.models.config import TrainingConfig, resolve_augment
from fedvote.models.crop_flip import random_crop_flip
from fedvote.models.precision import resolve_precision, training_arithmetic
from fedvote.models.zoo import resolve_model_name


def fit_classifier(
    model: nn.Module,
    features: np.ndarray,
    labels: np.ndarray,
    config: TrainingConfig,
    generator: torch.Generator,
) -> nn.Module:
    """Train ``model`` in place with Adam and cross-entropy; returns it in eval mode.

    Every epoch visits the training records in a fresh ``randperm`` order drawn from
    ``generator``, in mini-batches of ``config.batch_size`` (the last may be smaller).
    With early stopping (``config.patience``), ``generator`` first draws the split:
    the first ``config.validation_size(n)`` records of one ``randperm(n)`` are held out,
    the rest (in their original order) are trained on; after every epoch the mean
    cross-entropy on the held-out records is measured, training stops after
    ``patience`` epochs without a strictly lower one, and the model ends with the
    weights of its best epoch. Each step's forward runs at ``config.precision``
    (:mod:`fedvote.models.precision`); the validation loss is measured in float32.
    """
    x = torch.as_tensor(features, dtype=torch.float32)  # (n, *shape)
    y = torch.as_tensor(labels, dtype=torch.int64)  # (n,)
    n_val = config.validation_size(x.shape[0])
    x_val = y_val = None
    if n_val:
        split = torch.randperm(x.shape[0], generator=generator)
        train_rows = split[n_val:].sort().values
        x_val, y_val = x[split[:n_val]], y[split[:n_val]]  # (n_val, *shape), (n_val,)
        x, y = x[train_rows], y[train_rows]  # (n - n_val, *shape), (n - n_val,)
    optimizer = torch.optim.Adam(
        model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    loss_fn = nn.CrossEntropyLoss()
    arithmetic = resolve_precision(config.precision, tuple(x.shape[1:]))
    shape = tuple(x.shape[1:])
    crop_flip = x.dim() == 4 and resolve_augment(
        config.augment, resolve_model_name(config.model, shape), shape
    ) == "crop-flip"  # fmt: skip
    model.train()
    n = x.shape[0]
    best_loss = math.inf
    best_state: dict[str, torch.Tensor] | None = None
    epochs_without_improvement = 0
    for _ in range(config.planned_epochs):
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, config.batch_size):
            batch = order[start : start + config.batch_size]
            inputs = x[batch]
            if config.augment_shift and inputs.dim() == 4:  # (B, C, H, W): random shift
                dy, dx = torch.randint(
                    -config.augment_shift, config.augment_shift + 1, (2,), generator=generator
                ).tolist()
                inputs = torch.roll(inputs, shifts=(dy, dx), dims=(2, 3))
            if crop_flip:  # (B, C, H, W): each image its own crop and flip (fedvote.models.crop_flip)
                inputs = random_crop_flip(inputs, generator)
            optimizer.zero_grad(set_to_none=True)
            with training_arithmetic(arithmetic):
                logits = model(inputs).float()  # (B, C)
            loss_fn(logits, y[batch]).backward()
            optimizer.step()
        if x_val is None or y_val is None or config.patience is None:
            continue
        model.eval()
        with torch.no_grad():
            val_loss = float(loss_fn(model(x_val), y_val))
        model.train()
        if val_loss < best_loss:
            best_loss, epochs_without_improvement = val_loss, 0
            best_state = {name: value.detach().clone() for name, value in model.state_dict().items()}
        else:
            epochs_without_improvement += 1
            if epochs_without_improvement >= config.patience:
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return model


@torch.no_grad()
def predict_labels(model: nn.Module, features: np.ndarray, batch_size: int = 4096) -> np.ndarray:
    """Argmax predictions (n,) int64 of ``model`` on ``features``."""
    model.eval()
    x = torch.as_tensor(features, dtype=torch.float32)
    out = [model(x[i : i + batch_size]).argmax(dim=1) for i in range(0, x.shape[0], batch_size)]
    if not out:
        return np.zeros(0, dtype=np.int64)
    return torch.cat(out).numpy().astype(np.int64)
