"""The querying party's examples: read from a file and checked against the federation's, one-line errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from fedvote.errors import ConfigError


def load_queries(path: str | Path, example_shape: tuple[int, ...]) -> np.ndarray:
    """The examples in ``path`` as float32 (Q, *example_shape); one-line errors for anything else.

    Accepts .npy, .npz (array ``x``) and .csv (one example per row, optional header);
    each row is either already of ``example_shape`` or flat with prod(example_shape) values.
    """
    file = Path(path)
    suffix = file.suffix.lower()
    try:
        if suffix == ".npy":
            array = np.load(file, allow_pickle=False)
        elif suffix == ".npz":
            with np.load(file, allow_pickle=False) as archive:
                if "x" not in archive.files:
                    found = ", ".join(archive.files) or "nothing"
                    raise ConfigError("queries", f"{file} holds no array 'x' (found: {found})")
                array = archive["x"]
        elif suffix == ".csv":
            array = _read_csv(file)
        else:
            raise ConfigError("queries", f"{file}: expected a .npy, .npz (array 'x') or .csv file")
    except ConfigError:
        raise
    except Exception as error:  # noqa: BLE001 - empty (EOFError), zip and format errors alike
        raise ConfigError("queries", f"cannot read {file}: {' '.join(str(error).split())}") from error
    features = math.prod(example_shape)
    if not (np.issubdtype(array.dtype, np.number) and array.dtype != np.bool_) or array.ndim < 2:
        raise ConfigError(
            "queries",
            f"{file} holds a {array.dtype} array of shape {array.shape}; expected (Q, {features}) numbers",
        )
    if array.shape[0] < 1:
        raise ConfigError("queries", f"{file} holds no queries")
    if tuple(array.shape[1:]) != tuple(example_shape):
        if array.ndim != 2 or array.shape[1] != features:
            raise ConfigError(
                "queries",
                f"{file}: each query has shape {tuple(array.shape[1:])}, but the federation's examples have "
                f"shape {tuple(example_shape)} ({features} features)",
            )
        array = array.reshape((array.shape[0], *example_shape))
    if not np.all(np.isfinite(array)):
        raise ConfigError("queries", f"{file} holds non-finite values")
    return np.ascontiguousarray(array, dtype=np.float32)


def check_query_range(queries: np.ndarray, reference: np.ndarray, file: str | Path) -> None:
    """Refuse (naming ``--queries``) a query value far outside the data's range.

    ``reference`` is the federation's public pool, in the loader's representation (digits'
    pixels in [0, 1]). A value more than the pool's whole span beyond its range (1e30 for a
    pixel) is no example of this data — a file in another representation, or garbage — and
    each answer would still be charged. The range is of public data only.
    """
    if not reference.size:
        return
    low, high = float(np.min(reference)), float(np.max(reference))
    span = max(high - low, 1.0)
    outside = (queries < low - span) | (queries > high + span)  # (Q, *shape)
    if np.any(outside):
        index = int(np.argmax(outside.reshape(outside.shape[0], -1).any(axis=1)))
        value = float(queries[index][outside[index]].flat[0])
        raise ConfigError(
            "queries",
            f"{file}: query {index} holds {value:g}, far outside the data's range [{low:g}, {high:g}]; "
            "give queries in the representation the dataset loader produces",
        )


def _read_csv(file: Path) -> np.ndarray:
    """Rows of comma-separated numbers, (Q, features); a first row that is not numbers is a header."""
    with file.open() as handle:
        first = handle.readline()
    try:
        [float(cell) for cell in first.split(",")]
        header = 0
    except ValueError:
        header = 1
    return np.loadtxt(file, delimiter=",", skiprows=header, ndmin=2, dtype=np.float64)
