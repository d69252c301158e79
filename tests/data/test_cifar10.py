"""The CIFAR-10 (JPEG copy) loader on small generated archives: layout, cache, refusals.

The full files are checked by the ``full_data`` test at the end (deselected when
FEDVOTE_DATA is unset).
"""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from PIL import Image

from fedvote.cli import main
from fedvote.data import cifar10
from fedvote.data.datasets import available_datasets, dataset_status, has_official_test_split, load_splits
from fedvote.errors import ConfigError


@pytest.fixture(autouse=True)
def _own_dirs(monkeypatch, tmp_path):
    monkeypatch.delenv("FEDVOTE_DATA", raising=False)
    monkeypatch.setenv("FEDVOTE_CACHE", str(tmp_path / "cache"))


@pytest.fixture()
def data_dir(tmp_path, cifar10_archive):
    root = tmp_path / "data"
    for split, n, seed in (("train", 30, 0), ("test", 12, 1)):
        pixels, labels = cifar10_archive.images(n, seed)
        cifar10_archive.write(root / "cifar10" / cifar10.SPLIT_FILES[split], pixels, labels)
    return root


def test_registered_with_an_official_test_split():
    assert "cifar10" in available_datasets() and has_official_test_split("cifar10")


def test_decodes_to_rgb_chw_in_unit_interval(data_dir, cifar10_archive):
    splits = load_splits("cifar10", data_dir)
    assert splits.test is not None
    train, test = splits.train, splits.test
    assert train.features.shape == (30, 3, 32, 32) and test.features.shape == (12, 3, 32, 32)
    assert train.features.dtype == np.float32 and train.labels.dtype == np.int64
    assert 0.0 <= train.features.min() and train.features.max() <= 1.0
    assert train.class_names == cifar10.CLASSES and train.labels[:12].tolist() == [*range(10), 0, 1]
    assert "CIFAR-10 (JPEG copy)" in train.description and train.split == "train" and test.split == "test"
    # Channels are R, G, B in that order and rows are the image's rows: compare with the source.
    pixels, _ = cifar10_archive.images(30, 0)
    assert np.abs(train.features[:, :, :, :] * 255 - pixels.transpose(0, 3, 1, 2)).mean() < 3.0


def test_found_directly_in_the_data_dir_and_through_the_environment(data_dir, monkeypatch):
    flat = data_dir / "flat"
    flat.mkdir()
    for name in cifar10.SPLIT_FILES.values():
        (flat / name).write_bytes((data_dir / "cifar10" / name).read_bytes())
    assert len(load_splits("cifar10", flat).train) == 30
    monkeypatch.setenv("FEDVOTE_DATA", str(data_dir))
    assert len(load_splits("cifar10").train) == 30


def test_the_decoded_arrays_are_cached_by_content(data_dir, tmp_path, monkeypatch, cifar10_archive):
    first = load_splits("cifar10", data_dir).train
    cached = sorted((tmp_path / "cache" / "cifar10").glob("*.npz"))
    assert len(cached) == 2  # one per split, named by the source's SHA-256
    assert not list((tmp_path / "cache" / "cifar10").glob(".*.tmp"))  # written atomically

    def refuse(*args, **kwargs):
        raise AssertionError("decoded again although cached")

    monkeypatch.setattr(cifar10, "_decode_all", refuse)
    again = load_splits("cifar10", data_dir).train
    assert np.array_equal(first.features, again.features) and np.array_equal(first.labels, again.labels)
    # A changed source file is another key: decoded again.
    pixels, labels = cifar10_archive.images(30, 7)
    cifar10_archive.write(data_dir / "cifar10" / "train-jpeg.npz", pixels, labels)
    with pytest.raises(AssertionError, match="decoded again"):
        load_splits("cifar10", data_dir)


def test_a_damaged_cache_file_is_decoded_again(data_dir, tmp_path):
    first = load_splits("cifar10", data_dir).train
    for path in (tmp_path / "cache" / "cifar10").glob("*.npz"):
        path.write_bytes(b"not an npz")
    again = load_splits("cifar10", data_dir).train
    assert np.array_equal(first.features, again.features)


def test_cache_directory_follows_xdg_without_fedvote_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("FEDVOTE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cifar10.cache_dir() == tmp_path / "xdg" / "fedvote" / "cifar10"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cifar10.cache_dir() == cifar10.Path.home() / ".cache" / "fedvote" / "cifar10"


def test_an_unwritable_cache_only_costs_decoding(data_dir, tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("FEDVOTE_CACHE", str(blocker))
    assert len(load_splits("cifar10", data_dir).train) == 30
    assert "could not cache" in capsys.readouterr().err


def _refusal(data_dir) -> str:
    with pytest.raises(ConfigError) as error:
        load_splits("cifar10", data_dir)
    assert error.value.argument == "data_dir"
    message = error.value.detail
    assert "\n" not in message
    return message


def test_missing_file_names_it_and_where_to_get_it(tmp_path):
    message = _refusal(tmp_path)
    assert "train-jpeg.npz not found in" in message and str(tmp_path / "cifar10") in message
    assert "DATA_DIR/cifar10/" in message


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda path: path.write_bytes(b"PK\x03\x04 garbage"), "not a readable .npz archive"),
        (lambda path: path.write_bytes(path.read_bytes()[:500]), "not a readable .npz archive"),
        ("no_offsets", "no array offsets"),
        ("short_offsets", "offsets for 30 labels"),
        ("falling_offsets", "offsets must rise from 0"),
        ("bad_label", "expected 0..9"),
        ("bad_jpeg", "the image at index 3 (of 30) does not decode (not an image Pillow can identify); "),
        ("png", "the image at index 0 (of 30) does not decode (a PNG image, not a JPEG)"),
        ("wrong_size", "the image at index 0 (of 30) does not decode (16x16, expected 32x32)"),
        ("truncated_jpeg", "the image at index 29 (of 30) does not decode ("),
        ("pixels_2d", "jpeg must be 1-D uint8 bytes"),
        ("classes", "classes must be 10 names"),
    ],
)
def test_a_corrupt_file_is_one_line_naming_it(data_dir, damage, expected, cifar10_archive):
    path = data_dir / "cifar10" / "train-jpeg.npz"
    pixels, labels = cifar10_archive.images(30, 0)
    blobs = [cifar10_archive.jpeg(p) for p in pixels]
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in blobs])]).astype(np.int64)
    if callable(damage):
        damage(path)
    elif damage == "no_offsets":
        cifar10_archive.write(path, pixels, labels, offsets=None)
    elif damage == "short_offsets":
        cifar10_archive.write(path, pixels, labels, offsets=offsets[:-1])
    elif damage == "falling_offsets":
        cifar10_archive.write(path, pixels, labels, offsets=offsets[::-1].copy())
    elif damage == "bad_label":
        cifar10_archive.write(path, pixels, np.full(30, 12, dtype=np.uint8))
    elif damage == "bad_jpeg":
        jpeg = np.frombuffer(b"".join(blobs), dtype=np.uint8).copy()
        jpeg[offsets[3] : offsets[3] + 40] = 0  # the JPEG header of image 3
        cifar10_archive.write(path, pixels, labels, jpeg=jpeg)
    elif damage in ("png", "wrong_size"):
        buffer = io.BytesIO()
        if damage == "png":
            Image.fromarray(pixels[0]).save(buffer, format="PNG")
        else:
            Image.fromarray(pixels[0][:16, :16]).save(buffer, format="JPEG")
        first = buffer.getvalue()
        jpeg = np.frombuffer(first + b"".join(blobs[1:]), dtype=np.uint8)
        moved = np.concatenate([[0], len(first) + offsets[1:] - offsets[1]]).astype(np.int64)
        cifar10_archive.write(path, pixels, labels, jpeg=jpeg, offsets=moved)
    elif damage == "truncated_jpeg":  # the last image's bytes cut short: Pillow reads past its end
        cut = offsets.copy()
        cut[-1] = offsets[-2] + (offsets[-1] - offsets[-2]) // 2
        jpeg = np.frombuffer(b"".join(blobs), dtype=np.uint8)[: cut[-1]]
        cifar10_archive.write(path, pixels, labels, jpeg=jpeg, offsets=cut)
    elif damage == "pixels_2d":
        cifar10_archive.write(path, pixels, labels, jpeg=pixels.reshape(30, -1))
    elif damage == "classes":
        cifar10_archive.write(path, pixels, labels, classes=np.array(["a", "b"]))
    message = _refusal(data_dir)
    assert message.startswith(f"{path}: ") and expected in message
    assert " object at 0x" not in message  # no repr of the in-memory buffer Pillow was given


def test_data_list_and_the_command_line(data_dir, capsys):
    status = dataset_status("cifar10", data_dir)
    assert status.available and status.splits["train"]["count"] == 30
    assert status.splits["test"]["shape"] == [3, 32, 32] and "CIFAR-10 (JPEG copy)" in status.description
    with pytest.raises(SystemExit) as exit_info:
        main(["data", "list", "--data-dir", str(data_dir)])
        raise SystemExit(0)
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "cifar10 available train 30 x (3, 32, 32), test 12 x (3, 32, 32), 10 classes" in out
    assert "CIFAR-10 (JPEG copy)" in out


def test_a_corrupt_file_exits_2_with_one_line(data_dir, capsys):
    (data_dir / "cifar10" / "test-jpeg.npz").write_bytes(b"garbage")
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--dataset", "cifar10", "--data-dir", str(data_dir), "--agents", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1
    assert err[0].startswith("fedvote: error: --data-dir: ") and "test-jpeg.npz: not a readable" in err[0]


def test_a_damaged_jpeg_on_the_command_line_names_the_file_and_the_index(data_dir, capsys, cifar10_archive):
    path = data_dir / "cifar10" / "test-jpeg.npz"
    pixels, labels = cifar10_archive.images(12, 1)
    blobs = [cifar10_archive.jpeg(p) for p in pixels]
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in blobs])]).astype(np.int64)
    jpeg = np.frombuffer(b"".join(blobs), dtype=np.uint8).copy()
    jpeg[offsets[7] : offsets[7] + 40] = 0  # the JPEG header of image 7
    cifar10_archive.write(path, pixels, labels, jpeg=jpeg)
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--dataset", "cifar10", "--data-dir", str(data_dir), "--agents", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1
    assert err[0].startswith(f"fedvote: error: --data-dir: {path}: the image at index 7 (of 12) does not decode")
    assert "BytesIO" not in err[0] and " object at 0x" not in err[0]


# --------------------------------------------------------------------------- full files


@pytest.mark.full_data
def test_full_cifar10_counts_and_balance(full_data_dir):
    splits = load_splits("cifar10", full_data_dir)
    assert splits.test is not None
    assert splits.train.features.shape == (50000, 3, 32, 32) and splits.test.features.shape == (10000, 3, 32, 32)
    assert np.bincount(splits.train.labels).tolist() == [5000] * 10
    assert np.bincount(splits.test.labels).tolist() == [1000] * 10
    assert os.path.basename(dataset_status("cifar10", full_data_dir).splits["train"]["files"][0]) == (
        "train-jpeg.npz"
    )
