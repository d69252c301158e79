"""DANN (fedvote.models.dann): the gradient-reversal sign, λ's schedule, and adaptation on a toy shift."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from fedvote.errors import ConfigError
from fedvote.models.config import TrainingConfig
from fedvote.models.dann import (
    DannConfig,
    adaptation_weight,
    check_dann_training,
    fit_dann,
    reverse_gradient,
    split_classifier,
)
from fedvote.models.training import fit_classifier, predict_labels
from fedvote.models.zoo import build_model


@pytest.mark.parametrize("scale", [0.0, 0.25, 1.0, 3.0])
def test_the_reversal_layer_is_the_identity_forward_and_negates_the_gradient(scale):
    x = torch.randn(4, 3, requires_grad=True)
    weights = torch.randn(4, 3)
    out = reverse_gradient(x, scale)
    assert torch.equal(out, x)
    (out * weights).sum().backward()
    # d/dx of sum(w * x) is w; reversed and scaled: -scale * w.
    torch.testing.assert_close(x.grad, -scale * weights)


def test_through_a_network_the_reversed_gradient_is_the_plain_one_negated():
    torch.manual_seed(0)
    layer, critic = nn.Linear(3, 5), nn.Linear(5, 1)
    x = torch.randn(6, 3)
    critic(layer(x)).sum().backward()
    plain = layer.weight.grad.clone()
    layer.zero_grad()
    critic(reverse_gradient(layer(x), 0.5)).sum().backward()
    torch.testing.assert_close(layer.weight.grad, -0.5 * plain)


def test_lambda_follows_ganins_schedule():
    # 2 / (1 + exp(-10 p)) - 1 is tanh(5 p): an independent closed form.
    for p in np.linspace(0.0, 1.0, 11):
        assert adaptation_weight(float(p)) == pytest.approx(math.tanh(5.0 * p), abs=1e-12)
    assert adaptation_weight(0.0) == 0.0 and adaptation_weight(1.0) > 0.9999
    with pytest.raises(ValueError):
        adaptation_weight(1.5)


@pytest.mark.parametrize(("name", "shape"), [("mlp", (1, 8, 8)), ("cnn", (1, 8, 8))])
def test_the_split_composes_to_the_classifier(name, shape):
    model = build_model(name, shape, 10, generator=torch.Generator().manual_seed(1))
    features, head = split_classifier(model)
    x = torch.rand(5, *shape)
    torch.testing.assert_close(head(features(x)), model(x))
    assert {id(p) for p in [*features.parameters(), *head.parameters()]} == {id(p) for p in model.parameters()}


def test_logistic_teachers_early_stopping_and_augmentation_are_refused_by_name():
    with pytest.raises(ConfigError, match="^teacher_model: .*mlp or cnn"):
        split_classifier(build_model("logistic", (4,), 2))
    with pytest.raises(ConfigError, match="^teacher_model: "):
        check_dann_training(TrainingConfig(model="logistic"))
    with pytest.raises(ConfigError, match="^teacher_da: .*early stopping"):
        check_dann_training(TrainingConfig(validation_fraction=0.1, patience=2))
    with pytest.raises(ConfigError, match="^teacher_da: .*augment"):
        check_dann_training(TrainingConfig(augment_shift=1))


def _two_domains(seed: int) -> tuple[np.ndarray, ...]:
    """A source where x2 is as predictive as x1, a target where x2 sits elsewhere and says nothing.

    A plain classifier leans on x2 and calls every target point class 1 (about half right);
    a representation that cannot tell the domains apart must drop x2 and keep x1, which
    separates the classes in both domains.
    """
    rng = np.random.default_rng(seed)

    def domain(target: bool) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 2, 300)
        x1 = (2 * y - 1) * 2.0 + rng.normal(0, 0.5, 300)
        x2 = rng.normal(6, 0.5, 300) if target else (2 * y - 1) * 2.0 + rng.normal(0, 0.5, 300)
        return np.stack([x1, x2], 1).astype(np.float32), y

    return (*domain(False), *domain(True))


def test_a_dann_teacher_beats_a_plain_one_on_the_target_domain():
    config = TrainingConfig(model="mlp", epochs=30, batch_size=32, learning_rate=1e-2)
    dann = DannConfig(domain_weight=3.0, domain_rate=0.03)
    plain_scores, dann_scores = [], []
    for seed in (0, 1, 2):
        xs, ys, xt, yt = _two_domains(seed)
        plain = fit_classifier(build_model("mlp", (2,), 2, generator=torch.Generator().manual_seed(seed)),
                               xs, ys, config, torch.Generator().manual_seed(seed))
        generator = torch.Generator().manual_seed(seed)
        adapted = fit_dann(build_model("mlp", (2,), 2, generator=generator), xs, ys, xt, config, generator, dann)
        plain_scores.append(np.mean(predict_labels(plain, xt) == yt))
        dann_scores.append(np.mean(predict_labels(adapted, xt) == yt))
        assert np.mean(predict_labels(adapted, xs) == ys) > 0.95  # the source task is kept
    assert max(plain_scores) < 0.6
    assert np.mean(dann_scores) >= np.mean(plain_scores) + 0.25, (plain_scores, dann_scores)


def test_with_no_domain_weight_dann_trains_the_classifier_only():
    xs, ys, xt, _ = _two_domains(0)
    config = TrainingConfig(model="mlp", epochs=3)
    generator = torch.Generator().manual_seed(0)
    model = fit_dann(build_model("mlp", (2,), 2, generator=generator), xs, ys, xt, config, generator,
                     DannConfig(domain_weight=0.0))
    assert np.mean(predict_labels(model, xs) == ys) > 0.95
    with pytest.raises(ConfigError, match="^teacher_da: "):
        fit_dann(build_model("mlp", (2,), 2), xs, ys, xt[:0], config, torch.Generator())
