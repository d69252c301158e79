"""Checks against the full MNIST and USPS files in $FEDVOTE_DATA (figures from its README).

Marked ``full_data``: deselected when FEDVOTE_DATA is unset (see conftest.py).
"""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from fedvote.data.datasets import dataset_status, load_dataset, load_splits
from fedvote.data.federation import build_domain_federation, mnist_noniid_federation

pytestmark = pytest.mark.full_data

MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
USPS_TRAIN_COUNTS = [1194, 1005, 731, 658, 652, 556, 664, 645, 542, 644]
USPS_TEST_COUNTS = [359, 264, 198, 166, 200, 160, 170, 147, 166, 177]


@pytest.fixture(scope="module")
def mnist(full_data_dir):
    return load_splits("mnist", full_data_dir)


@pytest.fixture(scope="module")
def usps(full_data_dir):
    return load_splits("usps", full_data_dir)


def test_mnist_counts_and_first_labels(mnist):
    assert mnist.train.features.shape == (60000, 1, 28, 28) and mnist.test.features.shape == (10000, 1, 28, 28)
    assert np.bincount(mnist.train.labels).tolist() == MNIST_TRAIN_COUNTS
    assert np.bincount(mnist.test.labels).tolist() == MNIST_TEST_COUNTS
    assert mnist.train.labels[:10].tolist() == [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]
    assert mnist.test.labels[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
    assert mnist.train.features.min() == 0.0 and mnist.train.features.max() == 1.0


def test_usps_counts_and_first_labels(usps):
    assert usps.train.features.shape == (7291, 1, 16, 16) and usps.test.features.shape == (2007, 1, 16, 16)
    assert np.bincount(usps.train.labels).tolist() == USPS_TRAIN_COUNTS
    assert np.bincount(usps.test.labels).tolist() == USPS_TEST_COUNTS
    assert usps.train.labels[:10].tolist() == [6, 5, 4, 7, 3, 6, 3, 1, 0, 1]
    assert usps.test.labels[:10].tolist() == [9, 6, 3, 6, 6, 0, 0, 0, 6, 9]


def test_the_samples_are_the_first_records(mnist, usps, samples_dir):
    for name, full in (("mnist", mnist), ("usps", usps)):
        sample = load_splits(name, samples_dir)
        assert np.array_equal(sample.train.features, full.train.features[:500])
        assert np.array_equal(sample.test.labels, full.test.labels[:200])


def test_make_samples_reproduces_the_committed_bytes(full_data_dir, samples_dir, tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_samples", samples_dir / "make_samples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(full_data_dir, tmp_path)
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.gz"))
    committed = sorted(p.relative_to(samples_dir) for p in samples_dir.rglob("*.gz"))
    assert written == committed and len(written) == 6
    for rel in written:
        assert gzip.decompress((tmp_path / rel).read_bytes()) == gzip.decompress((samples_dir / rel).read_bytes())
    assert sum((samples_dir / rel).stat().st_size for rel in committed) <= 2_000_000


def test_the_papers_mnist_noniid_setting(full_data_dir, mnist):
    fed = mnist_noniid_federation(full_data_dir, seed=0)
    sizes = fed.agent_sizes()
    assert fed.num_agents == 100 and sizes.sum() == 60000 and sizes.mean() == 600
    assert (np.count_nonzero(fed.class_counts(), axis=1) == 6).all()
    assert len(fed.public) == 3000 and len(fed.test) == 7000
    assert np.array_equal(np.bincount(np.concatenate([fed.public.labels, fed.test.labels])), MNIST_TEST_COUNTS)
    assert np.array_equal(np.bincount(np.concatenate([a.labels for a in fed.agents])), MNIST_TRAIN_COUNTS)


def test_mnist_to_usps_full(mnist, usps):
    fed = build_domain_federation([mnist.train], usps.train, target_test=usps.test, num_agents=10, seed=0)
    assert fed.example_shape == (1, 16, 16)
    assert fed.agent_sizes().sum() == 60000 and len(fed.public) == 7291 and len(fed.test) == 2007
    assert np.array_equal(fed.test.labels, usps.test.labels)


def test_data_list_on_the_full_data(full_data_dir):
    mnist_status, usps_status = dataset_status("mnist", full_data_dir), dataset_status("usps", full_data_dir)
    assert mnist_status.available and mnist_status.splits["train"]["count"] == 60000
    assert usps_status.available and usps_status.splits["test"]["count"] == 2007
    assert load_dataset("mnist", full_data_dir, split="all").features.shape[0] == 70000
