"""The student's torch-only image augmentations: shapes, determinism, what each one does."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional

from fedvote.models.augment import _affine_grid, is_image_batch, strong_augment, weak_augment


def _images(batch: int = 6, side: int = 12) -> torch.Tensor:
    return torch.rand(batch, 1, side, side, generator=torch.Generator().manual_seed(3))


def test_weak_augment_without_shift_is_the_identity() -> None:
    x = _images()
    out = weak_augment(x, torch.Generator().manual_seed(0), max_shift=0.0)
    assert torch.allclose(out, x, atol=1e-6)


def test_weak_augment_moves_every_image_by_at_most_its_shift() -> None:
    # One bright pixel per image: after a shift of at most 1/8 of a 16-pixel side (2 pixels),
    # its mass stays within 2 pixels of where it was (bilinear spreads it over neighbours).
    x = torch.zeros(20, 1, 16, 16)
    x[:, 0, 8, 8] = 1.0
    out = weak_augment(x, torch.Generator().manual_seed(1), max_shift=0.125)
    assert out.shape == x.shape
    rows = torch.arange(16).view(16, 1).float()
    cols = torch.arange(16).view(1, 16).float()
    mass = out[:, 0].sum(dim=(1, 2))
    centre_y = (out[:, 0] * rows).sum(dim=(1, 2)) / mass
    centre_x = (out[:, 0] * cols).sum(dim=(1, 2)) / mass
    assert torch.all((centre_y - 8).abs() <= 2.0 + 1e-5) and torch.all((centre_x - 8).abs() <= 2.0 + 1e-5)
    assert not torch.allclose(out, x)  # something moved


def test_augmentations_are_reproducible_from_the_generator() -> None:
    x = _images()
    for augment in (weak_augment, strong_augment):
        first = augment(x, torch.Generator().manual_seed(7))
        again = augment(x, torch.Generator().manual_seed(7))
        other = augment(x, torch.Generator().manual_seed(8))
        assert torch.equal(first, again)
        assert not torch.equal(first, other)


def test_strong_augment_keeps_the_shape_and_changes_every_image() -> None:
    x = _images(batch=32, side=28)
    out = strong_augment(x, torch.Generator().manual_seed(0))
    assert out.shape == x.shape and out.dtype == x.dtype
    assert torch.all((out - x).flatten(1).abs().amax(dim=1) > 1e-3)


def test_is_image_batch_needs_channels_and_eight_pixels() -> None:
    assert is_image_batch(torch.zeros(2, 1, 8, 8))
    assert not is_image_batch(torch.zeros(2, 1, 7, 8))
    assert not is_image_batch(torch.zeros(2, 64))


@pytest.mark.parametrize(("height", "width"), [(28, 28), (16, 9), (8, 31)])
def test_sampling_grid_is_affine_grids(height: int, width: int) -> None:
    # The warps build their grid from pixel centres cached per size: the grid affine_grid builds.
    theta = torch.randn(37, 2, 3, generator=torch.Generator().manual_seed(height * width))
    expected = functional.affine_grid(theta, [37, 1, height, width], align_corners=False)
    torch.testing.assert_close(_affine_grid(theta, height, width), expected, rtol=0, atol=1e-6)
