"""The standard CIFAR augmentation in torch: a random crop of the zero-padded image and a horizontal flip.

Every image of a mini-batch gets its own offset (dy, dx) in [0, 2·pad]² into the image padded
by ``pad`` zero pixels on each side (a translation by up to ``pad`` pixels, what fills the
border being black) and, with probability 1/2, a left-right flip; the torchvision recipe
``RandomCrop(32, padding=4), RandomHorizontalFlip()`` written without torchvision (which does
not import here), applied to a whole batch at once by one gather.

Draws are made on the CPU from the caller's generator (so a model's training is reproducible
from its seed and does not depend on the device); :func:`augment_agents` draws each agent's
from that agent's own generator, as many as it has real records in the step, so the batched
teachers augment exactly as each agent's model alone (:func:`random_crop_flip` in
:func:`~fedvote.models.training.fit_classifier`) would.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

# Zero pixels added on each side before the crop (CIFAR's standard 4).
PAD = 4


def draw_crop_flip(
    count: int, generator: torch.Generator, pad: int = PAD
) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` offsets (count, 2) int64 in [0, 2·pad] (rows, columns) and flips (count,) bool."""
    offsets = torch.randint(0, 2 * pad + 1, (count, 2), generator=generator)
    flips = torch.rand(count, generator=generator) < 0.5
    return offsets, flips


def crop_flip(x: torch.Tensor, offsets: torch.Tensor, flips: torch.Tensor, pad: int = PAD) -> torch.Tensor:
    """Images ``x`` (N, C, H, W), each cropped at its offset from the padded image and flipped where asked.

    An offset of (pad, pad) without a flip returns the image unchanged.
    """
    n, _, height, width = x.shape
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))  # (N, C, H + 2p, W + 2p)
    offsets, flips = offsets.to(x.device), flips.to(x.device)
    rows = offsets[:, :1] + torch.arange(height, device=x.device)  # (N, H)
    columns = torch.arange(width, device=x.device).expand(n, width)  # (N, W)
    columns = torch.where(flips[:, None], columns.flip(1), columns) + offsets[:, 1:]  # (N, W)
    picked = padded[
        torch.arange(n, device=x.device)[:, None, None], :, rows[:, :, None], columns[:, None, :]
    ]  # (N, H, W, C): advanced indices first, the sliced channel axis last
    return picked.permute(0, 3, 1, 2).contiguous()  # (N, C, H, W)


def random_crop_flip(x: torch.Tensor, generator: torch.Generator, pad: int = PAD) -> torch.Tensor:
    """A fresh random crop and flip for every image of ``x`` (N, C, H, W), drawn from ``generator``."""
    offsets, flips = draw_crop_flip(x.shape[0], generator, pad)
    return crop_flip(x, offsets, flips, pad)


def augment_agents(
    x: torch.Tensor, generators: Sequence[torch.Generator], counts: Sequence[int], pad: int = PAD
) -> torch.Tensor:
    """G agents' batches ``x`` (G, B, C, H, W), agent g's first ``counts[g]`` augmented from its generator.

    The rest of each agent's row (padding, or an agent sitting the step out: count 0) is left
    as it is and draws nothing, so every agent's generator advances as it would alone.
    """
    g, b = x.shape[:2]
    offsets = torch.full((g, b, 2), pad, dtype=torch.int64)  # (G, B, 2): the identity crop
    flips = torch.zeros((g, b), dtype=torch.bool)
    for agent, count in enumerate(counts):
        if count > 0:
            offsets[agent, :count], flips[agent, :count] = draw_crop_flip(int(count), generators[agent], pad)
    flat = crop_flip(x.reshape(g * b, *x.shape[2:]), offsets.view(g * b, 2), flips.view(g * b), pad)
    return flat.view(x.shape)
