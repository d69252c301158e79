"""The student's torch-only image augmentations: shapes, determinism, what each one does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional

from fedvote.models.augment import (
    _affine_grid,
    is_image_batch,
    mirror_closed_pool,
    strong_augment,
    weak_augment,
)


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


def _left_dots(batch: int, side: int = 16) -> torch.Tensor:
    """Images with one bright pixel in the left half, away from the middle: a mirror moves it right."""
    x = torch.zeros(batch, 1, side, side)
    x[:, 0, side // 2, 3] = 1.0
    return x


def _centre_columns(out: torch.Tensor) -> torch.Tensor:
    """Each image's brightest column (B,)."""
    return out[:, 0].amax(dim=1).argmax(dim=1)


def test_weak_flip_mirrors_about_half_the_images_and_moves_nothing_else() -> None:
    x = _left_dots(200)
    out = weak_augment(x, torch.Generator().manual_seed(0), max_shift=0.0, flip=True)
    mirrored = torch.all(torch.isclose(out, x.flip(-1), atol=1e-6).flatten(1), dim=1)  # (B,)
    unchanged = torch.all(torch.isclose(out, x, atol=1e-6).flatten(1), dim=1)  # (B,)
    assert torch.all(mirrored ^ unchanged)  # each image is itself or its exact mirror
    assert 70 <= int(mirrored.sum()) <= 130


def test_without_flip_the_views_never_mirror_and_draw_as_before() -> None:
    x = _left_dots(100)
    plain = weak_augment(x, torch.Generator().manual_seed(0), max_shift=0.0)
    assert torch.allclose(plain, x, atol=1e-6)
    # flip=False is the default: the same draws, the same views.
    for augment in (weak_augment, strong_augment):
        assert torch.equal(
            augment(x, torch.Generator().manual_seed(4)), augment(x, torch.Generator().manual_seed(4), flip=False)
        )


def test_strong_flip_puts_a_left_dot_on_the_right_for_some_images_only() -> None:
    x = _left_dots(200)
    still = dict(max_rotation_degrees=0.0, scale=(1.0, 1.0), max_shear=0.0, max_shift=0.0, cutout=0.0)
    plain = strong_augment(x, torch.Generator().manual_seed(1), **still)
    flipped = strong_augment(x, torch.Generator().manual_seed(1), flip=True, **still)
    assert torch.all(_centre_columns(plain) == 3)
    right = _centre_columns(flipped) == 16 - 1 - 3
    assert torch.all(right | (_centre_columns(flipped) == 3))
    assert 70 <= int(right.sum()) <= 130


def test_a_pool_that_holds_its_own_mirrors_is_mirror_closed_and_a_one_sided_one_is_not() -> None:
    rng = np.random.default_rng(0)
    shapes = rng.random((40, 1, 12, 12)).astype(np.float32)
    # Clothing-like: every shape appears as itself and mirrored (two noisy copies each way).
    both_ways = np.concatenate([shapes, shapes[..., ::-1]] * 2) + 0.05 * rng.standard_normal((160, 1, 12, 12))
    assert mirror_closed_pool(both_ways.astype(np.float32))
    # Digit-like: one orientation only, a bright left stroke; its mirror lies far from every image.
    one_way = 0.05 * rng.standard_normal((160, 1, 12, 12)).astype(np.float32)
    one_way[:, :, :, 1:3] += 1.0
    assert not mirror_closed_pool(one_way)


def test_anything_but_images_is_not_mirror_closed() -> None:
    assert not mirror_closed_pool(np.zeros((50, 64), dtype=np.float32))
    assert not mirror_closed_pool(np.zeros((50, 1, 6, 6), dtype=np.float32))


@pytest.mark.full_data
def test_the_rule_flips_fashion_mnist_and_not_the_digits(full_data_dir: Path) -> None:
    from fedvote.data.datasets import load_splits

    def pool(name: str) -> np.ndarray:
        splits = load_splits(name, str(full_data_dir))
        assert splits.test is not None
        return splits.test.features[:3000]  # the voting paper's pool size

    assert mirror_closed_pool(pool("fashion-mnist"))
    assert not mirror_closed_pool(pool("mnist"))
    assert not mirror_closed_pool(pool("usps"))
