import importlib.util
import io
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest
from hypothesis import settings

from fedvote.data.datasets import Dataset, load_digits
from fedvote.data.federation import build_federation
from fedvote.data.partition import PartitionSpec

# Under pytest-xdist (make test: two workers on two cores) each worker computes with one
# thread, so the workers do not fight over the cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    torch.set_num_threads(1)

# CI runs the same examples every time (a red CI must be reproducible); locally
# hypothesis explores new ones.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _fresh_epsilon_memo():
    """Each test starts with no remembered ε (a test may patch an accountant's internals)."""
    from fedvote.privacy.accountant import clear_epsilon_memo

    clear_epsilon_memo()


@pytest.fixture(autouse=True)
def _extractor_cache_in_tmp(tmp_path_factory, monkeypatch):
    """Learned extractors are cached under this session's temporary directory, never in ~/.cache."""
    monkeypatch.setenv("FEDVOTE_CACHE", str(tmp_path_factory.getbasetemp() / "extractor-cache"))


@pytest.fixture
def invoke(capsys: pytest.CaptureFixture[str]) -> Callable[[Sequence[object]], tuple[int, str, str]]:
    """Run ``fedvote`` on ``args`` (each made a str): (exit status, 0 on success; stdout; stderr)."""
    from fedvote.cli import main

    def run(args: Sequence[object]) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exit_info:
            main([str(arg) for arg in args])
            raise SystemExit(0)
        captured = capsys.readouterr()
        return int(exit_info.value.code or 0), captured.out, captured.err

    return run


def _experiment_module(name: str) -> ModuleType:
    """``experiments/<name>.py`` as a module (the experiments are scripts, not a package)."""
    experiments = Path(__file__).parents[1] / "experiments"
    sys.path.insert(0, str(experiments))  # they import experiments/run.py
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", experiments / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def load_experiment() -> Callable[[str], ModuleType]:
    """Load an experiment script by name: ``load_experiment("fashion_mnist_ceiling")``."""
    return _experiment_module


@pytest.fixture(scope="session")
def full_data_dir() -> Path:
    """$FEDVOTE_DATA, for tests marked ``full_data`` (deselected when it is unset: tests/data/conftest.py)."""
    return Path(os.environ["FEDVOTE_DATA"])


def _smooth_rgb_images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n smooth RGB images (n, 32, 32, 3) uint8 (JPEG keeps them close) and labels cycling 0..9."""
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 1, 32)
    base = rng.uniform(40, 200, size=(n, 1, 1, 3))
    slope = rng.uniform(-40, 40, size=(n, 1, 1, 3))
    pixels = base + slope * ramp[None, :, None, None] + 0 * ramp[None, None, :, None]
    return np.clip(pixels, 0, 255).astype(np.uint8), (np.arange(n) % 10).astype(np.uint8)


def _jpeg(image: np.ndarray, quality: int = 95) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def _write_cifar10_archive(path: Path, pixels: np.ndarray, labels: np.ndarray, **override: object) -> None:
    """An archive in the shared datasets README's layout: JPEG bytes end to end, offsets, labels, classes.

    ``override`` replaces (or, given None, drops) any of the four arrays: how tests damage one.
    """
    from fedvote.data import cifar10

    blobs = [_jpeg(p) for p in pixels]
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in blobs])]).astype(np.int64)
    arrays: dict[str, object] = {
        "jpeg": np.frombuffer(b"".join(blobs), dtype=np.uint8),
        "offsets": offsets,
        "labels": labels,
        "classes": np.array(cifar10.CLASSES),
    }
    arrays.update(override)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **{key: value for key, value in arrays.items() if value is not None})


@pytest.fixture(scope="session")
def cifar10_archive() -> SimpleNamespace:
    """Generated CIFAR-10 (JPEG copy) files: ``images(n, seed)``, ``jpeg(image)``, ``write(path, pixels, labels)``."""
    return SimpleNamespace(images=_smooth_rgb_images, jpeg=_jpeg, write=_write_cifar10_archive)


@pytest.fixture(scope="session")
def tiny_cifar10_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory holding a generated CIFAR-10 of 100 training and 200 test images (never the real files).

    The default split makes 60 of the test images the public pool: enough for weighted PATE's
    40-point validation set in the contract suite.
    """
    from fedvote.data import cifar10

    root = tmp_path_factory.mktemp("tiny-cifar10")
    for split, count, seed in (("train", 100, 0), ("test", 200, 1)):
        pixels, labels = _smooth_rgb_images(count, seed)
        _write_cifar10_archive(root / "cifar10" / cifar10.SPLIT_FILES[split], pixels, labels)
    return root


@pytest.fixture(scope="session")
def digits() -> Dataset:
    return load_digits()


@pytest.fixture(scope="session")
def small_federation(digits):
    """10 agents on digits, iid; small enough for quick end-to-end checks."""
    return build_federation(digits, num_agents=10, partition=PartitionSpec("iid"), seed=0)


def synthetic_dataset(n: int = 200, num_classes: int = 4, seed: int = 0) -> Dataset:
    """Gaussian blobs in 2-D, one per class: a tiny, well-separated problem."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, size=n)
    centres = 4.0 * np.stack([np.cos(np.arange(num_classes)), np.sin(np.arange(num_classes))], axis=1)
    features = (centres[labels] + rng.normal(size=(n, 2))).astype(np.float32)
    return Dataset(
        name="blobs",
        features=features,
        labels=labels.astype(np.int64),
        class_names=tuple(str(c) for c in range(num_classes)),
    )


# The longest files run first: under `make test`'s two workers the Flower run (mostly
# waiting on its processes) then overlaps the rest of the suite instead of trailing it.
RUN_FIRST = ("tests/flower/test_flower_integration.py", "tests/test_fuzz_boundaries.py")


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        path = item.path.as_posix()
        return next((i for i, suffix in enumerate(RUN_FIRST) if path.endswith(suffix)), len(RUN_FIRST))

    items.sort(key=rank)  # stable: the rest keep their order
