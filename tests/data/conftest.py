"""Fixtures for the data tests, and the rule for ``full_data`` tests.

Tests marked ``@pytest.mark.full_data`` read the full MNIST and USPS files from
``$FEDVOTE_DATA``. When it is unset they are *deselected* (not skipped), and the summary
says so; ``.ci/run`` sets it to ``../shared/datasets``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fedvote.data.datasets import Dataset, load_dataset

SAMPLES = Path(__file__).resolve().parent / "samples"
_DESELECTED = pytest.StashKey[int]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("FEDVOTE_DATA"):
        return
    deselected = [item for item in items if item.get_closest_marker("full_data") is not None]
    if deselected:
        items[:] = [item for item in items if item.get_closest_marker("full_data") is None]
        config.hook.pytest_deselected(items=deselected)
    config.stash[_DESELECTED] = len(deselected)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:  # noqa: ARG001
    count = config.stash.get(_DESELECTED, 0)
    if count:
        terminalreporter.write_line(
            f"{count} full_data tests deselected: FEDVOTE_DATA is unset "
            "(set it to the directory holding mnist/ and usps/, e.g. ../shared/datasets, to run them)"
        )


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    """The committed samples: mnist/ (500 train, 200 test, gzipped IDX) and usps/ (500, 200)."""
    return SAMPLES


@pytest.fixture(scope="session")
def mnist_sample() -> Dataset:
    return load_dataset("mnist", SAMPLES)


@pytest.fixture(scope="session")
def mnist_sample_test() -> Dataset:
    return load_dataset("mnist", SAMPLES, split="test")


@pytest.fixture(scope="session")
def usps_sample() -> Dataset:
    return load_dataset("usps", SAMPLES)


@pytest.fixture(scope="session")
def usps_sample_test() -> Dataset:
    return load_dataset("usps", SAMPLES, split="test")
