"""ResNet-8, the small residual network FedAUX trains on CIFAR-10 (fedaux-fdp.txt, Table 4).

A 3x3 stem convolution (16 channels) and three stages of one basic residual block each
(16, 32, 64 channels; the last two halve the side with a stride-2 convolution and a 1x1
projection shortcut), then global average pooling and the class layer: 1 + 3 * 2 + 1 = 8
weighted layers (He et al. 2016, the CIFAR family 6n + 2 with n = 1). About 78k parameters.

Normalisation is GroupNorm without affine parameters in place of BatchNorm: it normalises each
example on its own, so a model's output on one record never depends on the other records of its
mini-batch (what per-example privacy arguments and DP-SGD need), it holds no running buffers
(every state of the model is a parameter, so the batched trainer stacks it like any other), and
the only parameters left are convolution and linear weights, which
:func:`fedvote.models.zoo.build_model` draws from the agent's generator like the other models'.

Batched across agents: :func:`fedvote.models.ensemble.fit_ensemble` trains all agents' ResNets
at once by ``torch.func.vmap`` over ``functional_call`` (its general path, which PyTorch runs
as grouped convolutions); the hand-written channels-last stack of
:mod:`fedvote.models.stacked_conv` covers only Conv/ReLU/MaxPool/Flatten/Linear sequences.
"""

from __future__ import annotations

import torch
from torch import nn

from fedvote.errors import ConfigError

# Channels of the stem and the three stages.
WIDTHS: tuple[int, int, int] = (16, 32, 64)
# GroupNorm groups per normalisation (each group then holds 4, 8 or 16 channels' statistics).
GROUPS = 4
# Two stride-2 stages: a side of at least 4 keeps a 1x1 map before the pooling.
MIN_SIDE = 4


def _norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(GROUPS, channels, affine=False)


class BasicBlock(nn.Module):
    """relu(norm(conv(relu(norm(conv(x))))) + shortcut(x)); the shortcut projects when the shape changes."""

    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride=stride, padding=1, bias=False)
        self.norm1 = _norm(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, padding=1, bias=False)
        self.norm2 = _norm(outputs)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or inputs != outputs:
            projection = nn.Conv2d(inputs, outputs, 1, stride=stride, bias=False)
            self.shortcut = nn.Sequential(projection, _norm(outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, inputs, H, W) -> (B, outputs, H / stride, W / stride)."""
        h = torch.relu(self.norm1(self.conv1(x)))
        h = self.norm2(self.conv2(h))
        return torch.relu(h + self.shortcut(x))


class ResNet8(nn.Module):
    """ResNet-8 for (C, H, W) images: stem, three one-block stages, global average pooling, linear head."""

    def __init__(self, example_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        if len(example_shape) != 3 or min(example_shape[1:]) < MIN_SIDE:
            raise ConfigError(
                "model", f"'resnet8' needs images (channels, h, w) of at least {MIN_SIDE}x{MIN_SIDE}, "
                f"got {example_shape}",
            )  # fmt: skip
        first, second, third = WIDTHS
        self.stem = nn.Sequential(nn.Conv2d(example_shape[0], first, 3, padding=1, bias=False), _norm(first))
        self.stages = nn.Sequential(
            BasicBlock(first, first, 1),  # (B, 16, H, W)
            BasicBlock(first, second, 2),  # (B, 32, H/2, W/2)
            BasicBlock(second, third, 2),  # (B, 64, H/4, W/4)
        )
        self.head = nn.Linear(third, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (B, classes) for images (B, C, H, W)."""
        h = self.stages(torch.relu(self.stem(x)))
        return self.head(h.mean(dim=(2, 3)))  # global average pooling: (B, 64)
