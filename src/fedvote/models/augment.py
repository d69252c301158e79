"""Image augmentations written with torch alone, for the semi-supervised student.

FixMatch (Sohn et al. 2020) asks two views of every unlabelled image: a *weak* one
(a small random translation) whose confident prediction becomes a pseudo-label, and a
*strong* one (random affine warp, for RGB images a RandAugment colour operation,
contrast and brightness, cutout) the model must map to the same label. Digits must keep
their identity, so nothing flips unless asked: with ``flip=True`` both views are also
mirrored left-right with probability 1/2, right for clothing or photos, wrong for digits;
:func:`mirror_closed_pool` tells the two apart from the public pool alone. Every draw comes
from the caller's ``torch.Generator``: a run is reproducible from its seed (and without flips,
or colour on grey images, draws exactly what it drew before they existed).

All functions take and return float batches (B, C, H, W), on the CPU or a GPU: the random
draws are always made on the CPU from the caller's generator (the same stream either way) and
what they build moves to the images' device.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from torch.nn import functional

from fedvote.models.colour import colour_augment

# :func:`mirror_closed_pool`'s limit on the median ratio, and the pool points it reads. Measured
# on 3,000 points of each test split (the voting paper's pool size): Fashion-MNIST 1.09,
# CIFAR-10 (as images) 1.00; MNIST 1.30, USPS 1.24, digits (8x8) 1.78 (docs/defaults.md).
MIRROR_RATIO_LIMIT = 1.15
MIRROR_SAMPLE = 3000


def mirror_closed_pool(pool: np.ndarray, *, sample: int = MIRROR_SAMPLE) -> bool:
    """Whether the public pool's images look alike mirrored: flips then suit the student's views.

    For each of (at most ``sample``, evenly spaced) pool images x, the distance from its
    left-right mirror to the nearest *other* pool image is divided by the distance from x itself
    to that nearest other image; the pool is mirror-closed when the median ratio is at most
    :data:`MIRROR_RATIO_LIMIT`. A mirrored shirt lies about as near the other shirts as the shirt
    (Fashion-MNIST: 1.09), a mirrored 3 is no digit and lies far from every digit (MNIST: 1.30).
    Public data only: the pool's images, no label. Anything but (P, C, H, W) images with both
    sides at least 8 pixels is not mirror-closed.
    """
    x = torch.as_tensor(np.asarray(pool), dtype=torch.float32)
    if not is_image_batch(x) or x.shape[0] < 3:
        return False
    picked = np.linspace(0, x.shape[0] - 1, min(sample, x.shape[0])).round().astype(np.int64)
    x = x[torch.as_tensor(np.unique(picked))]  # (S, C, H, W)
    flat = x.reshape(x.shape[0], -1)  # (S, D)
    mirrored = x.flip(-1).reshape(x.shape[0], -1)  # (S, D)
    others = torch.eye(x.shape[0], dtype=torch.bool)  # each image is not its own neighbour
    nearest = torch.cdist(flat, flat).masked_fill(others, math.inf).amin(dim=1)  # (S,)
    nearest_mirrored = torch.cdist(mirrored, flat).masked_fill(others, math.inf).amin(dim=1)  # (S,)
    ratio = nearest_mirrored / nearest.clamp_min(1e-12)
    return bool(ratio.median() <= MIRROR_RATIO_LIMIT)


def is_image_batch(x: torch.Tensor) -> bool:
    """Whether ``x`` is (B, C, H, W) with both sides at least 8: what these augmentations need."""
    return x.dim() == 4 and min(x.shape[2:]) >= 8


@functools.lru_cache(maxsize=16)
def _pixel_centres(height: int, width: int) -> torch.Tensor:
    """(3, H * W): each pixel's centre (x, y, 1) in [-1, 1] coordinates, as ``affine_grid`` places them.

    With ``align_corners=False`` the centres of W pixels are ``linspace(-1, 1, W) * (W - 1) / W``
    (PyTorch's ``linspace_from_neg_one``), the same arithmetic here; x varies along a row.
    """
    xs = torch.linspace(-1, 1, width) * (width - 1) / width  # (W,)
    ys = torch.linspace(-1, 1, height) * (height - 1) / height  # (H,)
    return torch.stack(
        [xs.repeat(height), ys.repeat_interleave(width), torch.ones(height * width)]
    )  # (3, H * W)


def _affine_grid(theta: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``affine_grid(theta, (B, C, H, W), align_corners=False)``: (B, H, W, 2) sampling points.

    One batched product with the pixel centres built once per image size; ``affine_grid``
    rebuilds them for every image and took 1.0-1.7 ms against 0.06 ms here for 224 MNIST
    images (2-core AMD EPYC), the larger part of the student's augmentations.
    """
    batch = theta.shape[0]
    centres = _pixel_centres(height, width).to(theta.device, theta.dtype)  # (3, H * W)
    points = torch.bmm(theta, centres.expand(batch, 3, height * width))  # (B, 2, H * W)
    return points.transpose(1, 2).reshape(batch, height, width, 2)


def _warp(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """``x`` (B, C, H, W) resampled through the affine maps ``theta`` (B, 2, 3); zeros outside."""
    grid = _affine_grid(theta.to(x.device), x.shape[2], x.shape[3])  # (B, H, W, 2)
    return functional.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def _uniform(low: float, high: float, size: int, generator: torch.Generator) -> torch.Tensor:
    """``size`` draws from U[low, high)."""
    return low + (high - low) * torch.rand(size, generator=generator)


def _mirror(theta: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``theta`` (B, 2, 3) with each map's x row negated with probability 1/2: that image mirrored.

    A map's first row gives the x coordinate it samples; negating it samples the image at −x,
    which is the left-right mirror of the image warped by the original map.
    """
    signs = torch.where(torch.rand(theta.shape[0], generator=generator) < 0.5, -1.0, 1.0)  # (B,)
    theta[:, 0, :] *= signs[:, None]
    return theta


def weak_augment(
    x: torch.Tensor, generator: torch.Generator, *, max_shift: float = 0.125, flip: bool = False
) -> torch.Tensor:
    """Each image translated by its own random offset of up to ``max_shift`` of its side.

    ``flip``: each image is also mirrored left-right with probability 1/2 (drawn after the
    offsets, so that without it the draws are those of the translation alone).
    """
    batch = x.shape[0]
    theta = torch.zeros(batch, 2, 3)
    theta[:, 0, 0] = theta[:, 1, 1] = 1.0
    # affine_grid works in [-1, 1]: a shift of s sides is 2s there.
    theta[:, :, 2] = 2 * max_shift * (2 * torch.rand(batch, 2, generator=generator) - 1)
    if flip:
        theta = _mirror(theta, generator)
    return _warp(x, theta)


def strong_augment(
    x: torch.Tensor,
    generator: torch.Generator,
    *,
    max_rotation_degrees: float = 25.0,
    scale: tuple[float, float] = (0.8, 1.2),
    max_shear: float = 0.3,
    max_shift: float = 0.15,
    cutout: float = 0.4,
    flip: bool = False,
    colour: bool | None = None,
) -> torch.Tensor:
    """A random affine warp, a colour operation (RGB), contrast/brightness change and a cutout square.

    The warp composes rotation (±``max_rotation_degrees``), isotropic scale in
    ``scale``, shear (±``max_shear``) and translation (±``max_shift`` of the side);
    contrast is scaled by U[0.5, 1.5] around the image's mean and brightness moved by
    U[−0.2, 0.2] of its range; a square of side up to ``cutout`` of the image is zeroed
    at a random place (FixMatch's Cutout, smaller than its half-image for small digits).
    ``flip``: the warp also mirrors each image left-right with probability 1/2 (drawn after
    the warp's other draws and before the contrast's). ``colour`` (None: for 3-channel images):
    after the warp, one of RandAugment's colour operations per image
    (:func:`fedvote.models.colour.colour_augment`); grey images draw exactly what they drew before.
    """
    batch, _, height, width = x.shape
    if batch == 0:  # FixMatch draws strong views of its confident points only: maybe none
        return x.clone()
    angle = _uniform(-1, 1, batch, generator) * math.radians(max_rotation_degrees)
    zoom = _uniform(*scale, batch, generator)
    shear = _uniform(-max_shear, max_shear, batch, generator)
    cos, sin = torch.cos(angle) / zoom, torch.sin(angle) / zoom
    theta = torch.zeros(batch, 2, 3)
    theta[:, 0, 0], theta[:, 0, 1] = cos, -sin + shear * cos
    theta[:, 1, 0], theta[:, 1, 1] = sin, cos + shear * sin
    theta[:, :, 2] = 2 * max_shift * (2 * torch.rand(batch, 2, generator=generator) - 1)
    if flip:
        theta = _mirror(theta, generator)
    out = _warp(x, theta)
    if x.shape[1] == 3 if colour is None else colour:
        out = colour_augment(out, generator)

    mean = out.mean(dim=(1, 2, 3), keepdim=True)  # (B, 1, 1, 1)
    span = (x.amax(dim=(1, 2, 3), keepdim=True) - x.amin(dim=(1, 2, 3), keepdim=True)).clamp_min(1e-6)
    contrast = _uniform(0.5, 1.5, batch, generator).view(batch, 1, 1, 1).to(x.device)
    brightness = _uniform(-0.2, 0.2, batch, generator).view(batch, 1, 1, 1).to(x.device) * span
    out = (out - mean) * contrast + mean + brightness

    side = (_uniform(0.0, cutout, batch, generator) * min(height, width)).round().long()  # (B,)
    top = (torch.rand(batch, generator=generator) * height).long()
    left = (torch.rand(batch, generator=generator) * width).long()
    rows = torch.arange(height).view(1, height, 1)
    cols = torch.arange(width).view(1, 1, width)
    half = (side // 2).view(batch, 1, 1)
    hole = (
        ((rows - top.view(batch, 1, 1)).abs() <= half)
        & ((cols - left.view(batch, 1, 1)).abs() <= half)
        & (side.view(batch, 1, 1) > 0)
    )  # (B, H, W)
    return out.masked_fill(hole.unsqueeze(1).to(x.device), 0.0)
