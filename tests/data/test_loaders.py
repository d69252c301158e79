"""Loaders: the committed MNIST/USPS samples, npz and csv, resizing, and refusals of bad files."""

from __future__ import annotations

import gzip
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from fedvote.data.datasets import (
    MNIST_URL,
    USPS_URL,
    Dataset,
    available_datasets,
    has_official_test_split,
    is_dataset_name,
    load_dataset,
    load_splits,
    resize_images,
)
from fedvote.errors import ConfigError

MNIST_TRAIN_FIRST = [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]
MNIST_TEST_FIRST = [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
USPS_TRAIN_FIRST = [6, 5, 4, 7, 3, 6, 3, 1, 0, 1]
USPS_TEST_FIRST = [9, 6, 3, 6, 6, 0, 0, 0, 6, 9]
MNIST_NAMES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


@pytest.fixture(autouse=True)
def _no_env_data_dir(monkeypatch):
    # These tests name their directories; $FEDVOTE_DATA (set in CI) must not leak in.
    monkeypatch.delenv("FEDVOTE_DATA", raising=False)


def _is_image_dataset(d: Dataset, shape: tuple[int, ...]) -> None:
    assert d.example_shape == shape
    assert d.features.dtype == np.float32
    assert d.labels.dtype == np.int64
    assert 0.0 <= d.features.min() and d.features.max() <= 1.0
    assert d.num_classes == 10


# --------------------------------------------------------------------------- samples


def test_mnist_sample_keeps_the_official_split(mnist_sample, mnist_sample_test):
    _is_image_dataset(mnist_sample, (1, 28, 28))
    _is_image_dataset(mnist_sample_test, (1, 28, 28))
    assert len(mnist_sample) == 500 and len(mnist_sample_test) == 200
    assert mnist_sample.labels[:10].tolist() == MNIST_TRAIN_FIRST
    assert mnist_sample_test.labels[:10].tolist() == MNIST_TEST_FIRST
    assert mnist_sample.features.max() == 1.0  # 255 -> 1


def test_split_all_is_train_then_test(samples_dir, mnist_sample, mnist_sample_test):
    both = load_dataset("mnist", samples_dir, split="all")
    assert len(both) == 700
    assert np.array_equal(both.features[:500], mnist_sample.features)
    assert np.array_equal(both.labels[500:], mnist_sample_test.labels)
    splits = load_splits("mnist", samples_dir)
    assert splits.test is not None and len(splits.train) == 500 and len(splits.test) == 200


def test_usps_sample_maps_minus_one_one_to_unit_interval(usps_sample, usps_sample_test):
    _is_image_dataset(usps_sample, (1, 16, 16))
    _is_image_dataset(usps_sample_test, (1, 16, 16))
    assert len(usps_sample) == 500 and len(usps_sample_test) == 200
    assert usps_sample.labels[:10].tolist() == USPS_TRAIN_FIRST
    assert usps_sample_test.labels[:10].tolist() == USPS_TEST_FIRST
    assert usps_sample.features.min() == 0.0 and usps_sample.features.max() == 1.0


def test_usps_values_and_row_major_layout(tmp_path):
    pixels = np.linspace(-1.0, 1.0, 256)
    (tmp_path / "zip.train").write_text("3.0000 " + " ".join(f"{v:.4f}" for v in pixels) + "\n")
    d = load_dataset("usps", tmp_path)
    assert d.labels.tolist() == [3]
    expected = ((np.round(pixels, 4) + 1) / 2).reshape(16, 16)
    assert np.allclose(d.features[0, 0], expected, atol=1e-6)
    assert d.features[0, 0, 0, 1] > d.features[0, 0, 0, 0]  # row-major: second value is (0, 1)


def test_data_dir_defaults_to_the_environment(monkeypatch, samples_dir):
    monkeypatch.setenv("FEDVOTE_DATA", str(samples_dir))
    assert len(load_dataset("mnist")) == 500
    assert len(load_dataset("usps", split="test")) == 200


def test_files_directly_in_the_directory_gzipped_or_not(tmp_path, samples_dir):
    for path in (samples_dir / "mnist").iterdir():
        (tmp_path / path.name.removesuffix(".gz")).write_bytes(gzip.decompress(path.read_bytes()))
    shutil.copy(samples_dir / "usps" / "zip.test.gz", tmp_path / "zip.test.gz")
    shutil.copy(samples_dir / "usps" / "zip.train.gz", tmp_path / "zip.train.gz")
    plain = load_dataset("mnist", tmp_path)
    assert np.array_equal(plain.features, load_dataset("mnist", samples_dir).features)
    assert len(load_dataset("usps", tmp_path, split="test")) == 200


def test_dotted_idx_names_are_accepted(tmp_path, samples_dir):
    for path in (samples_dir / "mnist").iterdir():
        shutil.copy(path, tmp_path / path.name.replace("-idx", ".idx"))
    assert load_dataset("mnist", tmp_path, split="test").labels[:10].tolist() == MNIST_TEST_FIRST


# --------------------------------------------------------------------------- refusals


def _one_line_error(call, argument: str = "data_dir") -> str:
    with pytest.raises(ConfigError) as error:
        call()
    assert error.value.argument == argument
    message = error.value.detail
    assert "\n" not in message
    return message


def test_no_data_directory_says_how_to_give_one():
    message = _one_line_error(lambda: load_dataset("mnist"))
    assert "FEDVOTE_DATA" in message and "--data-dir" in message and MNIST_URL in message


@pytest.mark.parametrize(("name", "missing", "url"), [("mnist", "train-images-idx3-ubyte", MNIST_URL),
                                                     ("usps", "zip.train", USPS_URL)])
def test_missing_files_are_named_with_where_to_get_them(tmp_path, name, missing, url):
    message = _one_line_error(lambda: load_dataset(name, tmp_path))
    assert missing in message and url in message and str(tmp_path / name) in message


def test_a_data_directory_the_file_system_cannot_search_is_one_line_naming_data_dir(tmp_path):
    too_long = tmp_path / ("n" * 300)  # a component longer than NAME_MAX: is_file() raises OSError
    with pytest.raises(ConfigError) as error:
        load_dataset("mnist", too_long)
    assert error.value.argument == "data_dir" and "\n" not in str(error.value)


def test_a_missing_test_file_is_named(tmp_path, samples_dir):
    shutil.copytree(samples_dir / "mnist", tmp_path / "mnist")
    (tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz").unlink()
    assert len(load_dataset("mnist", tmp_path)) == 500  # the train split needs only its own files
    message = _one_line_error(lambda: load_dataset("mnist", tmp_path, split="test"))
    assert "t10k-labels-idx1-ubyte" in message


def _mnist_copy(tmp_path: Path, samples_dir: Path) -> Path:
    target = tmp_path / "mnist"
    target.mkdir()
    for path in (samples_dir / "mnist").iterdir():
        (target / path.name.removesuffix(".gz")).write_bytes(gzip.decompress(path.read_bytes()))
    return target


def _corrupt_magic(raw: bytes) -> bytes:
    return struct.pack(">I", 0x0803 + 1) + raw[4:]


@pytest.mark.parametrize(
    ("file", "corrupt", "expected"),
    [
        ("train_images", _corrupt_magic, "magic"),
        ("train_labels", lambda raw: struct.pack(">I", 0x0803) + raw[4:], "magic"),
        ("train_images", lambda raw: raw[:-100], "truncated"),
        ("train_images", lambda raw: raw + b"\0" * 7, "trailing"),
        ("train_labels", lambda raw: raw[:6], "too short"),
        ("train_labels", lambda raw: raw[:4] + struct.pack(">I", 499) + raw[8:-1], "labels"),
        ("train_labels", lambda raw: raw[:8] + b"\x0c" + raw[9:], "label 12"),
        ("train_images", lambda raw: gzip.compress(raw)[:-20], "gzip"),
        ("train_images", lambda raw: b"\x1f\x8b" + b"not really gzip" * 10, "gzip"),
    ],
)
def test_corrupt_mnist_files_are_refused_naming_the_file(tmp_path, samples_dir, file, corrupt, expected):
    folder = _mnist_copy(tmp_path, samples_dir)
    path = folder / MNIST_NAMES[file]
    path.write_bytes(corrupt(path.read_bytes()))
    message = _one_line_error(lambda: load_dataset("mnist", tmp_path))
    assert MNIST_NAMES[file] in message
    assert expected in message
    assert MNIST_URL in message


def test_a_gz_name_without_gzip_content_is_refused(tmp_path, samples_dir):
    folder = _mnist_copy(tmp_path, samples_dir)
    (folder / "t10k-images-idx3-ubyte").rename(folder / "t10k-images-idx3-ubyte.gz")
    message = _one_line_error(lambda: load_dataset("mnist", tmp_path, split="test"))
    assert "t10k-images-idx3-ubyte.gz" in message and "not gzip" in message


def _usps_line(label: str = "1", values: list[str] | None = None) -> str:
    return " ".join([label, *(values if values is not None else ["-1"] * 256)]) + "\n"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (_usps_line() + _usps_line("2", ["abc"] * 256), "numeric"),
        (_usps_line(values=["0"] * 100), "values per line"),
        (_usps_line() + _usps_line(values=["0"] * 200), "numeric"),  # ragged
        (_usps_line("11"), "labels 0..9"),
        (_usps_line("1.5"), "labels 0..9"),
        (_usps_line(values=["2.5"] * 256), "expected [-1, 1]"),
        (_usps_line(values=["nan"] * 256), "non-finite"),
        ("", "empty"),
        ("   \n\n", "empty"),
    ],
)
def test_corrupt_usps_files_are_refused_naming_the_file(tmp_path, content, expected):
    (tmp_path / "usps").mkdir()
    path = tmp_path / "usps" / "zip.train.gz"
    path.write_bytes(gzip.compress(content.encode()))
    message = _one_line_error(lambda: load_dataset("usps", tmp_path))
    assert str(path) in message and expected in message and USPS_URL in message


def test_truncated_usps_gzip_is_refused(tmp_path, samples_dir):
    raw = (samples_dir / "usps" / "zip.test.gz").read_bytes()
    (tmp_path / "zip.test.gz").write_bytes(raw[: len(raw) // 2])
    message = _one_line_error(lambda: load_dataset("usps", tmp_path, split="test"))
    assert "zip.test.gz" in message and "gzip" in message


def test_binary_usps_file_is_refused(tmp_path):
    (tmp_path / "zip.train").write_bytes(bytes(range(256)))
    assert "not a text file" in _one_line_error(lambda: load_dataset("usps", tmp_path))


# --------------------------------------------------------------------------- names and splits


def test_names_and_splits():
    assert set(available_datasets()) >= {"digits", "mnist", "usps"}
    assert is_dataset_name("npz:x.npz") and is_dataset_name("csv:a/b.csv") and is_dataset_name("mnist")
    assert not is_dataset_name("npz:") and not is_dataset_name("svhn")
    assert has_official_test_split("mnist") and not has_official_test_split("digits")
    assert _one_line_error(lambda: load_dataset("svhn"), "dataset")
    assert _one_line_error(lambda: load_dataset("digits", split="test"), "split")
    assert _one_line_error(lambda: load_dataset("digits", split="validation"), "split")
    assert len(load_dataset("digits", split="all")) == len(load_dataset("digits")) == 1797
    assert load_splits("digits").test is None


# --------------------------------------------------------------------------- npz


def test_npz_uint8_images_with_a_test_split(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(30, 12, 12), dtype=np.uint8)
    y = rng.integers(0, 4, size=30)
    x_test = rng.integers(0, 256, size=(5, 12, 12), dtype=np.uint8)
    y_test = np.array([0, 1, 2, 3, 4])
    np.savez(tmp_path / "mine.npz", x=x, y=y, x_test=x_test, y_test=y_test)
    name = f"npz:{tmp_path / 'mine.npz'}"
    train = load_dataset(name)
    _is_image = train.example_shape == (1, 12, 12)
    assert _is_image and train.features.dtype == np.float32
    assert np.allclose(train.features[:, 0] * 255, x)
    assert train.num_classes == 5  # the test split's class 4 counts too
    test = load_dataset(name, split="test")
    assert test.labels.tolist() == [0, 1, 2, 3, 4]
    assert len(load_dataset(name, split="all")) == 35
    assert load_dataset(name, resize_to=(6, 6)).example_shape == (1, 6, 6)


def test_npz_vectors_string_labels_and_relative_paths(tmp_path):
    x = np.arange(12, dtype=np.float64).reshape(4, 3) - 5.0  # vectors may take any value
    y = np.array(["dog", "cat", "dog", "emu"])
    np.savez(tmp_path / "v.npz", x=x, y=y)
    d = load_dataset("npz:v.npz", tmp_path)  # relative to the data directory
    assert d.example_shape == (3,)
    assert d.class_names == ("cat", "dog", "emu") and d.labels.tolist() == [1, 0, 1, 2]
    assert np.array_equal(d.features, x.astype(np.float32))
    assert _one_line_error(lambda: load_dataset("npz:v.npz", tmp_path, split="test"), "split")
    assert _one_line_error(lambda: load_dataset("npz:v.npz", tmp_path, resize_to=(2, 2)), "resize_to")


def test_npz_channels_last_and_image_shape(tmp_path):
    x = np.zeros((3, 10, 10, 3), dtype=np.uint8)
    np.savez(tmp_path / "rgb.npz", x=x, y=np.zeros(3, dtype=int))
    assert load_dataset(f"npz:{tmp_path / 'rgb.npz'}").example_shape == (3, 10, 10)
    np.savez(tmp_path / "flat.npz", x=np.full((3, 64), 255, dtype=np.int64), y=np.arange(3))
    d = load_dataset(f"npz:{tmp_path / 'flat.npz'}", image_shape=(8, 8))
    assert d.example_shape == (1, 8, 8) and d.features.max() == 1.0  # integers 0..255 -> [0, 1]
    assert _one_line_error(lambda: load_dataset(f"npz:{tmp_path / 'flat.npz'}", image_shape=(7, 7)), "image_shape")


@pytest.mark.parametrize(
    ("arrays", "expected"),
    [
        ({"x": np.zeros((3, 4))}, "no array y"),
        ({"features": np.zeros((3, 4)), "labels": np.zeros(3)}, "no array x or y"),
        ({"x": np.zeros((3, 4)), "y": np.zeros(2)}, "3 examples but y has 2"),
        ({"x": np.full((3, 4, 4), 2.5), "y": np.zeros(3)}, "pixel values"),
        ({"x": np.full((3, 4, 4), -0.5), "y": np.zeros(3)}, "pixel values"),
        ({"x": np.zeros((3, 4)), "y": np.array([0.0, np.nan, 1.0])}, "non-finite"),
        ({"x": np.zeros((3, 4)), "y": np.zeros(3), "x_test": np.zeros((2, 4))}, "only one of"),
        ({"x": np.zeros((3, 4)), "y": np.zeros(3), "x_test": np.zeros((2, 5)), "y_test": np.zeros(2)}, "differ"),
        ({"x": np.zeros(3), "y": np.zeros(3)}, "one row per example"),
    ],
)
def test_bad_npz_archives_are_refused(tmp_path, arrays, expected):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    message = _one_line_error(lambda: load_dataset(f"npz:{path}"), "dataset")  # the file --dataset names
    assert str(path) in message and expected in message


def test_unreadable_or_absent_npz(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"this is not a zip archive")
    junk = f"npz:{tmp_path / 'junk.npz'}"
    assert "not a readable .npz" in _one_line_error(lambda: load_dataset(junk), "dataset")
    assert "not found" in _one_line_error(lambda: load_dataset(f"npz:{tmp_path / 'nope.npz'}"), "dataset")


# --------------------------------------------------------------------------- csv


def test_csv_with_a_label_column_anywhere(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,digit,b\n0.5,3,1.5\n-1,0,2\n4,3,0\n")
    d = load_dataset(f"csv:{path}", label_column="digit")
    assert d.example_shape == (2,)
    assert d.labels.tolist() == [3, 0, 3] and d.num_classes == 4
    assert np.array_equal(d.features, np.array([[0.5, 1.5], [-1, 2], [4, 0]], dtype=np.float32))


def test_csv_images_gzipped_with_string_labels(tmp_path):
    rows = ["label," + ",".join(f"p{i}" for i in range(16))]
    rows += [f"{name}," + ",".join(str(v) for v in range(0, 256, 16)) for name in ("b", "a", "b")]
    path = tmp_path / "img.csv.gz"
    path.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode()))
    d = load_dataset(f"csv:{path}", image_shape=(4, 4), resize_to=(2, 2))
    assert d.example_shape == (1, 2, 2)
    assert d.class_names == ("a", "b") and d.labels.tolist() == [1, 0, 1]
    assert 0.0 <= d.features.min() and d.features.max() <= 1.0


@pytest.mark.parametrize(
    ("text", "kwargs", "argument", "expected"),
    [
        ("x,y\n1,2\n", {}, "label_column", "no column 'label'"),
        # the file is the one --dataset csv:PATH names, not one found in --data-dir
        ("label,x\n1,abc\n", {}, "dataset", "numeric"),
        ("label,x\n1,2,3\n1\n", {}, "dataset", "numeric"),
        ("label\n1\n", {}, "dataset", "no feature column"),
        ("label,x\n", {}, "dataset", "no data rows"),
        ("", {}, "dataset", "empty"),
    ],
)
def test_bad_csv_files_are_refused(tmp_path, text, kwargs, argument, expected):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    message = _one_line_error(lambda: load_dataset(f"csv:{path}", **kwargs), argument)
    assert str(path) in message and expected in message


# --------------------------------------------------------------------------- resizing


def test_resize_mixes_domains(mnist_sample, usps_sample):
    small = mnist_sample.resized((16, 16))
    _is_image_dataset(small, (1, 16, 16))
    assert np.array_equal(small.labels, mnist_sample.labels)
    big = usps_sample.resized((28, 28))
    _is_image_dataset(big, (1, 28, 28))
    assert usps_sample.resized((16, 16)) is usps_sample
    # Area resampling by an integer factor averages 2x2 blocks: the mean intensity is kept.
    half = mnist_sample.resized((14, 14)).features
    assert np.allclose(half.mean(axis=(1, 2, 3)), mnist_sample.features.mean(axis=(1, 2, 3)), atol=1e-5)
    assert np.allclose(half[:, :, 3, 5], mnist_sample.features[:, :, 6:8, 10:12].mean(axis=(2, 3)), atol=1e-6)


def test_resize_through_the_loader_and_modes(samples_dir, mnist_sample):
    loaded = load_dataset("mnist", samples_dir, resize_to=(14, 14))
    assert np.array_equal(loaded.features, mnist_sample.resized((14, 14)).features)
    constant = np.full((2, 1, 5, 5), 0.25, dtype=np.float32)
    for mode in ("auto", "area", "bilinear"):
        assert np.allclose(resize_images(constant, (9, 3), mode), 0.25)
    with pytest.raises(ConfigError) as error:
        resize_images(constant, (0, 3))
    assert error.value.argument == "resize_to"
    with pytest.raises(ConfigError):
        resize_images(constant, (3, 3), "cubic")


def test_digits_read_from_the_bundled_file_equal_scikit_learns_loader():
    # load_digits parses scikit-learn's digits.csv.gz itself (scikit-learn's import is slow):
    # the same images and labels as sklearn.datasets.load_digits, and no scikit-learn import.
    import subprocess
    import sys

    from sklearn.datasets import load_digits as sklearn_digits

    from fedvote.data.datasets import load_digits

    ours, theirs = load_digits(), sklearn_digits()
    assert ours.features.shape == (1797, 1, 8, 8) and ours.features.dtype == np.float32
    np.testing.assert_array_equal(ours.features, (theirs.images / 16.0).astype(np.float32)[:, None])
    np.testing.assert_array_equal(ours.labels, theirs.target)
    probe = "import sys; from fedvote.data.datasets import load_digits; load_digits(); print('sklearn' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "False"
