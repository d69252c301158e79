"""Domain-adversarial training (DANN; Ganin et al. 2016, "Domain-adversarial training of neural networks").

The voting paper's PATE-FL+DA (Section 5.1, digits across domains) trains each agent's
teacher this way against the public domain: a feature extractor G_f, a label head G_y and
a domain classifier G_d behind a gradient-reversal layer (GRL). With source records
(x, y) (the agent's private ones) and target records x_t (the public unlabelled pool),
one step minimises

    L = CE(G_y(G_f(x)), y) + BCE(G_d(R_λ(G_f(x))), 0) + BCE(G_d(R_λ(G_f(x_t))), 1)

where R_λ is the identity forward and multiplies the gradient by −λ backward (Ganin et
al., eq. 9-13): G_d learns to tell the domains apart while G_f learns features it cannot,
so the label head trained on the source transfers to the target. λ follows the paper's
schedule λ_p = 2 / (1 + exp(−γ·p)) − 1 with γ = 10 and p the fraction of training done
(Ganin et al., Section 5.2.2), times ``domain_weight`` (default 1, the paper's).

G_d learns at ``domain_rate`` (default 0.1) times the teacher's learning rate. With Adam
for both at one rate, G_d (a fresh classifier on easily separable features) won the game
outright: its gradient is ~70x G_f's, the features never became domain-invariant, and on
agents of a few hundred syndigits records the teachers collapsed to chance at weight 1
(measured for issue 20: syndigits agents' USPS accuracy 0.55/0.65 plain, 0.13/0.10 DANN at
rate 1, 0.51/0.63 vs 0.49/0.58 plain at rate 0.1 on two other agents).

The teacher is a model of :mod:`fedvote.models.zoo` split at its last linear layer (G_f
everything before it, G_y the layer): an MLP's hidden layer or a CNN's convolutions are the
features; logistic regression has none and is refused. After training the zoo model itself
(G_y ∘ G_f) is the teacher, the domain classifier is dropped. Optimiser, batch size,
epochs and weight decay are the plain teachers' (:class:`~fedvote.models.config.TrainingConfig`,
Adam); every epoch is trained (no early stopping: a held-out *source* loss says nothing of
the target).

Only the public pool is read beyond the agent's own records: accounting is unchanged
(``docs/privacy.md``, "Domain-adapted teachers").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from fedvote.errors import ConfigError
from fedvote.models.config import TrainingConfig
from fedvote.models.zoo import SmallCNN, _reset_parameters


class _GradientReversal(torch.autograd.Function):
    """R_λ: identity forward, gradient times −λ backward (Ganin et al. 2016, eq. 9-10)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return -ctx.scale * grad, None


def reverse_gradient(x: torch.Tensor, scale: float) -> torch.Tensor:
    """``x`` unchanged; the gradient flowing back through it is multiplied by ``-scale``."""
    return _GradientReversal.apply(x, float(scale))


def adaptation_weight(progress: float, gamma: float = 10.0) -> float:
    """λ_p = 2 / (1 + exp(−γ·p)) − 1 for training progress p in [0, 1] (Ganin et al., Sec. 5.2.2)."""
    if not 0.0 <= progress <= 1.0:
        raise ValueError(f"progress must lie in [0, 1], got {progress}")
    return 2.0 / (1.0 + math.exp(-gamma * progress)) - 1.0


def split_classifier(model: nn.Module) -> tuple[nn.Module, nn.Linear]:
    """(G_f, G_y) of a zoo classifier: everything before its last linear layer, and that layer.

    The parts share the model's parameters, so training them trains ``model``.
    """
    if isinstance(model, SmallCNN):
        return nn.Sequential(model.features, nn.Flatten()), model.head
    if isinstance(model, nn.Sequential) and isinstance(model[-1], nn.Linear):
        if any(isinstance(layer, nn.Linear) for layer in list(model)[:-1]):
            return model[:-1], model[-1]
    raise ConfigError(
        "teacher_model",
        "DANN adapts a hidden representation, which logistic regression lacks: use --teacher-model mlp "
        "or cnn",
    )


@dataclass(frozen=True)
class DannConfig:
    """DANN's own settings: the domain loss's weight at full schedule, G_d's width, γ, G_d's rate factor."""

    domain_weight: float = 1.0
    domain_hidden: int = 64
    gamma: float = 10.0
    domain_rate: float = 0.1

    def __post_init__(self) -> None:
        if not (self.domain_weight >= 0 and math.isfinite(self.domain_weight)):
            raise ConfigError("domain_weight", f"must be a finite number >= 0, got {self.domain_weight}")
        if self.domain_hidden < 1:
            raise ConfigError("domain_hidden", f"must be at least 1, got {self.domain_hidden}")
        if not self.gamma > 0:
            raise ConfigError("gamma", f"must be > 0, got {self.gamma}")
        if not self.domain_rate > 0:
            raise ConfigError("domain_rate", f"must be > 0, got {self.domain_rate}")


def check_dann_training(config: TrainingConfig) -> None:
    """Refuse teacher settings DANN does not apply (early stopping, shift augmentation), by name."""
    if config.early_stopping:
        raise ConfigError("teacher_da", "DANN teachers train every epoch: drop the teachers' early stopping")
    if config.augment_shift:
        raise ConfigError("teacher_da", "DANN teachers do not augment: drop --augment-shift")
    if config.model == "logistic":
        split_classifier(nn.Sequential(nn.Flatten(), nn.Linear(1, 1)))  # raises, naming the model


def domain_classifier(feature_dim: int, hidden: int, generator: torch.Generator) -> nn.Module:
    """G_d: (batch, feature_dim) -> (batch, 1) logit of "target domain"."""
    module = nn.Sequential(nn.Linear(feature_dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))
    _reset_parameters(module, generator)
    return module


def fit_dann(
    model: nn.Module,
    features: np.ndarray,
    labels: np.ndarray,
    target_features: np.ndarray,
    config: TrainingConfig,
    generator: torch.Generator,
    dann: DannConfig = DannConfig(),
) -> nn.Module:
    """Train ``model`` in place by DANN: source (``features``, ``labels``), unlabelled ``target_features``.

    Each epoch visits the source records in a fresh ``randperm`` order from ``generator``;
    each mini-batch of B source records is paired with B target records drawn uniformly
    (with replacement) from ``generator``. Returns ``model`` in eval mode.
    """
    check_dann_training(config)
    if len(target_features) == 0:
        raise ConfigError("teacher_da", "DANN needs public (target) records; the pool is empty")
    extractor, head = split_classifier(model)
    x = torch.as_tensor(features, dtype=torch.float32)  # (n, *shape)
    y = torch.as_tensor(labels, dtype=torch.int64)  # (n,)
    x_target = torch.as_tensor(target_features, dtype=torch.float32)  # (P, *shape)
    with torch.no_grad():
        feature_dim = int(extractor(x[:1]).shape[1])
    domain = domain_classifier(feature_dim, dann.domain_hidden, generator)
    groups: list[dict[str, Any]] = [
        {"params": list(model.parameters())},
        {"params": list(domain.parameters()), "lr": config.learning_rate * dann.domain_rate},
    ]
    optimizer = torch.optim.Adam(groups, lr=config.learning_rate, weight_decay=config.weight_decay)
    class_loss = nn.CrossEntropyLoss()
    domain_loss = nn.BCEWithLogitsLoss()
    n = x.shape[0]
    steps_per_epoch = math.ceil(n / config.batch_size)
    total = max(1, config.planned_epochs * steps_per_epoch)
    step = 0
    model.train()
    domain.train()
    for _ in range(config.planned_epochs):
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, config.batch_size):
            batch = order[start : start + config.batch_size]
            drawn = torch.randint(0, x_target.shape[0], (batch.shape[0],), generator=generator)
            scale = dann.domain_weight * adaptation_weight(step / total, dann.gamma)
            source_z = extractor(x[batch])  # (B, d)
            target_z = extractor(x_target[drawn])  # (B, d)
            domains = torch.cat([torch.zeros(batch.shape[0]), torch.ones(batch.shape[0])])  # (2B,)
            logits = domain(reverse_gradient(torch.cat([source_z, target_z]), scale))[:, 0]  # (2B,)
            loss = class_loss(head(source_z), y[batch]) + domain_loss(logits, domains)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
    model.eval()
    return model


class DannNet(nn.Module):
    """A classifier and its domain classifier G_d as one model: FedAvg+DA's global θ covers both.

    ``forward`` is the classifier's (the released model predicts with it); ``domain``
    is G_d on the classifier's features. Parameters: the classifier's, then G_d's.
    """

    def __init__(self, classifier: nn.Module, example_shape: tuple[int, ...], hidden: int,
                 generator: torch.Generator) -> None:
        super().__init__()
        self.classifier = classifier
        extractor, _ = split_classifier(classifier)
        with torch.no_grad():
            feature_dim = int(extractor(torch.zeros(1, *example_shape)).shape[1])
        self.domain = domain_classifier(feature_dim, hidden, generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits (batch, C)."""
        return self.classifier(x)


def dann_sgd_steps(
    net: DannNet,
    features: np.ndarray,
    labels: np.ndarray,
    target_features: np.ndarray,
    *,
    rows: list[torch.Tensor],
    scale: float,
    learning_rate: float,
    generator: torch.Generator,
) -> DannNet:
    """Plain SGD on the DANN loss, one step per mini-batch of ``rows``, in place (FedAvg+DA's local update).

    Each step pairs the source rows with as many target records drawn from ``generator``;
    the reversal scale λ is the round's (the server's schedule over rounds).
    """
    if not rows:
        return net.eval()
    extractor, head = split_classifier(net.classifier)
    x = torch.as_tensor(features, dtype=torch.float32)
    y = torch.as_tensor(labels, dtype=torch.int64)
    x_target = torch.as_tensor(target_features, dtype=torch.float32)
    optimizer = torch.optim.SGD(net.parameters(), lr=learning_rate)
    class_loss, domain_loss = nn.CrossEntropyLoss(), nn.BCEWithLogitsLoss()
    net.train()
    for batch in rows:
        drawn = torch.randint(0, x_target.shape[0], (batch.shape[0],), generator=generator)
        source_z, target_z = extractor(x[batch]), extractor(x_target[drawn])  # (B, d) each
        domains = torch.cat([torch.zeros(batch.shape[0]), torch.ones(batch.shape[0])])  # (2B,)
        logits = net.domain(reverse_gradient(torch.cat([source_z, target_z]), scale))[:, 0]  # (2B,)
        loss = class_loss(head(source_z), y[batch]) + domain_loss(logits, domains)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return net.eval()
