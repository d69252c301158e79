"""fedvote.models.patch_features: Coates-Ng patch features fitted on the public pool only."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedvote.errors import ConfigError
from fedvote.models.features import _patch_extractor
from fedvote.models.patch_features import (
    PatchSettings,
    _normalise,
    fit_patch_features,
)

SMALL = PatchSettings(patch=4, filters=8, patches=2_000, kmeans_iterations=3, grid=2)


def _images(n: int, seed: int, shape=(3, 12, 12)) -> np.ndarray:
    return np.random.default_rng(seed).uniform(size=(n, *shape)).astype(np.float32)


def test_shapes_and_dim():
    module = fit_patch_features(_images(40, 0), seed=0, settings=SMALL)
    out = module(torch.as_tensor(_images(5, 1)))
    assert out.shape == (5, SMALL.dim()) == (5, 2 * 8 * 4)
    assert module.dim == SMALL.dim()
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


def test_the_folded_convolution_equals_the_patchwise_encoding():
    """conv form == normalise each window, whiten, dot with centroids, threshold, pool."""
    pool = _images(30, 0)
    module = fit_patch_features(pool, seed=0, settings=SMALL)
    x = torch.as_tensor(_images(3, 5))
    p, k = SMALL.patch, SMALL.filters
    windows = F.unfold(x, p).transpose(1, 2)  # (b, L, C·p²)
    normalised = _normalise(windows.reshape(-1, windows.shape[-1]), SMALL.norm_eps)
    dots = normalised @ module.kernels.reshape(k, -1).T + module.offsets  # (b·L, K)
    side = x.shape[-1] - p + 1
    dots = dots.reshape(x.shape[0], side, side, k).permute(0, 3, 1, 2)
    codes = torch.cat([F.relu(dots - SMALL.alpha), F.relu(-dots - SMALL.alpha)], dim=1)
    expected = F.adaptive_avg_pool2d(codes, SMALL.grid).reshape(x.shape[0], -1)
    torch.testing.assert_close(module(x), expected, rtol=1e-4, atol=1e-4)


def test_extractor_wraps_the_module():
    pool = _images(30, 0)
    extractor = _patch_extractor(pool, 0, SMALL, False)
    assert extractor.kind == "patch" and extractor.dim == SMALL.dim()
    assert extractor.input_shape == (3, 12, 12)
    out = extractor.transform(_images(4, 2).reshape(4, -1))  # flat rows are reshaped
    assert out.shape == (4, SMALL.dim()) and out.dtype == np.float32
    assert extractor.num_floats > 0


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
