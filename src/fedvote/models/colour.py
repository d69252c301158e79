"""RandAugment's colour operations for RGB images, written with torch, for FixMatch's strong views.

FixMatch (Sohn et al. 2020) draws its strong views with RandAugment (Cubuk et al. 2020), whose
list mixes geometric operations (fedvote's affine warp and cutout, :mod:`fedvote.models.augment`)
with colour ones that only mean something for colour photographs: saturation, solarize,
posterize, autocontrast, equalize and sharpness. :func:`colour_augment` applies one of them, or
none, to each image at a random magnitude. Images are not assumed to lie in [0, 1]: each works in
its own range [lo, hi] (its smallest and largest value), and the result is mapped back to it.
"""

from __future__ import annotations

import torch
from torch.nn import functional

# The operations :func:`colour_augment` draws from, uniformly (index order matters: seeded draws).
COLOUR_OPERATIONS: tuple[str, ...] = (
    "identity", "saturation", "solarize", "posterize", "autocontrast", "equalize", "sharpness",
)  # fmt: skip
# ITU-R 601 luma weights: the grey an image's saturation is blended towards (PIL's ``convert("L")``).
_LUMA = (0.299, 0.587, 0.114)
# PIL's SMOOTH kernel (ImageEnhance.Sharpness blends towards it).
_SMOOTH = torch.tensor([[1.0, 1.0, 1.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]]) / 13.0


def apply_colour_operation(x: torch.Tensor, operation: str, magnitude: torch.Tensor) -> torch.Tensor:
    """``operation`` on every RGB image of ``x`` (B, 3, H, W) at its magnitude in [0, 1] (B,).

    saturation and sharpness blend each image with its grey / smoothed self by a factor
    0.05 + 1.9·m (1 leaves it); solarize inverts the values at or above the fraction m of the
    range; posterize keeps 4 + ⌊5m⌋ bits (at most 8); autocontrast stretches each channel to the range;
    equalize replaces each channel's values by their ranks (a flat histogram); identity returns x.
    """
    if x.dim() != 4 or x.shape[1] != 3:
        raise ValueError(f"colour operations need RGB images (B, 3, H, W), got {tuple(x.shape)}")
    if operation not in COLOUR_OPERATIONS:
        raise ValueError(f"unknown colour operation {operation!r}")
    if operation == "identity":
        return x.clone()
    batch = x.shape[0]
    low = x.amin(dim=(1, 2, 3), keepdim=True)  # (B, 1, 1, 1)
    span = (x.amax(dim=(1, 2, 3), keepdim=True) - low).clamp_min(1e-6)
    unit = (x - low) / span  # (B, 3, H, W) in [0, 1]
    m = magnitude.to(x.device, x.dtype).view(batch, 1, 1, 1)
    factor = 0.05 + 1.9 * m
    if operation == "saturation":
        luma = torch.tensor(_LUMA, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
        grey = (unit * luma).sum(dim=1, keepdim=True)  # (B, 1, H, W)
        out = grey + factor * (unit - grey)
    elif operation == "solarize":
        out = torch.where(unit >= m, 1.0 - unit, unit)
    elif operation == "posterize":
        levels = torch.pow(2.0, 4.0 + torch.floor(5.0 * m).clamp_max(4.0))  # 16 … 256 (8 bits from m = 0.8)
        out = torch.floor(unit * (levels - 1) + 0.5) / (levels - 1)
    elif operation == "autocontrast":
        lo = unit.amin(dim=(2, 3), keepdim=True)  # (B, 3, 1, 1)
        out = (unit - lo) / (unit.amax(dim=(2, 3), keepdim=True) - lo).clamp_min(1e-6)
    elif operation == "equalize":
        flat = unit.flatten(2)  # (B, 3, H·W)
        ranks = flat.argsort(dim=-1).argsort(dim=-1).to(x.dtype)  # each value's rank in its channel
        out = (ranks / max(flat.shape[-1] - 1, 1)).view_as(unit)
    else:  # sharpness
        kernel = _SMOOTH.to(x.device, x.dtype).expand(3, 1, 3, 3)
        smooth = functional.conv2d(functional.pad(unit, (1, 1, 1, 1), mode="replicate"), kernel, groups=3)
        out = smooth + factor * (unit - smooth)
    return out.clamp(0.0, 1.0) * span + low


def colour_augment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Each RGB image of ``x`` (B, 3, H, W) through one of :data:`COLOUR_OPERATIONS`, at a random magnitude.

    Draws, from ``generator`` on the CPU: the operation of each image (uniform), then its
    magnitude U[0, 1).
    """
    batch = x.shape[0]
    chosen = torch.randint(len(COLOUR_OPERATIONS), (batch,), generator=generator)  # (B,)
    magnitude = torch.rand(batch, generator=generator)  # (B,)
    out = x.clone()
    for index, operation in enumerate(COLOUR_OPERATIONS[1:], start=1):
        rows = torch.nonzero(chosen == index).flatten()
        if rows.numel():
            picked = rows.to(x.device)
            out[picked] = apply_colour_operation(x[picked], operation, magnitude[rows])
    return out
