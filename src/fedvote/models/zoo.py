"""Models chosen by name: logistic regression, a one-hidden-layer MLP, a small CNN, and two for RGB images.

The RGB ones are the TensorFlow-tutorial CNN (:mod:`~fedvote.models.cifar_cnn`) and ResNet-8
(:mod:`~fedvote.models.resnet`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from fedvote.errors import ConfigError
from fedvote.models.cifar_cnn import TutorialCNN
from fedvote.models.config import MODEL_NAMES, image_model
from fedvote.models.pooling import is_max_pool_2x2, max_pool_2x2
from fedvote.models.resnet import ResNet8

# SmallCNN's channels per block by default (CNN teachers', the first student's).
CNN_WIDTHS: tuple[int, int] = (16, 32)


def resolve_model_name(name: str, example_shape: tuple[int, ...]) -> str:
    """``"auto"`` becomes a CNN for images (channels, h, w) of at least 8x8, else ``"mlp"``.

    The CNN is :func:`~fedvote.models.config.image_model`'s: the small ``"cnn"`` for every image
    shape (``"cifar-cnn"`` and ``"resnet8"`` by name).
    """
    if name != "auto":
        return name
    is_image = len(example_shape) == 3 and min(example_shape[1:]) >= 8
    return image_model(example_shape) if is_image else "mlp"


def build_model(
    name: str,
    example_shape: tuple[int, ...],
    num_classes: int,
    *,
    hidden: int = 128,
    cnn_widths: tuple[int, int] | None = None,
    generator: torch.Generator | None = None,
) -> nn.Module:
    """A fresh classifier mapping (batch, *example_shape) to (batch, num_classes) logits.

    ``name`` is one of :data:`MODEL_NAMES`; ``"auto"`` picks by example shape
    (:func:`resolve_model_name`). ``hidden``: the MLP's hidden units; ``cnn_widths``: the
    small CNN's channels per block (default :data:`CNN_WIDTHS`; the other networks have fixed widths).

    ``generator`` seeds the initial weights so that teachers are reproducible.
    """
    if name not in MODEL_NAMES:
        raise ConfigError("model", f"unknown model {name!r}; choose from {', '.join(MODEL_NAMES)}")
    name = resolve_model_name(name, example_shape)
    in_features = math.prod(example_shape)
    if name == "logistic":
        model: nn.Module = nn.Sequential(nn.Flatten(), nn.Linear(in_features, num_classes))
    elif name == "mlp":
        model = nn.Sequential(
            nn.Flatten(),
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )
    elif name == "cifar-cnn":
        model = TutorialCNN(example_shape, num_classes)
    elif name == "resnet8":
        model = ResNet8(example_shape, num_classes)
    else:
        if len(example_shape) != 3:
            raise ConfigError(
                "model", f"'cnn' needs image-shaped examples (channels, h, w), got {example_shape}"
            )
        model = SmallCNN(example_shape, num_classes, widths=cnn_widths or CNN_WIDTHS)
    if generator is not None:
        _reset_parameters(model, generator)
    return model


class SmallCNN(nn.Module):
    """Two 3x3 conv blocks (``widths`` channels: 16, 32 by default) with 2x2 pooling, then a linear head.

    Each block pools before its ReLU: ``relu(max(a)) = max(relu(a))``, and the gradient
    reaches the window's maximum in both orders exactly when it is positive, so this is the
    usual conv-ReLU-pool network with the ReLU on a quarter of the elements. Weights and
    activations are channels-last, where PyTorch's CPU max-pooling and convolutions are
    fastest: a training step of 256 MNIST images took 10 ms against 21 ms for the contiguous
    conv-ReLU-pool form (2-core AMD EPYC).
    """

    def __init__(
        self, example_shape: tuple[int, ...], num_classes: int, *, widths: tuple[int, int] = CNN_WIDTHS
    ) -> None:
        super().__init__()
        channels, height, width = example_shape
        first, second = widths
        self.features = nn.Sequential(
            nn.Conv2d(channels, first, 3, padding=1),
            nn.MaxPool2d(2),
            nn.ReLU(),
            nn.Conv2d(first, second, 3, padding=1),
            nn.MaxPool2d(2),
            nn.ReLU(),
        )
        for layer in self.features:
            if isinstance(layer, nn.Conv2d):  # kernels (out, in, kh, kw) stored channels-last
                # ``to``, not ``contiguous``: with one input channel the contiguous kernel already
                # counts as channels-last and ``contiguous`` keeps its strides, and convolutions then
                # run the (slower) NCHW path.
                kernels = layer.weight.detach().to(memory_format=torch.channels_last)
                layer.weight = nn.Parameter(kernels)
        flat = second * (height // 4) * (width // 4)
        self.head = nn.Linear(flat, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (batch, classes) for images (batch, channels, h, w).

        A forward that autograd does not record pools by :func:`max_pool_2x2` (the same
        values, without the indices only a backward reads).
        """
        # ``to``, not ``contiguous``: a one-channel batch already counts as channels-last and
        # ``contiguous`` keeps its strides, and the first convolution then took 2.9 ms against
        # 1.7 ms for 256 MNIST images (bfloat16, 2-core AMD EPYC), as for the kernels above.
        h = x.to(memory_format=torch.channels_last)
        if self._recorded(x):
            h = self.features(h)
        else:
            for layer in self.features:
                h = max_pool_2x2(h) if is_max_pool_2x2(layer) else layer(h)
        return self.head(torch.flatten(h, 1))

    def _recorded(self, x: torch.Tensor) -> bool:
        """Whether autograd records this forward (a gradient may flow to ``x`` or a parameter)."""
        if not torch.is_grad_enabled():
            return False
        return x.requires_grad or any(parameter.requires_grad for parameter in self.parameters())


def initial_draws(model: nn.Module) -> list[tuple[torch.Tensor, float]]:
    """Each parameter :func:`_reset_parameters` draws, in its order, with its bound ±1/√fan-in."""
    draws: list[tuple[torch.Tensor, float]] = []
    for module in model.modules():
        if isinstance(module, nn.Linear | nn.Conv2d):
            bound = 1.0 / math.sqrt(module.weight[0].numel())
            draws.append((module.weight, bound))
            if module.bias is not None:
                draws.append((module.bias, bound))
    return draws


def _reset_parameters(model: nn.Module, generator: torch.Generator) -> None:
    """Kaiming-uniform weights and uniform biases (PyTorch's defaults) drawn from ``generator``."""
    with torch.no_grad():
        for parameter, bound in initial_draws(model):
            # Drawn in logical order, then copied: the same weights whatever the layout.
            parameter.copy_(torch.empty(parameter.shape).uniform_(-bound, bound, generator=generator))
