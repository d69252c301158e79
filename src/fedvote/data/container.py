"""The dataset container: labelled examples of one shape, and image resampling.

:class:`Dataset` is what every loader returns (:mod:`fedvote.data.datasets` registers the
loaders); :func:`resize_images` resamples images so that domains of different sizes mix.
Kept apart from the loaders so that a loader module (:mod:`fedvote.data.idx_files`,
:mod:`fedvote.data.cifar10`, ...) can build datasets without importing the registry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fedvote.data.files import dataset_key
from fedvote.errors import ConfigError


@dataclass(frozen=True, eq=False)
class Dataset:
    """Labelled examples: ``features`` (n, *example_shape) float32, ``labels`` (n,) int64.

    Parameters
    ----------
    name : str
        Registry name, e.g. ``"digits"``.
    features : np.ndarray
        float32 array of shape ``(n, *example_shape)``; images are (channels, height, width)
        with values in [0, 1].
    labels : np.ndarray
        int64 array of shape ``(n,)`` with values in ``range(len(class_names))``.
    class_names : tuple[str, ...]
        One name per class.
    description : str
        Where the records came from, for people.
    split : str
        Which part of the named dataset these records are: ``"train"`` (the official
        training part, or everything for a dataset without an official split), ``"test"``
        or ``"all"``. With ``name`` it is the dataset's identity (:meth:`overlaps`).
    attribute_names : tuple[str, ...]
        A multi-label dataset's A attributes: each label is then the bitmask Σ_a y_a·2^a and
        the 2^A label sets are the classes (:mod:`fedvote.data.attributes`); empty (default)
        for a single-label dataset.

    """

    name: str
    features: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]
    description: str = field(default="")
    split: str = field(default="train")
    attribute_names: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.features.shape[0] != self.labels.shape[0]:
            raise ValueError(
                f"features and labels disagree on the number of examples: "
                f"{self.features.shape[0]} vs {self.labels.shape[0]}"
            )
        if self.labels.size and (self.labels.min() < 0 or self.labels.max() >= self.num_classes):
            raise ValueError(f"labels must lie in [0, {self.num_classes}), got {self.labels.max()}")
        if self.attribute_names and self.num_classes != 2 ** len(self.attribute_names):
            raise ValueError(
                f"{len(self.attribute_names)} attributes need 2^A = {2 ** len(self.attribute_names)} "
                f"label sets as classes, got {self.num_classes}"
            )

    @property
    def num_classes(self) -> int:
        """Number of classes C."""
        return len(self.class_names)

    @property
    def example_shape(self) -> tuple[int, ...]:
        """Shape of one example, e.g. (1, 8, 8) for digits."""
        return tuple(int(d) for d in self.features.shape[1:])

    @property
    def is_image(self) -> bool:
        """Whether examples are images (channels, height, width)."""
        return self.features.ndim == 4

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def overlaps(self, other: Dataset) -> bool:
        """Whether ``other`` may hold the same records: same dataset (by name) and split.

        Compares identities (:func:`dataset_key` of the names, the splits), never objects:
        two loads of one file are two objects holding the same records. ``"all"`` holds
        both official parts, so it overlaps either. Identity only, for a refusal before any
        record is processed: a copy under another name passes it, so every federation's
        public side is also compared with the agents' records by content where it is dealt
        (:mod:`fedvote.data.public_pool_check`).
        """
        if dataset_key(self.name) != dataset_key(other.name):
            return False
        return self.split == other.split or "all" in (self.split, other.split)

    def subset(self, indices: np.ndarray) -> Dataset:
        """The examples at ``indices`` as a new dataset of the same name and classes."""
        return Dataset(
            name=self.name,
            features=self.features[indices],
            labels=self.labels[indices],
            class_names=self.class_names,
            description=self.description,
            split=self.split,
            attribute_names=self.attribute_names,
        )

    def resized(self, size: tuple[int, int], mode: str = "auto") -> Dataset:
        """The same images resampled to ``size`` = (height, width); see :func:`resize_images`."""
        size = check_size(size, "resize_to")
        if not self.is_image:
            raise ConfigError(
                "resize_to", f"{self.name} holds vectors of shape {self.example_shape}, not images"
            )
        if self.example_shape[1:] == size:
            return self
        return Dataset(
            name=self.name,
            features=resize_images(self.features, size, mode),
            labels=self.labels,
            class_names=self.class_names,
            description=f"{self.description} (resized to {size[0]}x{size[1]})",
            split=self.split,
            attribute_names=self.attribute_names,
        )


@dataclass(frozen=True, eq=False)
class DatasetSplits:
    """A dataset's official training part and, when it has one, its official test part."""

    train: Dataset
    test: Dataset | None


# --------------------------------------------------------------------------- resizing


# The most memory resampled images may take (float32).
RESIZE_MAX_BYTES = 2 * 2**30


def check_size(size: Sequence[int], argument: str) -> tuple[int, int]:
    """``size`` as (height, width) of positive integers; refused by ``argument``'s name otherwise."""
    values = tuple(size)
    if len(values) != 2 or not all(isinstance(v, int | np.integer) and v >= 1 for v in values):
        raise ConfigError(argument, f"must be two positive integers (height, width), got {size!r}")
    return int(values[0]), int(values[1])


def resize_images(
    features: np.ndarray, size: tuple[int, int], mode: str = "auto", chunk: int = 8192
) -> np.ndarray:
    """Resample images (n, C, H, W) to (n, C, *size) with ``torch.nn.functional.interpolate``.

    ``mode`` is ``"area"`` (averaging; right for shrinking), ``"bilinear"`` (right for
    enlarging), or ``"auto"``: area when neither side grows, bilinear otherwise. Values
    stay in [0, 1]: both modes take convex combinations of the input pixels.
    """
    import torch
    import torch.nn.functional as functional

    height, width = check_size(size, "resize_to")
    if features.ndim != 4:
        raise ConfigError("resize_to", f"images must be (n, C, H, W), got shape {features.shape}")
    if mode == "auto":
        grows = height > features.shape[2] or width > features.shape[3]
        mode = "bilinear" if grows else "area"
    if mode not in ("area", "bilinear"):
        raise ConfigError("resize_to", f"unknown resize mode {mode!r}; choose from auto, area, bilinear")
    needed = features.shape[0] * features.shape[1] * height * width * 4
    if needed > RESIZE_MAX_BYTES:  # before allocating: --image-size 880 on digits asked for 5.6 GB
        raise ConfigError(
            "image_size",
            f"{features.shape[0]} images of {height}x{width} would take {needed / 2**30:.3g} GiB "
            f"(at most {RESIZE_MAX_BYTES / 2**30:g} GiB); choose a smaller size",
        )
    out = np.empty((features.shape[0], features.shape[1], height, width), dtype=np.float32)
    with torch.no_grad():
        for start in range(0, features.shape[0], chunk):
            block = torch.from_numpy(np.ascontiguousarray(features[start : start + chunk], dtype=np.float32))
            if mode == "bilinear":
                resized = functional.interpolate(
                    block, size=(height, width), mode="bilinear", align_corners=False
                )
            else:
                resized = functional.interpolate(block, size=(height, width), mode="area")
            out[start : start + chunk] = resized.clamp_(0.0, 1.0).numpy()
    return out
