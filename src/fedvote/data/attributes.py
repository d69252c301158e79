"""Multi-label targets as the federation carries them: A binary attributes in one int label.

The federation (:class:`~fedvote.data.federation.Federation`) holds one int64 label per
record; partitioning, the public pool, the test set, the ledger's content key and the
runner's measurement all work on it. A multi-label dataset (:mod:`fedvote.data.multidigit`)
rides that path **bitmask-encoded**: label = Σ_a y_a·2^a over its A attributes, with the
attribute names carried beside it (``Federation.attribute_names``). A single-label dataset
is read as A = C attributes, one-hot (the class c is attribute c), so the multi-label
methods run on every dataset.

:class:`AttributeTask` turns labels into (n, A) targets and back and scores predictions
(mean attribute accuracy, the voting paper's CelebA metric, Table 1). NumPy only; the
models' side is :mod:`fedvote.models.multilabel`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedvote.errors import ConfigError

ENCODINGS: tuple[str, ...] = ("bitmask", "one-hot")
# A bitmask label set has 2^A classes; beyond this many attributes it is not enumerable.
MAX_BITMASK_ATTRIBUTES = 16


@dataclass(frozen=True)
class AttributeTask:
    """How int labels stand for ``attribute_names`` (A binary attributes): ``encoding`` says.

    ``"bitmask"``: label = Σ_a y_a·2^a (a multi-label dataset). ``"one-hot"``: label = the
    one attribute that is 1 (a single-label dataset read as A = C attributes).
    """

    attribute_names: tuple[str, ...]
    encoding: str

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ConfigError("encoding", f"must be one of {', '.join(ENCODINGS)}, got {self.encoding!r}")
        if not self.attribute_names:
            raise ConfigError("attribute_names", "a task needs at least one attribute")
        if self.encoding == "bitmask" and len(self.attribute_names) > MAX_BITMASK_ATTRIBUTES:
            raise ConfigError(
                "attribute_names",
                f"{len(self.attribute_names)} attributes; a bitmask label holds at most "
                f"{MAX_BITMASK_ATTRIBUTES}",
            )

    @classmethod
    def of(cls, attribute_names: Sequence[str], num_classes: int) -> AttributeTask:
        """The task of a federation: its attributes (bitmask), or its C classes read one-hot."""
        if attribute_names:
            return cls(tuple(attribute_names), "bitmask")
        return cls(tuple(f"class {c}" for c in range(num_classes)), "one-hot")

    @property
    def num_attributes(self) -> int:
        """A."""
        return len(self.attribute_names)

    def targets(self, labels: np.ndarray) -> np.ndarray:
        """The (n, A) float32 0/1 targets of int ``labels`` (n,)."""
        labels = np.asarray(labels, dtype=np.int64).reshape(-1)
        a = np.arange(self.num_attributes)
        if self.encoding == "one-hot":
            return (labels[:, None] == a[None, :]).astype(np.float32)
        return ((labels[:, None] >> a[None, :]) & 1).astype(np.float32)

    def labels(self, targets: np.ndarray) -> np.ndarray:
        """The int labels (n,) of 0/1 ``targets`` (n, A); one-hot: −1 where not exactly one is set."""
        bits = (np.asarray(targets) > 0.5).astype(np.int64)  # (n, A)
        if bits.ndim != 2 or bits.shape[1] != self.num_attributes:
            raise ValueError(f"targets must be (n, {self.num_attributes}), got {bits.shape}")
        if self.encoding == "one-hot":
            return np.where(bits.sum(axis=1) == 1, np.argmax(bits, axis=1), -1).astype(np.int64)
        return (bits << np.arange(self.num_attributes)[None, :]).sum(axis=1).astype(np.int64)

    def attribute_accuracy(self, predicted: np.ndarray, true: np.ndarray) -> np.ndarray:
        """Each attribute's accuracy (A,) of predicted int labels (n,) against the true ones (n,)."""
        if len(predicted) == 0:
            return np.full(self.num_attributes, np.nan)
        return np.mean(self.targets(predicted) == self.targets(true), axis=0).astype(np.float64)

    def accuracy(self, predicted: np.ndarray, true: np.ndarray) -> float:
        """Bitmask: mean attribute accuracy (the paper's CelebA metric); one-hot: plain accuracy."""
        if self.encoding == "one-hot":
            return float(np.mean(np.asarray(predicted) == np.asarray(true)))
        return float(np.mean(self.attribute_accuracy(predicted, true)))


def label_set_names(attribute_names: Sequence[str]) -> tuple[str, ...]:
    """The 2^A class names of a bitmask task: the set attributes joined by '+', or 'none'."""
    count = len(attribute_names)
    names = []
    for code in range(2**count):
        names.append("+".join(attribute_names[a] for a in range(count) if code >> a & 1) or "none")
    return tuple(names)
