"""The arithmetic a student trains in: float32, or bfloat16 products where the CPU has them.

``"bfloat16"`` runs a training step's forward and backward under ``torch.autocast``: the
convolutions and matrix products take bfloat16 inputs (8 significant bits) and accumulate
in float32, while the weights, their gradients, Adam's moments and the losses stay
float32 (mixed precision, Micikevicius et al. 2018; Kalamkar et al. 2019 for bfloat16).
On a CPU with AVX512-BF16 or AMX tiles this is about twice float32's rate (a 2-core AMD
EPYC: 380 against 183 GFLOP/s on a 4096² product; the MNIST student's step 1.4-2.3x
faster); elsewhere bfloat16 is emulated and slower, so ``"auto"`` takes it only where
the hardware has it, and only for images of at least 16×16, whose convolutions are large
enough to gain (digits' 8×8 student ran no faster). The student only post-processes
released labels and public data: its arithmetic changes no privacy figure.
"""

from __future__ import annotations

import contextlib

import torch

from fedvote.models.config import PRECISIONS

# "auto" takes bfloat16 for images (channels, h, w) at least this many pixels a side: the
# MNIST student (28x28) trained 1.25-1.39x faster in it, digits' (8x8) no faster (docs/defaults.md).
BFLOAT16_MIN_SIDE = 16


def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX tiles)."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    # Private in torch 2.x; a torch without them is taken as without the instructions.
    return any(bool(getattr(torch.cpu, check, lambda: False)()) for check in checks)


def resolve_precision(name: str, example_shape: tuple[int, ...]) -> str:
    """``"auto"`` becomes ``"bfloat16"`` for images of at least 16×16 on a CPU with native bfloat16.

    Else ``"float32"``; a named precision is kept. ``example_shape``: one example's, e.g. (1, 28, 28).
    """
    if name not in PRECISIONS:
        raise ValueError(f"unknown precision {name!r}; choose from {', '.join(PRECISIONS)}")
    if name != "auto":
        return name
    large_image = len(example_shape) == 3 and min(example_shape[1:]) >= BFLOAT16_MIN_SIDE
    return "bfloat16" if large_image and native_bfloat16() else "float32"


def compute_device(device: torch.device | str = "auto", precision: str = "float32") -> torch.device:
    """Where arithmetic in ``precision`` (resolved) runs: a named device as named, ``"auto"`` resolved.

    ``"auto"`` is CUDA when PyTorch sees a GPU that multiplies in ``precision`` (bfloat16 asks
    ``torch.cuda.is_bf16_supported``), else the CPU. The batched teachers and clients
    (float32) and the student's consistency training all take their device from here.
    """
    if not (isinstance(device, str) and device == "auto"):
        return torch.device(device)
    if not torch.cuda.is_available() or (precision == "bfloat16" and not torch.cuda.is_bf16_supported()):
        return torch.device("cpu")
    return torch.device("cuda")


def training_arithmetic(
    precision: str, device_type: str = "cpu"
) -> contextlib.AbstractContextManager[object]:
    """The context a training step's forward (and so its backward) runs in at ``precision``.

    ``precision`` is resolved (``"float32"`` or ``"bfloat16"``); the caller casts the logits
    to float32 before its losses. ``device_type``: where the step runs (``"cpu"``, ``"cuda"``).
    """
    if precision == "bfloat16":
        return torch.autocast(device_type, dtype=torch.bfloat16)
    if precision == "float32":
        return contextlib.nullcontext()
    raise ValueError(f"precision must be resolved to float32 or bfloat16, got {precision!r}")
