"""AttributeHead (its argmax is the encoded label) and the BCE trainers (fedvote.models.multilabel)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fedvote.data.attributes import AttributeTask
from fedvote.models.config import TrainingConfig
from fedvote.models.multilabel import AttributeHead, attribute_probabilities, fit_attributes
from fedvote.models.training import predict_labels

TASK = AttributeTask(("a", "b", "c", "d"), "bitmask")


class _Fixed(nn.Module):
    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits[x[:, 0].long()]


def test_joint_log_probabilities_are_normalised_and_match_a_product_of_bernoullis():
    logits = torch.randn(50, 4, generator=torch.Generator().manual_seed(0)) * 3
    head = AttributeHead(_Fixed(logits), TASK)
    joint = head(torch.arange(50, dtype=torch.float32)[:, None])  # (50, 16)
    np.testing.assert_allclose(torch.logsumexp(joint, dim=1).numpy(), 0.0, atol=1e-5)
    p = torch.sigmoid(logits).numpy()
    code = 0b1010  # b and d set
    expected = np.log((1 - p[:, 0]) * p[:, 1] * (1 - p[:, 2]) * p[:, 3])
    np.testing.assert_allclose(joint[:, code].numpy(), expected, rtol=1e-4, atol=1e-5)


def test_the_heads_argmax_is_the_bitmask_of_the_attributes_above_one_half():
    logits = torch.randn(200, 4, generator=torch.Generator().manual_seed(1)) * 2
    head = AttributeHead(_Fixed(logits), TASK)
    predicted = predict_labels(head, np.arange(200, dtype=np.float32)[:, None])
    np.testing.assert_array_equal(predicted, TASK.labels((logits > 0).numpy()))
    probabilities = attribute_probabilities(head, np.arange(200, dtype=np.float32)[:, None])
    np.testing.assert_allclose(probabilities, torch.sigmoid(logits).double().numpy(), rtol=1e-6)


def test_a_one_hot_head_passes_the_logits_through():
    task = AttributeTask.of((), 3)
    logits = torch.randn(5, 3)
    head = AttributeHead(_Fixed(logits), task)
    assert torch.equal(head(torch.arange(5, dtype=torch.float32)[:, None]), logits)


def test_fit_attributes_learns_separable_attributes_with_bce():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 6)).astype(np.float32)
    targets = np.stack([x[:, 0] > 0, x[:, 1] + x[:, 2] > 0, x[:, 5] < -0.5], axis=1).astype(np.float32)
    model = nn.Linear(6, 3)
    fit_attributes(model, x, targets, TrainingConfig(model="logistic", epochs=30), torch.Generator().manual_seed(0))
    predicted = attribute_probabilities(model, x) > 0.5
    assert (predicted == targets.astype(bool)).mean(axis=0).min() > 0.95
