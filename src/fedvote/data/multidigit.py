"""A multi-label stand-in for CelebA's attributes: 2x2 grids of the digits 0-4.

The voting paper's multi-label setting (CelebA, 40 face attributes; Sec. 5.1, appendix
"Details of CelebA Datasets Evaluation") needs images with several binary attributes.
fedvote has no CelebA, so it builds them from single digits, deterministically from a seed
(:func:`make_multidigit`):

* each image is a 2x2 grid of cells; each cell is blank with probability 1/2, else holds a
  digit 0-4 (an image drawn uniformly from the source's images of those digits);
* A = 10 attributes: ``has_d`` — digit d appears anywhere (d = 0..4) — and ``top_d`` —
  digit d appears in the top row. ``top_d`` implies ``has_d`` but not conversely (about
  half the grids with a d have one on top), so the model must find *where* a digit is as
  well as *which*; with blank cells at 1/2, P(has_d) = 1 − 0.9⁴ ≈ 0.34 and
  P(top_d) = 1 − 0.9² = 0.19, about 2.7 positive attributes per image on average (the
  τ = 4 of the paper clips few honest votes); always predicting 0 scores 0.73.

Registered datasets (:mod:`fedvote.data.datasets`; records carried bitmask-encoded,
:mod:`fedvote.data.attributes`):

* ``multidigit`` — from scikit-learn's bundled digits (8x8 cells, grids 16x16), no files:
  the source digits 0-4 are split once (seeded) 70/30 and the train grids are built from
  the first part only, the test grids from the second, so no source image appears on both
  sides; 3000 train and 1000 test grids.
* ``multidigit-mnist`` — from MNIST (cells downsampled 28 → 14 by area, grids 28x28): train
  grids from MNIST's train split only, test grids from its test split; 12000 and 4000.

Within one side a source image may appear in several grids (drawn with replacement).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedvote.data.attributes import label_set_names
from fedvote.data.container import Dataset, resize_images
from fedvote.data.datasets import _MNIST_WHERE, _SOURCES, _Source, load_digits, load_splits, register_source
from fedvote.errors import ConfigError

GRID_DIGITS = 5  # digits 0..4
BLANK_PROBABILITY = 0.5
ATTRIBUTE_NAMES: tuple[str, ...] = (
    *(f"has_{d}" for d in range(GRID_DIGITS)),
    *(f"top_{d}" for d in range(GRID_DIGITS)),
)
# (train grids, test grids) of the registered datasets, and their generation seeds.
DIGITS_COUNTS = (3000, 1000)
MNIST_COUNTS = (30000, 4000)
_SPLIT_SEEDS = {"train": 0, "test": 1}
_SOURCE_SPLIT_SEED = 0x5D1


@dataclass(frozen=True, eq=False)
class MultiLabelDataset:
    """Images with A binary attributes: ``features`` (n, 1, H, W) float32, ``targets`` (n, A) uint8.

    ``attribute_names`` (A,) name the columns of ``targets``; ``name`` and ``split`` identify
    the records as :class:`~fedvote.data.datasets.Dataset`'s do.
    """

    name: str
    features: np.ndarray
    targets: np.ndarray
    attribute_names: tuple[str, ...]
    split: str = "train"
    description: str = ""

    def __post_init__(self) -> None:
        if self.features.ndim != 4 or self.features.dtype != np.float32:
            shape, dtype = self.features.shape, self.features.dtype
            raise ValueError(f"features must be (n, C, H, W) float32, got {shape} {dtype}")
        if self.targets.shape != (self.features.shape[0], len(self.attribute_names)):
            raise ValueError(
                f"targets must be (n, A) = ({self.features.shape[0]}, {len(self.attribute_names)}), "
                f"got {self.targets.shape}"
            )
        if not np.isin(self.targets, (0, 1)).all():
            raise ValueError("targets must be 0 or 1")

    def __len__(self) -> int:
        return int(self.targets.shape[0])

    def as_dataset(self) -> Dataset:
        """The records as the federation carries them: labels Σ_a y_a·2^a, attributes named.

        The 2^A label sets are the :class:`~fedvote.data.datasets.Dataset`'s classes
        (:func:`~fedvote.data.attributes.label_set_names`).
        """
        weights = 1 << np.arange(len(self.attribute_names), dtype=np.int64)  # (A,)
        return Dataset(
            name=self.name,
            features=self.features,
            labels=self.targets.astype(np.int64) @ weights,  # (n,)
            class_names=label_set_names(self.attribute_names),
            description=self.description,
            split=self.split,
            attribute_names=self.attribute_names,
        )


def make_multidigit(
    source: Dataset,
    count: int,
    seed: int,
    *,
    blank_probability: float = BLANK_PROBABILITY,
    name: str = "multidigit",
    split: str = "train",
) -> MultiLabelDataset:
    """``count`` 2x2 grids of ``source``'s digits 0-4 with the 10 attributes of this module.

    ``source`` holds single-digit images (n, 1, h, w) labelled 0-9 (only 0-4 are used);
    grids are (1, 2h, 2w). Deterministic under ``seed``: cell blanks, then the source image
    of every cell, are drawn from one generator.
    """
    if isinstance(count, bool) or not isinstance(count, int | np.integer) or count < 1:
        raise ConfigError("count", f"must be an integer >= 1, got {count!r}")
    if not 0.0 <= blank_probability < 1.0:
        raise ConfigError("blank_probability", f"must lie in [0, 1), got {blank_probability}")
    if not source.is_image or source.example_shape[0] != 1:
        raise ConfigError("source", f"needs one-channel digit images, got shape {source.example_shape}")
    pool = np.flatnonzero(source.labels < GRID_DIGITS)  # the source's images of 0..4
    if pool.size == 0:
        raise ConfigError("source", f"{source.name} holds no image of the digits 0-{GRID_DIGITS - 1}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x6D1D]))
    filled = rng.random((count, 4)) >= blank_probability  # (n, 4): cells TL, TR, BL, BR
    picks = pool[rng.integers(0, pool.size, size=(count, 4))]  # (n, 4) source rows
    digits = np.where(filled, source.labels[picks], -1)  # (n, 4); -1 blank
    _, _, h, w = source.features.shape
    cells = np.where(filled[:, :, None, None, None], source.features[picks], 0.0)  # (n, 4, 1, h, w)
    features = np.zeros((count, 1, 2 * h, 2 * w), dtype=np.float32)
    for cell in range(4):
        row, col = divmod(cell, 2)
        features[:, :, row * h : (row + 1) * h, col * w : (col + 1) * w] = cells[:, cell]
    d = np.arange(GRID_DIGITS)
    has = (digits[:, :, None] == d[None, None, :]).any(axis=1)  # (n, 5)
    top = (digits[:, :2, None] == d[None, None, :]).any(axis=1)  # (n, 5): cells TL, TR
    targets = np.concatenate([has, top], axis=1).astype(np.uint8)  # (n, 10)
    return MultiLabelDataset(
        name=name,
        features=features,
        targets=targets,
        attribute_names=ATTRIBUTE_NAMES,
        split=split,
        description=f"{count} 2x2 grids of {source.name} digits 0-{GRID_DIGITS - 1} (seed {seed})",
    )


def _check_split(split: str) -> None:
    if split not in _SPLIT_SEEDS:
        raise ConfigError("split", f"must be train or test, got {split!r}")


def digits_sources(split: str) -> Dataset:
    """The bundled digits' images of one side: a seeded 70/30 split of them, disjoint."""
    _check_split(split)
    digits = load_digits()
    order = np.random.default_rng(_SOURCE_SPLIT_SEED).permutation(len(digits))
    cut = int(round(0.7 * len(digits)))
    return digits.subset(np.sort(order[:cut] if split == "train" else order[cut:]))


def load_multidigit(root: Path | None, split: str) -> Dataset:
    """The registered ``multidigit``: grids of the bundled digits (16x16), bitmask-encoded."""
    del root  # bundled: no files
    count = DIGITS_COUNTS[0 if split == "train" else 1]
    grids = make_multidigit(
        digits_sources(split), count, _SPLIT_SEEDS[split], name="multidigit", split=split
    )
    return grids.as_dataset()


def load_multidigit_mnist(root: Path | None, split: str) -> Dataset:
    """The registered ``multidigit-mnist``: grids of MNIST's ``split`` (cells 14x14, grids 28x28)."""
    _check_split(split)
    splits = load_splits("mnist", root)
    source = splits.train if split == "train" else splits.test
    assert source is not None  # MNIST has an official test split
    keep = np.flatnonzero(source.labels < GRID_DIGITS)
    small = Dataset(
        name="mnist",
        features=resize_images(source.features[keep], (14, 14), "area"),
        labels=source.labels[keep],
        class_names=source.class_names,
        split=source.split,
    )
    count = MNIST_COUNTS[0 if split == "train" else 1]
    grids = make_multidigit(small, count, _SPLIT_SEEDS[split], name="multidigit-mnist", split=split)
    return grids.as_dataset()


def describe_split(root: Path | None, split: str, *, mnist: bool) -> dict[str, Any]:
    """What ``fedvote data list`` shows of a split without generating it: count, shape, classes, files.

    ``mnist``: the MNIST version, whose source files must be there (else the loader's
    one-line error, as for MNIST itself).
    """
    _check_split(split)
    side = 0 if split == "train" else 1
    classes = 2 ** len(ATTRIBUTE_NAMES)  # label sets (bitmasks), not classes: "attributes" says so
    labels = {"classes": classes, "attributes": len(ATTRIBUTE_NAMES)}
    if not mnist:
        return {"count": DIGITS_COUNTS[side], "shape": [1, 16, 16], **labels, "files": []}
    files = [str(path) for path in mnist_files(root, split)]
    return {"count": MNIST_COUNTS[side], "shape": [1, 28, 28], **labels, "files": files}


def mnist_files(root: Path | None, split: str) -> list[Path]:
    """The MNIST files a split of ``multidigit-mnist`` is built from (the loader's error if missing)."""
    return _SOURCES["mnist"].locate(root, split)


# Registered by this module (imported by fedvote.data), so that the registry it builds on
# never imports it: carried bitmask-encoded.
register_source(
    "multidigit",
    _Source(
        load=lambda root, split: load_multidigit(root, split),
        splits=("train", "test"),
        subdir=None,
        locate=lambda root, split: [],
        where_to_get="generated from the bundled scikit-learn digits (no files)",
        describe=lambda root, split: describe_split(root, split, mnist=False),
    ),
)
register_source(
    "multidigit-mnist",
    _Source(
        load=lambda root, split: load_multidigit_mnist(root, split),
        splits=("train", "test"),
        subdir="mnist",
        locate=lambda root, split: mnist_files(root, split),
        where_to_get=f"generated from MNIST: {_MNIST_WHERE}",
        describe=lambda root, split: describe_split(root, split, mnist=True),
    ),
)
