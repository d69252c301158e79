"""fedvote.models.patch_features: Coates-Ng patch features fitted on the public pool only."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedvote.errors import ConfigError
from fedvote.models import patch_features
from fedvote.models.features import patch_extractor
from fedvote.models.patch_features import (
    PatchSettings,
    _normalise,
    fit_patch_features,
    patch_features_from_state,
    patch_features_state,
)

SMALL = PatchSettings(patch=4, filters=8, patches=2_000, kmeans_iterations=3, grid=2)
# Coates & Ng's map as published: every filter learned, codes pooled as they are.
PLAIN = PatchSettings(
    patch=4, filters=8, patches=2_000, kmeans_iterations=3, grid=2, mirror_symmetric=False, square_root=False
)


def _images(n: int, seed: int, shape=(3, 12, 12)) -> np.ndarray:
    return np.random.default_rng(seed).uniform(size=(n, *shape)).astype(np.float32)


@pytest.mark.parametrize("settings, dim", [(SMALL, 2 * 4 * 4), (PLAIN, 2 * 8 * 4)])
def test_shapes_and_dim(settings, dim):
    module = fit_patch_features(_images(40, 0), seed=0, settings=settings)
    out = module(torch.as_tensor(_images(5, 1)))
    assert out.shape == (5, settings.dim()) == (5, dim)
    assert module.dim == settings.dim()
    assert (out >= 0).all()  # soft-threshold codes, averaged
    assert not any(b.requires_grad for b in module.buffers())


def test_deterministic_given_the_pool_and_seed():
    pool = _images(40, 0)
    a = fit_patch_features(pool, seed=3, settings=SMALL)
    b = fit_patch_features(pool.copy(), seed=3, settings=SMALL)
    c = fit_patch_features(pool, seed=4, settings=SMALL)
    assert torch.equal(a.kernels, b.kernels) and torch.equal(a.offsets, b.offsets)
    assert not torch.equal(a.kernels, c.kernels)


def test_fitted_on_what_it_is_given_only():
    """φ depends on the pool it is given: other data (an agent's records) never enters."""
    pool = _images(40, 0)
    before = fit_patch_features(pool, seed=0, settings=SMALL)
    _ = _images(500, 9)  # records elsewhere in memory change nothing
    after = fit_patch_features(pool, seed=0, settings=SMALL)
    assert torch.equal(before.kernels, after.kernels)
    other_pool = fit_patch_features(_images(40, 1), seed=0, settings=SMALL)
    assert not torch.equal(before.kernels, other_pool.kernels)


def _patchwise(x: torch.Tensor, kernels: torch.Tensor, offsets: torch.Tensor, settings: PatchSettings):
    """Coates-Ng by the letter: normalise each window, dot with the kernels, threshold, pool."""
    p, k = settings.patch, kernels.shape[0]
    windows = F.unfold(x, p).transpose(1, 2)  # (b, L, C·p²)
    normalised = _normalise(windows.reshape(-1, windows.shape[-1]), settings.norm_eps)
    dots = normalised @ kernels.reshape(k, -1).T + offsets  # (b·L, K)
    rows, cols = x.shape[-2] - p + 1, x.shape[-1] - p + 1
    dots = dots.reshape(x.shape[0], rows, cols, k).permute(0, 3, 1, 2)
    codes = torch.cat([F.relu(dots - settings.alpha), F.relu(-dots - settings.alpha)], dim=1)
    return F.adaptive_avg_pool2d(codes, settings.grid).reshape(x.shape[0], -1)  # (b, 2K·grid²)


def test_the_folded_convolution_equals_the_patchwise_encoding():
    """conv form == normalise each window, whiten, dot with centroids, threshold, pool."""
    module = fit_patch_features(_images(30, 0), seed=0, settings=PLAIN)
    x = torch.as_tensor(_images(3, 5))
    expected = _patchwise(x, module.kernels, module.offsets, PLAIN)
    torch.testing.assert_close(module(x), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(3, 12, 12), (3, 11, 14), (1, 13, 9)])
def test_the_default_map_is_the_square_root_of_the_first_half_averaged_over_an_image_and_its_mirror(shape):
    """φ(x) = √(½(ψ(x) + ψ(mirror x))), ψ the plain encoding by the learned half of the kernels.

    An independent route: the plain patchwise encoding of the image and of its mirror, with the
    first K/2 kernels only; the module gets there through the mirrored kernels instead.
    """
    module = fit_patch_features(_images(30, 0, shape), seed=0, settings=SMALL)
    half = SMALL.filters // 2
    x = torch.as_tensor(_images(4, 5, shape))
    learned = (module.kernels[:half], module.offsets[:half])
    expected = (0.5 * (_patchwise(x, *learned, SMALL) + _patchwise(x.flip(-1), *learned, SMALL))).sqrt()
    torch.testing.assert_close(module(x), expected, rtol=1e-4, atol=1e-4)


def test_the_default_map_cannot_tell_an_image_from_its_mirror():
    module = fit_patch_features(_images(30, 0), seed=0, settings=SMALL)
    half = SMALL.filters // 2
    torch.testing.assert_close(module.kernels[half:], module.kernels[:half].flip(-1), rtol=0, atol=0)
    torch.testing.assert_close(module.offsets[half:], module.offsets[:half], rtol=0, atol=0)
    x = torch.as_tensor(_images(6, 7))
    torch.testing.assert_close(module(x.flip(-1)), module(x), rtol=1e-5, atol=1e-6)
    plain = fit_patch_features(_images(30, 0), seed=0, settings=PLAIN)
    assert not torch.allclose(plain(x.flip(-1)), plain(x), atol=1e-3)  # the plain map can
    assert not torch.allclose(module(x[:1]), module(x[1:2]), atol=1e-3)  # yet images still differ


def test_a_large_batch_is_encoded_in_bounded_passes_with_the_same_result(monkeypatch):
    """The pass size follows the codes' bytes: a batch split into passes maps as in one pass."""
    module = fit_patch_features(_images(30, 0), seed=0, settings=SMALL)
    x = torch.as_tensor(_images(23, 8))
    whole = module(x)
    codes_per_image = SMALL.filters * (12 - SMALL.patch + 1) ** 2  # K·H'·W'
    monkeypatch.setattr(patch_features, "CODES_BYTES_PER_PASS", 4 * codes_per_image * 5)
    assert module.images_per_pass(12, 12) == 5
    passes = []
    original = module._encode
    monkeypatch.setattr(module, "_encode", lambda chunk: passes.append(len(chunk)) or original(chunk))
    torch.testing.assert_close(module(x), whole, rtol=1e-6, atol=1e-6)  # each image's codes are its own
    assert passes == [5, 5, 5, 5, 3]
    monkeypatch.setattr(patch_features, "CODES_BYTES_PER_PASS", 1)  # never fewer than one image a pass
    assert module.images_per_pass(12, 12) == 1


def test_extractor_wraps_the_module():
    pool = _images(30, 0)
    extractor = patch_extractor(fit_patch_features(pool, seed=0, settings=SMALL), pool.shape[1:])
    assert extractor.kind == "patch" and extractor.dim == SMALL.dim()
    assert extractor.input_shape == (3, 12, 12)
    out = extractor.transform(_images(4, 2).reshape(4, -1))  # flat rows are reshaped
    assert out.shape == (4, SMALL.dim()) and out.dtype == np.float32
    assert extractor.num_floats > 0


def test_the_state_of_plain_arrays_rebuilds_the_same_map():
    module = fit_patch_features(_images(30, 0), seed=0, settings=SMALL)
    state = patch_features_state(module)
    assert all(isinstance(value, np.ndarray) and value.dtype != object for value in state.values())
    rebuilt = patch_features_from_state(state)
    images = torch.as_tensor(_images(5, 3))
    assert torch.equal(rebuilt(images), module(images))
    assert (rebuilt.mirror_symmetric, rebuilt.square_root, rebuilt.grid) == (True, True, 2)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda state: state.pop("offsets"), "lack offsets"),
        (lambda state: state.update(offsets=state["offsets"][:-1]), r"no \(K, C, p, p\)"),
        (lambda state: state.update(kernels=state["kernels"][:-1], offsets=state["offsets"][:-1]), "even filter"),
    ],
)
def test_a_malformed_state_is_refused_by_name(change, named):
    state = patch_features_state(fit_patch_features(_images(30, 0), seed=0, settings=SMALL))
    change(state)
    with pytest.raises(ConfigError, match=named) as error:
        patch_features_from_state(state)
    assert error.value.argument == "input_map"


@pytest.mark.parametrize(
    "pool, settings",
    [
        (np.zeros((0, 3, 12, 12), np.float32), SMALL),
        (np.zeros((5, 144), np.float32), SMALL),
        (np.zeros((5, 3, 3, 3), np.float32), SMALL),
    ],
)
def test_refuses_what_is_not_a_pool_of_images(pool, settings):
    with pytest.raises(ConfigError):
        fit_patch_features(pool, settings=settings)


def test_settings_refuse_nonsense():
    with pytest.raises(ConfigError):
        PatchSettings(filters=0)
    with pytest.raises(ConfigError):
        PatchSettings(whitening_eps=0.0)
    with pytest.raises(ConfigError, match="filters"):
        PatchSettings(filters=7)  # odd: no mirror pairs
    PatchSettings(filters=7, mirror_symmetric=False)
    with pytest.raises(ConfigError, match="square_root"):
        PatchSettings(square_root=1)  # type: ignore[arg-type]
