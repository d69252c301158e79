"""MNIST's framing for digit images of any source, so that domains line up before they mix.

MNIST's digits were size-normalised into a 20x20 box (aspect ratio kept) and centred by
their centre of mass in a 28x28 frame (LeCun et al., "The MNIST database"); USPS's fill
their 16x16 frame. Resampling one to the other's size leaves the strokes of one domain
half as large as the other's: a 1-nearest-neighbour rule from the committed MNIST
sample to the USPS test sample is right on 0.565 of the digits after a plain resize and
on 0.815 after both are framed alike (``tests/data/test_framing.py``); Private-kNN-FL
MNIST → USPS is in ``docs/results.md``.

:func:`frame_digits` applies MNIST's procedure to each image on its own: it reads no
other record and no statistic of any dataset, so it is a fixed public function of a
record and changes no privacy analysis. It assumes light strokes on a dark background
(MNIST, USPS); images without any ink are returned blank.
"""

from __future__ import annotations

import numpy as np

from fedvote.errors import ConfigError

FRAMINGS: tuple[str, ...] = ("auto", "none", "mnist")

# MNIST's box side over its frame side (20 / 28) and the ink threshold, a fraction of
# each image's brightest pixel, that finds the box.
BOX_FRACTION = 20 / 28
INK_FRACTION = 0.1


def frame_digits(images: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Frame every image (n, 1, H, W) in [0, 1] as MNIST is: (n, 1, *size) float32.

    Each image's ink (pixels above ``INK_FRACTION`` of its maximum) is cropped to its
    bounding box, resampled (antialiased bilinear) so the longer side fills
    ``BOX_FRACTION`` of the frame, and placed so its centre of mass sits at pixel
    (H/2, W/2), where MNIST's sit (shifted back inside the frame where the box would
    leave it). MNIST's own digits come back unchanged (tested).
    """
    if images.ndim != 4 or images.shape[1] != 1:
        raise ConfigError(
            "framing", f"MNIST framing needs grey images (n, 1, H, W), got shape {images.shape}"
        )
    import torch  # lazy: FRAMINGS is read by fedvote --help, which must not wait for torch
    from torch.nn import functional

    height, width = size
    box = max(1, round(BOX_FRACTION * min(height, width)))
    out = np.zeros((images.shape[0], 1, height, width), dtype=np.float32)  # (n, 1, H, W)
    for index, image in enumerate(images[:, 0]):
        peak = float(image.max())
        if peak <= 0.0:
            continue
        ink = image > INK_FRACTION * peak
        rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
        crop = image[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
        scale = box / max(crop.shape)
        new_h, new_w = max(1, round(crop.shape[0] * scale)), max(1, round(crop.shape[1] * scale))
        scaled = functional.interpolate(
            torch.as_tensor(crop, dtype=torch.float32)[None, None],  # (1, 1, h, w)
            size=(new_h, new_w),
            mode="bilinear",
            align_corners=False,
            antialias=True,
        )[0, 0].clamp_(0.0, 1.0).numpy()
        mass = float(scaled.sum())
        if mass <= 0.0:
            continue
        centre_row = float(scaled.sum(axis=1) @ np.arange(new_h)) / mass
        centre_col = float(scaled.sum(axis=0) @ np.arange(new_w)) / mass
        top = min(max(round(height / 2 - centre_row), 0), height - new_h)
        left = min(max(round(width / 2 - centre_col), 0), width - new_w)
        out[index, 0, top : top + new_h, left : left + new_w] = scaled
    return out


def resolve_framing(framing: str, example_shapes: list[tuple[int, ...]]) -> str:
    """``"auto"`` becomes ``"mnist"`` for grey images of different sizes across domains, else ``"none"``.

    Only public facts decide: the domains' example shapes.
    """
    if framing not in FRAMINGS:
        raise ConfigError("framing", f"unknown framing {framing!r}; choose from {', '.join(FRAMINGS)}")
    if framing != "auto":
        return framing
    grey_images = all(len(shape) == 3 and shape[0] == 1 for shape in example_shapes)
    return "mnist" if grey_images and len(set(example_shapes)) > 1 else "none"
