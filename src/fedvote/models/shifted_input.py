"""Input centring by a public constant: the released model that subtracts it first.

PriFedSync and the gradient baselines (FedAvg, DP-FedAvg, DP-FedSGD) may centre every
input by the public pool's mean (``--center-inputs``): a function of public data only,
sent down with the model, subtracted by every agent from its records before training
(before any clipping) and carried by the released model as :class:`ShiftedInput`. It costs
no privacy (``docs/privacy.md``).
"""

from __future__ import annotations

import math

import numpy as np
import torch


def public_mean_shift(public_features: np.ndarray) -> tuple[float, ...] | None:
    """The public pool's mean input, flattened (in,); None for an empty pool.

    Computed in float64 from the public pool alone (no agent's record is read).
    """
    if len(public_features) == 0:
        return None
    pool = np.asarray(public_features).reshape(len(public_features), -1).astype(np.float64)
    return tuple(float(v) for v in pool.mean(axis=0))


def shift_features(features: np.ndarray, shift: tuple[float, ...] | None) -> np.ndarray:
    """Records (n, ...) minus ``shift`` (in,) over their flattened inputs, in their own shape and dtype.

    None: the records unchanged. A shift whose length is not the flattened input size is refused.
    """
    if shift is None:
        return features
    flat = np.asarray(features).reshape(len(features), math.prod(features.shape[1:]))  # also for n = 0
    offset = np.asarray(shift, dtype=np.float64)
    if flat.shape[1] != offset.shape[0]:
        raise ValueError(f"the input shift has {offset.shape[0]} entries, the records {flat.shape[1]}")
    return (flat - offset).astype(features.dtype).reshape(features.shape)


class ShiftedInput(torch.nn.Module):
    """``model`` applied to x − shift (x flattened for it): the released model with its public centring.

    The shifted inputs are given back in x's own shape, so any architecture of the zoo
    (the perceptrons flatten them anyway; a CNN keeps its channels and pixels) sees what
    the agents trained it on.
    """

    shift: torch.Tensor  # (in,), a buffer

    def __init__(self, shift: tuple[float, ...], model: torch.nn.Module) -> None:
        super().__init__()
        self.register_buffer("shift", torch.tensor(shift, dtype=torch.float32))
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (n, C) of ``model`` on x (n, ...) with ``shift`` subtracted from its flattened inputs."""
        shifted = x.reshape(x.shape[0], -1) - self.shift
        return self.model(shifted.reshape(x.shape))
