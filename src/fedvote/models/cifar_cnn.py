"""The TensorFlow-tutorial CNN for 32x32 RGB images, as PriFedSync (Section 4.2) trains on CIFAR-10.

``conv32 - pool - conv64 - pool - conv64 - fc64 - fc10``: three 3x3 "valid" convolutions
(32, 64 and 64 channels, each followed by ReLU), 2x2 max-pooling after the first two, then a
64-unit ReLU layer and the class layer (federated-f-dp-prifedsync.txt, Section 4.2: "the CNN
model from the TensorFlow tutorial, like the previous work (McMahan et al., 2017; Hsu et al.,
2019)"; https://www.tensorflow.org/tutorials/images/cnn). On 3x32x32 inputs the activations go
32 -> 30 -> 15 -> 13 -> 6 -> 4, so the flattened features are 64 * 4 * 4 = 1024; about 122k
parameters for 10 classes.

It is a plain ``nn.Sequential`` of Conv2d / ReLU / MaxPool2d / Flatten / Linear on purpose:
:func:`fedvote.models.ensemble.fit_ensemble` then trains every agent's copy at once through
the stacked grouped convolutions of :mod:`fedvote.models.stacked_conv` (one channels-last
network of G models, backward by hand), exactly as it trains the MNIST
:class:`~fedvote.models.zoo.SmallCNN`, on the CPU and on a GPU.
"""

from __future__ import annotations

from torch import nn

from fedvote.errors import ConfigError

# Channels of the three convolutions and units of the hidden dense layer (the tutorial's).
CONV_CHANNELS: tuple[int, int, int] = (32, 64, 64)
HIDDEN_UNITS = 64
# Three valid 3x3 convolutions and two 2x2 poolings leave at least 1x1 from this side on.
MIN_SIDE = 18


def _after_convolutions(side: int) -> int:
    """The side the features have after conv - pool - conv - pool - conv (valid 3x3, pool 2)."""
    return ((side - 2) // 2 - 2) // 2 - 2


class TutorialCNN(nn.Sequential):
    """The TensorFlow-tutorial CNN (conv32-pool-conv64-pool-conv64-fc64-fc) for (C, H, W) images.

    Parameters
    ----------
    example_shape : tuple[int, ...]
        (channels, height, width); both sides at least :data:`MIN_SIDE` (CIFAR-10: (3, 32, 32)).
    num_classes : int
        Outputs of the last layer.

    """

    def __init__(self, example_shape: tuple[int, ...], num_classes: int) -> None:
        if len(example_shape) != 3 or min(example_shape[1:]) < MIN_SIDE:
            raise ConfigError(
                "model", f"'cifar-cnn' needs images (channels, h, w) of at least {MIN_SIDE}x{MIN_SIDE}, "
                f"got {example_shape}",
            )  # fmt: skip
        channels, height, width = example_shape
        first, second, third = CONV_CHANNELS
        flat = third * _after_convolutions(height) * _after_convolutions(width)
        super().__init__(
            nn.Conv2d(channels, first, 3),  # (B, 32, H-2, W-2)
            nn.ReLU(),
            nn.MaxPool2d(2),  # (B, 32, (H-2)/2, ...)
            nn.Conv2d(first, second, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(second, third, 3),  # (B, 64, 4, 4) for 32x32
            nn.ReLU(),
            nn.Flatten(),  # (B, 1024) for 32x32
            nn.Linear(flat, HIDDEN_UNITS),
            nn.ReLU(),
            nn.Linear(HIDDEN_UNITS, num_classes),  # (B, classes)
        )
