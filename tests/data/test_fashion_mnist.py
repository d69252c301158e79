"""The Fashion-MNIST loader: MNIST's IDX format in fashion-mnist/, then Debian's folder.

Small generated IDX files stand in for the real ones; the full files are checked by the
``full_data`` test at the end (deselected when FEDVOTE_DATA is unset).
"""

from __future__ import annotations

import dataclasses
import gzip
import struct

import numpy as np
import pytest

from fedvote.data import datasets, idx_files
from fedvote.data.datasets import available_datasets, dataset_status, has_official_test_split, load_splits
from fedvote.errors import ConfigError

# Xiao, Rasul & Vollgraf 2017 (and the shared datasets README): 6,000 / 1,000 per class.
FASHION_TRAIN_COUNTS = [6000] * 10
FASHION_TEST_COUNTS = [1000] * 10


@pytest.fixture(autouse=True)
def _no_env_data_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("FEDVOTE_DATA", raising=False)
    # Debian's folder, moved where each test controls it.
    system = tmp_path / "usr-share-datasets-fashion-mnist"
    kind = idx_files.IDX_DATASETS["fashion-mnist"]
    monkeypatch.setitem(idx_files.IDX_DATASETS, "fashion-mnist", dataclasses.replace(kind, system_dirs=(system,)))
    source = datasets._SOURCES["fashion-mnist"]
    monkeypatch.setitem(datasets._SOURCES, "fashion-mnist", dataclasses.replace(source, system_dirs=(system,)))
    return system


def write_idx(folder, n_train: int = 12, n_test: int = 5, seed: int = 0) -> None:
    """Gzipped IDX files of random 28x28 images and labels 0..9, under the official names."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("test", n_test)):
        image_name, label_name = idx_files.IDX_FILES[split]
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = (np.arange(n) % 10).astype(np.uint8)
        (folder / f"{image_name}.gz").write_bytes(
            gzip.compress(struct.pack(">IIII", 0x803, n, 28, 28) + images.tobytes())
        )
        (folder / f"{label_name}.gz").write_bytes(gzip.compress(struct.pack(">II", 0x801, n) + labels.tobytes()))


def test_registered_with_the_official_split_and_class_names(tmp_path):
    assert "fashion-mnist" in available_datasets() and has_official_test_split("fashion-mnist")
    write_idx(tmp_path / "fashion-mnist")
    splits = load_splits("fashion-mnist", tmp_path)
    assert splits.test is not None
    assert splits.train.features.shape == (12, 1, 28, 28) and splits.test.features.shape == (5, 1, 28, 28)
    assert splits.train.class_names[0] == "T-shirt/top" and splits.train.class_names[9] == "Ankle boot"
    assert splits.train.labels.tolist() == [*range(10), 0, 1]
    assert splits.train.name == "fashion-mnist" and "Fashion-MNIST train" in splits.train.description
    assert 0.0 <= splits.train.features.min() and splits.train.features.max() <= 1.0


def test_falls_back_to_debians_folder(tmp_path, _no_env_data_dir):
    write_idx(_no_env_data_dir)
    assert len(load_splits("fashion-mnist", tmp_path / "empty").train) == 12  # nothing in the data dir
    assert len(load_splits("fashion-mnist", None).train) == 12  # no data dir at all
    status = dataset_status("fashion-mnist", None)
    assert status.available and status.searched == (str(_no_env_data_dir),)


def test_the_data_dir_wins_over_debians_folder(tmp_path, _no_env_data_dir):
    write_idx(_no_env_data_dir, n_train=12)
    write_idx(tmp_path / "fashion-mnist", n_train=20)
    assert len(load_splits("fashion-mnist", tmp_path).train) == 20


def test_missing_files_name_every_folder_looked_in(tmp_path, _no_env_data_dir):
    with pytest.raises(ConfigError) as error:
        load_splits("fashion-mnist", tmp_path)
    message = error.value.detail
    assert error.value.argument == "data_dir" and "\n" not in message
    assert str(tmp_path / "fashion-mnist") in message and str(_no_env_data_dir) in message
    assert "apt-get install dataset-fashion-mnist" in message
    status = dataset_status("fashion-mnist", tmp_path)
    assert status.state == "missing" and status.searched[-1] == str(_no_env_data_dir)


def test_a_truncated_file_is_corrupt_and_named(tmp_path):
    write_idx(tmp_path / "fashion-mnist")
    path = tmp_path / "fashion-mnist" / "t10k-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes())[:-100]))
    with pytest.raises(ConfigError) as error:
        load_splits("fashion-mnist", tmp_path)
    assert error.value.detail.startswith(f"{path}: truncated")
    assert dataset_status("fashion-mnist", tmp_path).state == "corrupt"


@pytest.mark.full_data
def test_full_fashion_mnist_counts(full_data_dir):
    splits = load_splits("fashion-mnist", full_data_dir)
    assert splits.test is not None
    assert splits.train.features.shape == (60000, 1, 28, 28) and splits.test.features.shape == (10000, 1, 28, 28)
    assert np.bincount(splits.train.labels).tolist() == FASHION_TRAIN_COUNTS
    assert np.bincount(splits.test.labels).tolist() == FASHION_TEST_COUNTS


def test_debians_folder_is_the_packages_install_path():
    # dataset-fashion-mnist (Debian) installs the four files in /usr/share/datasets/fashion-mnist/.
    assert idx_files.DEBIAN_FASHION_MNIST.as_posix() == "/usr/share/datasets/fashion-mnist"
