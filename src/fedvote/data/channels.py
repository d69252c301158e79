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
