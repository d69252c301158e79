"""The disk cache of learned public extractors: keyed by content, loaded on a hit, robust to bad files."""

import numpy as np
import pytest

import fedvote.models.features as features
from fedvote.models.extractor_cache import (
    CACHE_ENV,
    ExtractorCacheWarning,
    cache_path,
    default_cache_dir,
    extractor_key,
)
from fedvote.models.features import CACHED_KINDS, fit_feature_extractor

# The function that trains each learned kind, as features.py calls it (patched to count calls).
TRAINERS = {"autoencoder": "_train_autoencoder", "contrastive": "train_contrastive_encoder"}
SETTINGS = {"kind": "contrastive", "dim": 4, "seed": 0, "epochs": 1}


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(0).random((24, 1, 8, 8)).astype(np.float32)


def _count_training(monkeypatch, kind):
    """Patch ``kind``'s trainer to count its calls; returns the list of calls."""
    calls = []
    original = getattr(features, TRAINERS[kind])

    def counting(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(features, TRAINERS[kind], counting)
    return calls


def _refuse_training(monkeypatch, kind):
    def refuse(*args, **kwargs):
        raise AssertionError(f"{kind} was trained again instead of loaded from the cache")

    monkeypatch.setattr(features, TRAINERS[kind], refuse)


@pytest.mark.parametrize("kind", CACHED_KINDS)
def test_a_hit_loads_the_same_extractor_without_training(images, kind, tmp_path, monkeypatch):
    first = fit_feature_extractor(kind, images, dim=4, seed=0, epochs=1, cache=tmp_path)
    assert len(list(tmp_path.glob("*.pt"))) == 1
    _refuse_training(monkeypatch, kind)
    second = fit_feature_extractor(kind, images, dim=4, seed=0, epochs=1, cache=tmp_path)
    assert np.array_equal(first.transform(images), second.transform(images))
    assert (second.kind, second.dim, second.num_floats) == (first.kind, first.dim, first.num_floats)
    # a copy of the pool (another array, the same bytes) hits too
    fit_feature_extractor(kind, images.copy(), dim=4, seed=0, epochs=1, cache=tmp_path)


def test_the_cached_extractor_is_the_one_training_gives(images, tmp_path):
    trained = fit_feature_extractor("contrastive", images, dim=4, epochs=1)
    fit_feature_extractor("contrastive", images, dim=4, epochs=1, cache=tmp_path)  # miss: trains, stores
    loaded = fit_feature_extractor("contrastive", images, dim=4, epochs=1, cache=tmp_path)  # hit
    assert np.array_equal(trained.transform(images), loaded.transform(images))


@pytest.mark.parametrize(
    "change",
    [
        {"kind": "autoencoder"},
        {"dim": 5},
        {"seed": 1},
        {"epochs": 2},
        {"recipe": "another learning rate"},
    ],
)
def test_every_setting_is_part_of_the_key(images, change):
    assert extractor_key(images, **SETTINGS) != extractor_key(images, **{**SETTINGS, **change})


def test_the_pools_content_shape_and_dtype_are_part_of_the_key(images):
    key = extractor_key(images, **SETTINGS)
    one_pixel = images.copy()
    one_pixel[3, 0, 2, 5] += 1e-6  # one value of one image
    assert extractor_key(one_pixel, **SETTINGS) != key
    assert extractor_key(images.reshape(24, 1, 4, 16), **SETTINGS) != key  # same bytes, other shape
    assert extractor_key(images.astype(np.float64), **SETTINGS) != key
    assert extractor_key(np.asfortranarray(images), **SETTINGS) == key  # layout is not content
    assert len(key) == 64 and int(key, 16) >= 0  # SHA-256, hex


@pytest.mark.parametrize("damage", [b"", b"not a torch file", "another key"])
def test_a_damaged_cache_file_is_ignored_retrained_and_rewritten(images, tmp_path, monkeypatch, damage):
    reference = fit_feature_extractor("contrastive", images, dim=4, epochs=1)
    path = cache_path(tmp_path, extractor_key(images, **SETTINGS, recipe=repr(features._CONTRASTIVE)))
    if damage == "another key":  # a whole file, but of other settings, under this name
        fit_feature_extractor("contrastive", images, dim=4, seed=1, epochs=1, cache=tmp_path)
        next(p for p in tmp_path.glob("*.pt")).rename(path)
    else:
        path.write_bytes(damage)
    calls = _count_training(monkeypatch, "contrastive")
    with pytest.warns(ExtractorCacheWarning, match="unreadable"):
        retrained = fit_feature_extractor("contrastive", images, dim=4, epochs=1, cache=tmp_path)
    assert len(calls) == 1
    assert np.array_equal(retrained.transform(images), reference.transform(images))
    _refuse_training(monkeypatch, "contrastive")  # the rewritten file now loads
    loaded = fit_feature_extractor("contrastive", images, dim=4, epochs=1, cache=tmp_path)
    assert np.array_equal(loaded.transform(images), reference.transform(images))


def test_an_unwritable_cache_only_warns(images, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.warns(ExtractorCacheWarning, match="could not write"):
        phi = fit_feature_extractor("contrastive", images, dim=4, epochs=1, cache=blocker / "cache")
    assert phi.transform(images).shape == (24, 4)


def test_writes_leave_no_temporary_files(images, tmp_path):
    fit_feature_extractor("autoencoder", images, dim=3, epochs=1, cache=tmp_path)
    assert [p.suffix for p in tmp_path.iterdir()] == [".pt"]


def test_cache_true_uses_the_environment_directory_else_the_home_cache(images, tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "env"))
    assert default_cache_dir() == tmp_path / "env"
    fit_feature_extractor("autoencoder", images, dim=3, epochs=1, cache=True)
    assert len(list((tmp_path / "env").glob("*.pt"))) == 1
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "fedvote" / "extractors"


def test_no_cache_and_unlearned_kinds_touch_no_disk(images, tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    fit_feature_extractor("contrastive", images, dim=4, epochs=1)  # cache=False, the default
    fit_feature_extractor("pca", images, dim=4, cache=True)  # pca is fast: never cached
    assert list(tmp_path.iterdir()) == []
