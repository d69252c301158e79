"""RandAugment's colour operations for RGB strong views (issue 43): each operation's defining property,
the images' own ranges kept, seeded draws, and grey images drawing exactly what they drew before."""

from __future__ import annotations

import pytest
import torch

from fedvote.models.augment import strong_augment
from fedvote.models.colour import COLOUR_OPERATIONS, apply_colour_operation, colour_augment


def photos(batch: int = 6, seed: int = 0) -> torch.Tensor:
    """Random RGB images in a range of their own (not [0, 1]), (B, 3, 12, 12)."""
    g = torch.Generator().manual_seed(seed)
    return 3.0 * torch.rand(batch, 3, 12, 12, generator=g) - 1.0


def at(magnitude: float, batch: int = 6) -> torch.Tensor:
    return torch.full((batch,), magnitude)


def ranges(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.amin(dim=(1, 2, 3)), x.amax(dim=(1, 2, 3))


@pytest.mark.parametrize("operation", COLOUR_OPERATIONS)
@pytest.mark.parametrize("magnitude", [0.0, 0.3, 0.99])
def test_every_operation_keeps_the_shape_and_each_images_range(operation: str, magnitude: float) -> None:
    x = photos()
    out = apply_colour_operation(x, operation, at(magnitude))
    lo, hi = ranges(x)
    assert out.shape == x.shape
    assert torch.all(out.amin(dim=(1, 2, 3)) >= lo - 1e-5) and torch.all(out.amax(dim=(1, 2, 3)) <= hi + 1e-5)


def test_a_factor_of_one_leaves_saturation_and_sharpness_alone_and_a_small_one_greys() -> None:
    x = photos()
    middle = at(0.95 / 1.9)  # factor 0.05 + 1.9·m = 1
    for operation in ("saturation", "sharpness"):
        assert torch.allclose(apply_colour_operation(x, operation, middle), x, atol=1e-5)
    grey = apply_colour_operation(x, "saturation", at(0.0))  # factor 0.05: 95 % of the way to grey
    spread = (grey.amax(dim=1) - grey.amin(dim=1)).max() / (x.amax(dim=1) - x.amin(dim=1)).max()
    assert spread < 0.1


def test_solarize_at_zero_inverts_every_value_in_the_images_range() -> None:
    x = photos()
    lo, hi = ranges(x)
    out = apply_colour_operation(x, "solarize", at(0.0))
    assert torch.allclose(out, (lo + hi).view(-1, 1, 1, 1) - x, atol=1e-5)
    unit = (x - lo.view(-1, 1, 1, 1)) / (hi - lo).view(-1, 1, 1, 1)
    high = apply_colour_operation(x, "solarize", at(0.9))  # only values at or above 90 % of the range move
    assert torch.allclose(high[unit < 0.9], x[unit < 0.9], atol=1e-5)
    assert not torch.allclose(high[unit >= 0.9], x[unit >= 0.9], atol=1e-3)


def test_posterize_keeps_four_to_eight_bits() -> None:
    x = photos()
    lo, hi = ranges(x)
    unit = (apply_colour_operation(x, "posterize", at(0.0)) - lo.view(-1, 1, 1, 1)) / (hi - lo).view(-1, 1, 1, 1)
    for image in unit:
        assert torch.unique(torch.round(image * 15)).numel() <= 16
        assert torch.allclose(image * 15, torch.round(image * 15), atol=1e-4)  # on the 16-level grid
    fine = apply_colour_operation(x, "posterize", at(0.85))  # 8 bits: within half a step of 1/255
    assert torch.all((fine - x).abs() <= (hi - lo).view(-1, 1, 1, 1) / 510 + 1e-5)


def test_autocontrast_stretches_and_equalize_flattens_each_channel() -> None:
    x = photos()
    x[:, 1] = 0.2 * x[:, 1]  # a dull green channel
    lo, hi = ranges(x)
    stretched = apply_colour_operation(x, "autocontrast", at(0.5))
    assert torch.allclose(stretched.amin(dim=(2, 3)), lo.view(-1, 1).expand(-1, 3), atol=1e-5)
    assert torch.allclose(stretched.amax(dim=(2, 3)), hi.view(-1, 1).expand(-1, 3), atol=1e-5)
    flat = apply_colour_operation(x, "equalize", at(0.5)).flatten(2).sort(dim=-1).values  # (B, 3, 144)
    expected = lo.view(-1, 1, 1) + (hi - lo).view(-1, 1, 1) * torch.linspace(0, 1, 144).view(1, 1, -1)
    assert torch.allclose(flat, expected.expand_as(flat), atol=1e-5)


def test_colour_augment_draws_every_operation_reproducibly() -> None:
    x = photos(batch=700)
    first = colour_augment(x, torch.Generator().manual_seed(3))
    assert torch.equal(first, colour_augment(x, torch.Generator().manual_seed(3)))
    chosen = torch.randint(len(COLOUR_OPERATIONS), (700,), generator=torch.Generator().manual_seed(3))
    counts = torch.bincount(chosen, minlength=len(COLOUR_OPERATIONS)).float()
    assert torch.all((counts - 100).abs() < 4 * (700 * (1 / 7) * (6 / 7)) ** 0.5)  # binomial, 4 sd
    unchanged = (first - x).abs().flatten(1).amax(dim=1) < 1e-6
    assert torch.all(unchanged[chosen == 0]) and not torch.all(unchanged[chosen == 2])  # identity; solarize


def test_non_rgb_batches_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="RGB"):
        apply_colour_operation(torch.zeros(2, 1, 8, 8), "solarize", at(0.5, 2))
    with pytest.raises(ValueError, match="unknown colour operation"):
        apply_colour_operation(torch.zeros(2, 3, 8, 8), "hue", at(0.5, 2))


def test_grey_images_draw_exactly_what_they_drew_before_and_rgb_ones_get_colour() -> None:
    grey = torch.rand(5, 1, 16, 16, generator=torch.Generator().manual_seed(1))
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    assert torch.equal(strong_augment(grey, g1), strong_augment(grey, g2, colour=False))
    assert torch.equal(torch.rand(3, generator=g1), torch.rand(3, generator=g2))  # the same draws consumed
    rgb = photos(batch=40)
    with_colour = strong_augment(rgb, torch.Generator().manual_seed(7))
    without = strong_augment(rgb, torch.Generator().manual_seed(7), colour=False)
    assert not torch.allclose(with_colour, without)
