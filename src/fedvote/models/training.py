"""The plain (non-private) training loop shared by teachers and the student."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedvote.errors import ConfigError
from fedvote.models.zoo import MODEL_NAMES


@dataclass(frozen=True)
class TrainingConfig:
    """How one model is trained: architecture and optimiser settings (Adam, mini-batches).

    Parameters
    ----------
    model : str
        ``"logistic"``, ``"mlp"``, ``"cnn"``, or ``"auto"`` (a CNN for images, else an MLP).
    epochs : int
        Passes over the training data.
    batch_size : int
        Mini-batch size (the last batch of an epoch may be smaller).
    learning_rate : float
        Adam step size.
    weight_decay : float
        L2 penalty (Adam's ``weight_decay``).
    augment_shift : int
        Images only: each mini-batch is shifted by a random (dy, dx) in
        [−augment_shift, augment_shift]² (circularly), a cheap augmentation for small
        labelled sets. 0 (default) trains on the data as is.

    """

    model: str = "mlp"
    epochs: int = 40
    batch_size: int = 32
    learning_rate: float = 1e-2
    weight_decay: float = 1e-4
    augment_shift: int = 0

    def __post_init__(self) -> None:
        if self.model not in MODEL_NAMES:
            raise ConfigError("model", f"unknown model {self.model!r}; choose from {', '.join(MODEL_NAMES)}")
        if self.epochs < 1:
            raise ConfigError("epochs", f"must be at least 1, got {self.epochs}")
        if self.batch_size < 1:
            raise ConfigError("batch_size", f"must be at least 1, got {self.batch_size}")
        if not self.learning_rate > 0:
            raise ConfigError("learning_rate", f"must be > 0, got {self.learning_rate}")
        if self.augment_shift < 0:
            raise ConfigError("augment_shift", f"must be >= 0, got {self.augment_shift}")
        if self.weight_decay < 0:
            raise ConfigError("weight_decay", f"must be >= 0, got {self.weight_decay}")


def fit_classifier(
    model: nn.Module,
    features: np.ndarray,
    labels: np.ndarray,
    config: TrainingConfig,
    generator: torch.Generator,
) -> nn.Module:
    """Train ``model`` in place with Adam and cross-entropy; returns it in eval mode."""
    x = torch.as_tensor(features, dtype=torch.float32)
    y = torch.as_tensor(labels, dtype=torch.int64)
    optimizer = torch.optim.Adam(
        model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    n = x.shape[0]
    for _ in range(config.epochs):
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, config.batch_size):
            batch = order[start : start + config.batch_size]
            inputs = x[batch]
            if config.augment_shift and inputs.dim() == 4:  # (B, C, H, W): random shift
                dy, dx = torch.randint(
                    -config.augment_shift, config.augment_shift + 1, (2,), generator=generator
                ).tolist()
                inputs = torch.roll(inputs, shifts=(dy, dx), dims=(2, 3))
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(inputs), y[batch]).backward()
            optimizer.step()
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
