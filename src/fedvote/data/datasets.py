"""Dataset container and loaders.

A :class:`Dataset` is a labelled array of examples with a known example shape. The
embedded default, ``digits``, is scikit-learn's bundled handwritten digits (8x8, 10
classes, 1797 images), so fedvote runs on a fresh machine with no download.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

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

    """

    name: str
    features: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]
    description: str = field(default="")

    def __post_init__(self) -> None:
        if self.features.shape[0] != self.labels.shape[0]:
            raise ValueError(
                f"features and labels disagree on the number of examples: "
                f"{self.features.shape[0]} vs {self.labels.shape[0]}"
            )
        if self.labels.size and (self.labels.min() < 0 or self.labels.max() >= self.num_classes):
            raise ValueError(f"labels must lie in [0, {self.num_classes}), got {self.labels.max()}")

    @property
    def num_classes(self) -> int:
        """Number of classes C."""
        return len(self.class_names)

    @property
    def example_shape(self) -> tuple[int, ...]:
        """Shape of one example, e.g. (1, 8, 8) for digits."""
        return tuple(int(d) for d in self.features.shape[1:])

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def subset(self, indices: np.ndarray) -> Dataset:
        """The examples at ``indices`` as a new dataset of the same name and classes."""
        return Dataset(
            name=self.name,
            features=self.features[indices],
            labels=self.labels[indices],
            class_names=self.class_names,
            description=self.description,
        )


def load_digits() -> Dataset:
    """Scikit-learn's bundled handwritten digits as (1, 8, 8) images in [0, 1]."""
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    # images: (1797, 8, 8) with values 0..16 -> (1797, 1, 8, 8) in [0, 1]
    features = (bunch.images / 16.0).astype(np.float32)[:, None, :, :]
    return Dataset(
        name="digits",
        features=features,
        labels=bunch.target.astype(np.int64),
        class_names=tuple(str(c) for c in range(10)),
        description="scikit-learn handwritten digits, 1797 images of 8x8, bundled (no download)",
    )


# name -> loader taking the data directory (None for embedded datasets).
_LOADERS: dict[str, Callable[[Path | None], Dataset]] = {
    "digits": lambda data_dir: load_digits(),
}


def available_datasets() -> tuple[str, ...]:
    """Names accepted by :func:`load_dataset`."""
    return tuple(sorted(_LOADERS))


def load_dataset(name: str, data_dir: str | Path | None = None) -> Dataset:
    """Load a dataset by name; ``data_dir`` is where file-based datasets are looked for."""
    if name not in _LOADERS:
        raise ConfigError(
            "dataset", f"unknown dataset {name!r}; choose from {', '.join(available_datasets())}"
        )
    return _LOADERS[name](Path(data_dir) if data_dir is not None else None)
