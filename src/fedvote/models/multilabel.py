"""Multi-label models: A sigmoid logits, trained with binary cross-entropy (BCE).

* :class:`AttributeHead` wraps a model of A logits so that its argmax *is* the task's
  encoded label (:class:`~fedvote.data.attributes.AttributeTask`), which is what the
  runner's measurement and the teachers' diagnostics read through ``predict_labels``;
* :func:`fit_attributes` — the teachers' and the student's training (Adam, as
  :func:`fedvote.models.training.fit_classifier`, with BCE over the A attributes);
* :func:`bce_sgd_steps` — plain mini-batch SGD with BCE (DP-FedAvg's local steps, as
  :func:`fedvote.models.local_training.sgd_steps` with the loss changed);
* :func:`attribute_probabilities` — sigmoid of the logits, (n, A);
* :class:`MultiLabelLocalTraining` — a DP-FedAvg round's local training, on A attributes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedvote.data.attributes import AttributeTask
from fedvote.errors import ConfigError
from fedvote.models.config import TrainingConfig
from fedvote.models.local_training import LocalTraining, sgd_steps
from fedvote.models.precision import resolve_precision, training_arithmetic


class AttributeHead(nn.Module):
    """A model of A attribute logits whose forward gives what ``predict_labels`` argmaxes.

    Bitmask task: (batch, 2^A) joint log-probabilities log Π_a p_a^{y_a}(1 − p_a)^{1−y_a} of
    every label set y (p = sigmoid of the logits); they are normalised, and their argmax is
    the label set of the attributes with p_a > 1/2. One-hot task: the A logits themselves.
    :meth:`attribute_logits` gives the A logits (the multi-label model's own output).
    """

    def __init__(self, model: nn.Module, task: AttributeTask) -> None:
        super().__init__()
        self.model = model
        self.task = task
        a = task.num_attributes
        codes = torch.arange(2**a if task.encoding == "bitmask" else 1)
        bits = ((codes[:, None] >> torch.arange(a)[None, :]) & 1).float()  # (2^A, A): bit a of set c
        self.register_buffer("bits", bits, persistent=False)

    def attribute_logits(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, A) logits of the attributes."""
        return self.model(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, 2^A) joint log-probabilities (bitmask), or (batch, A) logits (one-hot)."""
        logits = self.model(x)  # (batch, A)
        if self.task.encoding == "one-hot":
            return logits
        log_on = nn.functional.logsigmoid(logits)  # (batch, A)
        log_off = nn.functional.logsigmoid(-logits)
        bits: torch.Tensor = self.bits  # type: ignore[assignment]
        return log_on @ bits.T + log_off @ (1.0 - bits).T  # (batch, 2^A)


@torch.no_grad()
def attribute_probabilities(model: nn.Module, features: np.ndarray, batch_size: int = 4096) -> np.ndarray:
    """Sigmoid of ``model``'s A logits on ``features`` (n, *shape), (n, A) float64.

    ``model`` is an :class:`AttributeHead` (its :meth:`~AttributeHead.attribute_logits`) or a
    bare model of A logits.
    """
    model.eval()
    forward = model.attribute_logits if isinstance(model, AttributeHead) else model
    x = torch.as_tensor(features, dtype=torch.float32)
    out = [torch.sigmoid(forward(x[i : i + batch_size])) for i in range(0, x.shape[0], batch_size)]
    if not out:
        return np.zeros((0, 0), dtype=np.float64)
    return torch.cat(out).double().numpy()


def fit_attributes(
    model: nn.Module,
    features: np.ndarray,
    targets: np.ndarray,
    config: TrainingConfig,
    generator: torch.Generator,
) -> nn.Module:
    """Train ``model`` (A logits) in place on 0/1 ``targets`` (n, A) with Adam and BCE; eval mode.

    As :func:`fedvote.models.training.fit_classifier` (``config``'s epochs, batch size, step
    size and weight decay; a fresh ``randperm`` order per epoch from ``generator``), with the
    mean binary cross-entropy over the attributes as the loss, each step's forward at
    ``config.precision``. No early stopping and no augmentation (``patience`` and
    ``augment_shift`` do not apply here).
    """
    x = torch.as_tensor(features, dtype=torch.float32)  # (n, *shape)
    y = torch.as_tensor(targets, dtype=torch.float32)  # (n, A)
    optimizer = torch.optim.Adam(
        model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    loss_fn = nn.BCEWithLogitsLoss()
    arithmetic = resolve_precision(config.precision, tuple(x.shape[1:]))
    model.train()
    n = x.shape[0]
    for _ in range(config.planned_epochs if n else 0):
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, config.batch_size):
            batch = order[start : start + config.batch_size]
            optimizer.zero_grad(set_to_none=True)
            with training_arithmetic(arithmetic):
                logits = model(x[batch]).float()  # (B, A)
            loss_fn(logits, y[batch]).backward()
            optimizer.step()
    return model.eval()


def bce_sgd_steps(
    model: nn.Module,
    features: np.ndarray,
    targets: np.ndarray,
    *,
    steps: int,
    learning_rate: float,
    batch_size: int,
    generator: torch.Generator,
) -> nn.Module:
    """``steps`` iterations of plain mini-batch SGD with BCE on ``targets`` (n, A), in place.

    :func:`fedvote.models.local_training.sgd_steps` with the loss changed: the same
    mini-batches (:func:`~fedvote.models.local_training.minibatch_rows` from ``generator``).
    With no records the model is left as it is.
    """
    return sgd_steps(
        model, features, targets, steps=steps, learning_rate=learning_rate, batch_size=batch_size,
        generator=generator, loss_fn=nn.BCEWithLogitsLoss(),
    )  # fmt: skip


@dataclass(frozen=True)
class MultiLabelLocalTraining(LocalTraining):
    """A round of local training on A attributes with BCE (multi-label DP-FedAvg).

    :class:`~fedvote.models.local_training.LocalTraining` plus the ``task`` that turns an
    agent's int labels into its (n, A) targets; θ is a model of A logits. Plain SGD only
    (``dp_sgd`` must be None). Clip, noise share and exit are those of every update.
    """

    task: AttributeTask | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task is None:
            raise ConfigError("task", "a multi-label round needs the attribute task")
        if self.dp_sgd is not None:
            raise ConfigError("dp_sgd", "multi-label local training runs plain SGD only")
