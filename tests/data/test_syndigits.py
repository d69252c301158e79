"""The synthetic digits domain: deterministic under a seed, well formed, a real shift from MNIST."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.linear_model import LogisticRegression

from fedvote.cli.data import data
from fedvote.data import syndigits
from fedvote.data.channels import LUMA_WEIGHTS, luminance
from fedvote.data.datasets import Dataset, dataset_status, load_dataset, load_splits, resize_images
from fedvote.data.syndigits import FONTS, cache_key, make_syndigits, read_split
from fedvote.errors import ConfigError


@pytest.fixture(scope="module")
def small() -> Dataset:
    return make_syndigits(300, 3)


def test_the_same_seed_gives_the_same_bytes_and_another_seed_other_images(small):
    again = make_syndigits(300, 3)
    assert small.features.tobytes() == again.features.tobytes()
    assert small.labels.tobytes() == again.labels.tobytes()
    other = make_syndigits(300, 4)
    assert not np.array_equal(small.features, other.features)
    # No image repeats across the two seeds (a shared stream would repeat them shifted).
    flat = {row.tobytes() for row in small.features.reshape(300, -1)}
    assert not flat & {row.tobytes() for row in other.features.reshape(300, -1)}


def test_shape_dtype_range_and_eight_bit_values(small):
    assert small.features.shape == (300, 3, 32, 32) and small.features.dtype == np.float32
    assert small.features.min() >= 0.0 and small.features.max() <= 1.0
    scaled = small.features * 255.0
    assert np.abs(scaled - np.rint(scaled)).max() < 1e-3  # multiples of 1/255: stored uint8 is exact
    assert small.labels.dtype == np.int64 and small.class_names == tuple("0123456789")
    assert small.name == "syndigits" and small.split == "train"
    # The description records the generator and the font list (determinism is per font set).
    assert "seed 3" in small.description and "dejavu/DejaVuSans.ttf" in small.description


def test_labels_are_balanced(small):
    counts = np.bincount(small.labels, minlength=10)
    assert counts.tolist() == [30] * 10
    assert np.bincount(make_syndigits(1003, 0).labels, minlength=10).max() == 101


def test_images_are_coloured_and_hold_a_contrasting_glyph(small):
    # Colour: the channels differ (an all-grey generator would fail this).
    assert np.abs(small.features[:, 0] - small.features[:, 1]).mean() > 0.05
    # Every image holds ink: its luminance range (5th to 95th percentile) is beyond the background's.
    grey = luminance(small.features).reshape(300, -1)
    assert (np.percentile(grey, 95, axis=1) - np.percentile(grey, 5, axis=1)).min() > 0.05


def test_luminance_uses_the_bt601_weights():
    rng = np.random.default_rng(0)
    rgb = rng.uniform(0.0, 1.0, (4, 3, 5, 6)).astype(np.float32)
    expected = sum(w * rgb[:, c] for c, w in enumerate(LUMA_WEIGHTS))[:, None]
    np.testing.assert_allclose(luminance(rgb), expected, rtol=1e-6)
    with pytest.raises(ConfigError):
        luminance(rgb[:, :1])


def test_a_classifier_trained_on_mnist_loses_over_20_points_on_syndigits(mnist_sample, mnist_sample_test):
    # MNIST's grey 28x28 framing: syndigits as the federation brings it there (luminance, resized).
    model = LogisticRegression(max_iter=300).fit(mnist_sample.features.reshape(len(mnist_sample), -1),
                                                 mnist_sample.labels)
    on_mnist = model.score(mnist_sample_test.features.reshape(len(mnist_sample_test), -1), mnist_sample_test.labels)
    synthetic = make_syndigits(500, 7)
    grey = resize_images(luminance(synthetic.features), (28, 28))
    on_syndigits = model.score(grey.reshape(len(grey), -1), synthetic.labels)
    assert on_mnist > 0.8
    assert on_mnist - on_syndigits >= 0.20, (on_mnist, on_syndigits)


def test_bad_arguments_and_no_fonts_are_one_line_errors():
    for count in (0, -1, 2.5, True, syndigits.MAX_COUNT + 1):
        with pytest.raises(ConfigError, match="^count: "):
            make_syndigits(count, 0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="^seed: "):
        make_syndigits(10, -1)
    with pytest.raises(ConfigError) as error:
        make_syndigits(10, 0, fonts=())
    assert "fonts-dejavu-core" in str(error.value) and "\n" not in str(error.value)


def test_the_cache_key_covers_fonts_count_and_seed():
    key = cache_key(100, 0)
    assert key == cache_key(100, 0)
    assert len({key, cache_key(101, 0), cache_key(100, 1), cache_key(100, 0, FONTS[:3])}) == 4


def test_without_files_the_registered_dataset_is_generated_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(syndigits, "DEFAULT_COUNTS", {"train": 40, "test": 20})
    monkeypatch.setenv("FEDVOTE_CACHE", str(tmp_path / "cache"))
    splits = load_splits("syndigits", tmp_path)
    assert len(splits.train) == 40 and splits.test is not None and len(splits.test) == 20
    assert np.array_equal(splits.train.features, make_syndigits(40, syndigits.DEFAULT_SEEDS["train"]).features)
    stored = sorted((tmp_path / "cache" / "syndigits").glob("*.npz"))
    assert [p.name for p in stored] == sorted(f"{cache_key(n, s)}.npz" for n, s in ((40, 0), (20, 1)))
    generate = syndigits.make_syndigits
    monkeypatch.setattr(syndigits, "make_syndigits", lambda *a, **k: pytest.fail("generated again"))
    assert np.array_equal(load_dataset("syndigits", tmp_path, split="test").features, splits.test.features)
    # A damaged cache file is generated again and rewritten, not trusted.
    test_file = tmp_path / "cache" / "syndigits" / f"{cache_key(20, 1)}.npz"
    test_file.write_bytes(b"not an archive")
    monkeypatch.setattr(syndigits, "make_syndigits", generate)
    assert np.array_equal(load_dataset("syndigits", tmp_path, split="test").features, splits.test.features)
    assert read_split(test_file, "test").labels.tolist() == splits.test.labels.tolist()


def test_data_list_describes_syndigits_without_generating_it(tmp_path, monkeypatch):
    monkeypatch.setattr(syndigits, "make_syndigits", lambda *a, **k: pytest.fail("generated"))
    status = dataset_status("syndigits", tmp_path)
    assert status.available and status.splits["train"]["count"] == syndigits.DEFAULT_COUNTS["train"]
    assert status.splits["test"]["shape"] == [3, 32, 32] and status.splits["train"]["files"] == []
    result = CliRunner().invoke(data, ["list", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0 and "syndigits available train 20000 x (3, 32, 32)" in result.output
    assert "fedvote data make-syndigits" in result.output


def test_make_syndigits_writes_files_the_loader_and_data_list_read(tmp_path, invoke):
    code, out, err = invoke(["data", "make-syndigits", "--out", tmp_path, "--count", "30", "--seed", "5",
                             "--test-count", "12"])
    assert code == 0, err
    train_file, test_file = tmp_path / "syndigits" / "train.npz", tmp_path / "syndigits" / "test.npz"
    assert out.split() == [str(train_file), str(test_file)]
    assert not list((tmp_path / "syndigits").glob(".*"))  # no temporary file left behind
    train = load_dataset("syndigits", tmp_path)
    assert train.features.tobytes() == make_syndigits(30, 5).features.tobytes()
    assert load_dataset("syndigits", tmp_path, split="test").labels.tolist() == make_syndigits(12, 6).labels.tolist()
    status = dataset_status("syndigits", tmp_path)
    assert status.splits["train"]["count"] == 30 and status.splits["train"]["files"] == [str(train_file)]
    # Default test count: a quarter of the training count.
    code, _, err = invoke(["data", "make-syndigits", "--out", tmp_path / "b", "--count", "8"])
    assert code == 0 and len(load_dataset("syndigits", tmp_path / "b", split="test")) == 2


@pytest.mark.parametrize(
    ("flags", "flag"),
    [
        (["--count", "0"], "--count"),
        (["--count", "ten"], "--count"),
        (["--count", "5", "--seed", "-1"], "--seed"),
        (["--count", "5", "--test-count", "0"], "--test-count"),
        (["--count", "999999999"], "--count"),
    ],
)
def test_make_syndigits_refuses_bad_flags_in_one_line(tmp_path, invoke, flags, flag):
    code, _, err = invoke(["data", "make-syndigits", "--out", tmp_path, *flags])
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fedvote: error: {flag}: "), err
    assert not (tmp_path / "syndigits").exists()


def test_a_corrupt_file_in_the_data_directory_is_reported_not_regenerated(tmp_path):
    (tmp_path / "syndigits").mkdir()
    (tmp_path / "syndigits" / "train.npz").write_bytes(b"garbage")
    with pytest.raises(ConfigError, match="not a syndigits file"):
        load_dataset("syndigits", tmp_path)
    assert dataset_status("syndigits", tmp_path).state == "corrupt"
