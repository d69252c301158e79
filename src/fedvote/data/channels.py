"""Colour to grey: how RGB domains (syndigits) join grey ones (MNIST, USPS) in one federation.

Digit classes do not depend on colour, and the voting paper's target domain (USPS) is
grey, so a federation whose domains disagree on channels brings every colour image to
one luminance channel, ITU-R BT.601's weights (Y = 0.299 R + 0.587 G + 0.114 B, the
weights of JPEG and of Pillow's ``convert("L")``). It is a fixed public function of one
record: it reads no other record and changes no privacy analysis.
"""

from __future__ import annotations

import numpy as np

from fedvote.errors import ConfigError

#: ITU-R BT.601 luma weights for (R, G, B).
LUMA_WEIGHTS: tuple[float, float, float] = (0.299, 0.587, 0.114)


def luminance(images: np.ndarray) -> np.ndarray:
    """Grey images (n, 1, H, W) float32 from RGB images (n, 3, H, W) in [0, 1]; values stay in [0, 1]."""
    if images.ndim != 4 or images.shape[1] != 3:
        raise ConfigError("images", f"luminance needs RGB images (n, 3, H, W), got shape {images.shape}")
    weights = np.asarray(LUMA_WEIGHTS, dtype=np.float32)
    grey = np.einsum("nchw,c->nhw", images.astype(np.float32, copy=False), weights)  # (n, H, W)
    return np.clip(grey, 0.0, 1.0)[:, None, :, :]


def light_ink(images: np.ndarray, border: int = 3) -> np.ndarray:
    """Grey images (n, 1, H, W) with light ink on a dark ground, stretched to [0, 1], as MNIST's and USPS's.

    Per image: when its border (the outer ``border`` pixels, where a centred digit rarely
    is) is brighter than its mean it is inverted (dark ink on a light ground becomes
    light on dark); then its values are stretched linearly so its border median maps to 0
    and its maximum to 1 (clipped). A fixed public map of one record, like :func:`luminance`.
    """
    if images.ndim != 4 or images.shape[1] != 1:
        raise ConfigError("images", f"light_ink needs grey images (n, 1, H, W), got shape {images.shape}")
    x = images[:, 0].astype(np.float32, copy=True)  # (n, H, W)
    frame = np.ones(x.shape[1:], dtype=bool)
    frame[border:-border, border:-border] = False
    ground = np.median(x[:, frame], axis=1)  # (n,)
    invert = ground > x.reshape(len(x), -1).mean(axis=1)
    x[invert] = 1.0 - x[invert]
    ground = np.where(invert, 1.0 - ground, ground)[:, None, None]
    peak = x.reshape(len(x), -1).max(axis=1)[:, None, None]
    stretched = (x - ground) / np.maximum(peak - ground, 1e-6)
    return np.clip(stretched, 0.0, 1.0)[:, None, :, :]
