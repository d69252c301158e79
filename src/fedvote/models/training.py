"""The plain (non-private) training loop shared by teachers and the student."""

from __future__ import annotations

import math
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
    validation_fraction : float
        Early stopping: the fraction of a model's own training data held out, drawn
        from its seeded generator, to measure a validation loss after every epoch
        (:meth:`validation_size` records of n). 0 (default) holds nothing out.
    patience : int or None
        Early stopping: stop after this many epochs in a row without a strictly lower
        validation loss, and keep the weights of the epoch with the lowest one. ``None``
        (default) trains every epoch. Set both or neither; a dataset too small to spare
        a validation record (``validation_size(n) == 0``) trains every epoch on all of
        it. :func:`fit_classifier` and the batched
        :func:`fedvote.models.ensemble.fit_ensemble` apply the same rule per agent.

    """

    model: str = "mlp"
    epochs: int = 40
    batch_size: int = 32
    learning_rate: float = 1e-2
    weight_decay: float = 1e-4
    augment_shift: int = 0
    validation_fraction: float = 0.0
    patience: int | None = None

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
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ConfigError(
                "validation_fraction", f"must be in [0, 1), got {self.validation_fraction}"
            )
        if self.patience is not None and self.patience < 1:
            raise ConfigError("patience", f"must be at least 1 (or None), got {self.patience}")
        if (self.patience is None) != (self.validation_fraction == 0.0):
            raise ConfigError(
                "patience",
                "early stopping needs both validation_fraction > 0 and patience; got "
                f"validation_fraction={self.validation_fraction}, patience={self.patience}",
            )

    @property
    def early_stopping(self) -> bool:
        """Whether models hold out validation data and stop early (``patience`` set)."""
        return self.patience is not None

    def validation_size(self, num_records: int) -> int:
        """Records held out for validation from ``num_records``: floor(fraction · n)."""
        return int(math.floor(self.validation_fraction * num_records)) if self.early_stopping else 0


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
    weights of its best epoch.
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
    model.train()
    n = x.shape[0]
    best_loss = math.inf
    best_state: dict[str, torch.Tensor] | None = None
    epochs_without_improvement = 0
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
