"""The multi-label digit grids (fedvote.data.multidigit) and their bitmask encoding (fedvote.data.attributes)."""

from __future__ import annotations

import numpy as np
import pytest

from fedvote.data.attributes import AttributeTask, label_set_names
from fedvote.data.datasets import Dataset, load_digits, load_splits
from fedvote.data.multidigit import (
    ATTRIBUTE_NAMES,
    MultiLabelDataset,
    digits_sources,
    make_multidigit,
)
from fedvote.errors import ConfigError


def _tagged_source() -> Dataset:
    """Ten 2x2 'digits' whose single pixel value names the source row (row i holds (i + 1)/16)."""
    n = 10
    features = np.zeros((n, 1, 2, 2), dtype=np.float32)
    features[:, 0, 0, 0] = (np.arange(n) + 1) / 16.0
    labels = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], dtype=np.int64)
    return Dataset(name="tagged", features=features, labels=labels, class_names=tuple(map(str, range(10))))


def test_the_same_seed_gives_the_same_grids_and_another_seed_others():
    source = digits_sources("train")
    first, again = make_multidigit(source, 200, seed=3), make_multidigit(source, 200, seed=3)
    np.testing.assert_array_equal(first.features, again.features)
    np.testing.assert_array_equal(first.targets, again.targets)
    other = make_multidigit(source, 200, seed=4)
    assert not np.array_equal(first.targets, other.targets)


def test_attributes_say_which_digits_are_in_the_grid_and_which_are_on_top():
    """Decode every cell back from its pixel tag and recompute the ten attributes by hand."""
    source = _tagged_source()
    grids = make_multidigit(source, 500, seed=1)
    assert grids.features.shape == (500, 1, 4, 4) and grids.attribute_names == ATTRIBUTE_NAMES
    for image, target in zip(grids.features, grids.targets, strict=True):
        cells = [image[0, r * 2, c * 2] for r in (0, 1) for c in (0, 1)]  # TL, TR, BL, BR tags
        digits = [int(round(v * 16)) - 1 if v > 0 else -1 for v in cells]  # source row = its label here
        assert all(d < 5 for d in digits)  # only the digits 0-4 are drawn
        has = [int(d in digits) for d in range(5)]
        top = [int(d in digits[:2]) for d in range(5)]
        assert target.tolist() == has + top


def test_attribute_rates_are_as_documented():
    grids = make_multidigit(digits_sources("train"), 4000, seed=0)
    rates = grids.targets.mean(axis=0)
    np.testing.assert_allclose(rates[:5], 1 - 0.9**4, atol=0.03)  # has_d
    np.testing.assert_allclose(rates[5:], 1 - 0.9**2, atol=0.03)  # top_d
    assert 2.4 < grids.targets.sum(axis=1).mean() < 2.95


def test_the_digits_version_builds_its_two_sides_from_disjoint_source_images():
    digits = load_digits()
    train, test = digits_sources("train"), digits_sources("test")
    assert len(train) + len(test) == len(digits)
    rows = {image.tobytes() for image in train.features}
    assert not any(image.tobytes() in rows for image in test.features)


def test_registered_datasets_carry_bitmask_labels_with_named_attributes():
    splits = load_splits("multidigit")
    assert splits.test is not None
    train, test = splits.train, splits.test
    assert (len(train), len(test)) == (3000, 1000)
    assert train.example_shape == (1, 16, 16) and train.attribute_names == ATTRIBUTE_NAMES
    assert train.num_classes == 2**10 and train.class_names[0] == "none"
    task = AttributeTask.of(train.attribute_names, train.num_classes)
    targets = task.targets(train.labels)
    assert targets.shape == (3000, 10)
    np.testing.assert_array_equal(task.labels(targets), train.labels)  # bitmask round trip
    assert train.subset(np.arange(5)).attribute_names == ATTRIBUTE_NAMES
    assert train.resized((8, 8)).attribute_names == ATTRIBUTE_NAMES


def test_as_dataset_and_the_task_round_trip_targets():
    grids = make_multidigit(_tagged_source(), 64, seed=2)
    dataset = grids.as_dataset()
    task = AttributeTask.of(dataset.attribute_names, dataset.num_classes)
    np.testing.assert_array_equal(task.targets(dataset.labels), grids.targets.astype(np.float32))
    assert label_set_names(("a", "b"))[3] == "a+b"


def test_one_hot_task_reads_classes_as_attributes():
    task = AttributeTask.of((), 3)
    np.testing.assert_array_equal(task.targets(np.array([2, 0])), [[0, 0, 1], [1, 0, 0]])
    np.testing.assert_array_equal(task.labels(np.array([[0, 1, 0], [1, 1, 0], [0, 0, 0]])), [1, -1, -1])
    assert task.accuracy(np.array([1, 2]), np.array([1, 1])) == 0.5


def test_mean_attribute_accuracy_against_a_hand_count():
    task = AttributeTask(("x", "y"), "bitmask")
    predicted, true = np.array([0b11, 0b00]), np.array([0b01, 0b00])  # x right twice, y right once
    np.testing.assert_allclose(task.attribute_accuracy(predicted, true), [1.0, 0.5])
    assert task.accuracy(predicted, true) == 0.75


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [({"count": 0}, "count"), ({"count": 2.5}, "count"), ({"blank_probability": 1.0}, "blank_probability")],
)
def test_bad_generator_arguments_are_refused_by_name(kwargs, argument):
    settings = {"count": 10, **kwargs}
    with pytest.raises(ConfigError) as error:
        make_multidigit(_tagged_source(), seed=0, **settings)
    assert error.value.argument == argument


def test_a_source_without_the_digits_0_to_4_is_refused():
    source = _tagged_source().subset(np.arange(5, 10))
    with pytest.raises(ConfigError, match="source"):
        make_multidigit(source, 10, seed=0)


def test_the_dataset_refuses_malformed_targets():
    with pytest.raises(ValueError, match="0 or 1"):
        MultiLabelDataset("x", np.zeros((2, 1, 2, 2), np.float32), np.full((2, 1), 2, np.uint8), ("a",))


@pytest.mark.full_data
def test_the_mnist_version_builds_train_grids_from_mnist_train_and_test_grids_from_mnist_test(full_data_dir):
    splits = load_splits("multidigit-mnist", full_data_dir)
    assert splits.test is not None
    assert (len(splits.train), len(splits.test)) == (30000, 4000)
    assert splits.train.example_shape == (1, 28, 28) and splits.train.split == "train"
    assert splits.test.split == "test" and splits.test.attribute_names == ATTRIBUTE_NAMES
    mnist_test = load_splits("mnist", full_data_dir).test
    assert mnist_test is not None
    # every test grid's top-left cell (when filled) is an MNIST *test* digit downsampled to 14x14
    from fedvote.data.datasets import resize_images

    small = resize_images(mnist_test.features[mnist_test.labels < 5], (14, 14), "area")
    known = {np.round(cell, 5).tobytes() for cell in small}
    cells = splits.test.features[:200, :, :14, :14]
    filled = [cell for cell in cells if cell.max() > 0]
    assert filled and all(np.round(cell, 5).tobytes() in known for cell in filled)


def test_data_list_describes_the_grids_as_the_loader_builds_them(tmp_path):
    from fedvote.data.datasets import dataset_status

    status = dataset_status("multidigit")
    splits = load_splits("multidigit")
    assert splits.test is not None
    for name, part in (("train", splits.train), ("test", splits.test)):
        described = status.splits[name]
        assert described["count"] == len(part) and described["shape"] == list(part.example_shape)
        assert described["classes"] == part.num_classes
    missing = dataset_status("multidigit-mnist", tmp_path)  # no MNIST files here
    assert missing.state == "missing" and "train-images-idx3-ubyte" in (missing.error or "")
