"""The registry of datasets: names, loaders, where their files are looked for, and their status.

A :class:`~fedvote.data.container.Dataset` is a labelled array of examples with a known example
shape. The embedded default, ``digits``, is scikit-learn's bundled handwritten digits (8x8, 10
classes, 1797 images), so fedvote runs on a fresh machine with no download.

File-based datasets are read from a data directory (the ``data_dir`` argument, or the
``FEDVOTE_DATA`` environment variable), in their standard formats:

* ``mnist``: the four official IDX files (``train-images-idx3-ubyte[.gz]`` ...), looked
  for in ``<dir>/mnist/`` and ``<dir>``; its official 60000/10000 train/test split is kept
  (:mod:`fedvote.data.idx_files`).
* ``fashion-mnist``: Fashion-MNIST's four IDX files (MNIST's names and format), in
  ``<dir>/fashion-mnist/``, ``<dir>``, then Debian's ``/usr/share/datasets/fashion-mnist/``
  (package ``dataset-fashion-mnist``); 60000/10000 (:mod:`fedvote.data.idx_files`).
* ``cifar10``: CIFAR-10 (JPEG copy), ``train-jpeg.npz`` / ``test-jpeg.npz`` in
  ``<dir>/cifar10/`` or ``<dir>``: JPEG bytes decoded to (3, 32, 32) and cached in the user's
  cache directory (:mod:`fedvote.data.cifar10`); 50000/10000.
* ``usps``: the ESL "zip code" text files ``zip.train[.gz]`` / ``zip.test[.gz]`` (one image
  per line: the label, then 256 values in [-1, 1]), in ``<dir>/usps/`` and ``<dir>``.
* ``syndigits``: SynDigits-style synthetic digits (RGB 32x32, :mod:`fedvote.data.syndigits`),
  read from ``<dir>/syndigits/{train,test}.npz`` when ``fedvote data make-syndigits`` wrote
  them there, else generated from the installed fonts (and cached).
* ``multidigit`` / ``multidigit-mnist``: multi-label 2x2 grids of the digits 0-4 (10 binary
  attributes, :mod:`fedvote.data.multidigit`), generated from the bundled digits or MNIST.
* ``npz:PATH``: a NumPy archive with arrays ``x`` and ``y`` (and optionally ``x_test`` and
  ``y_test``, an official test split).
* ``csv:PATH``: a CSV file with a header row; the label column is named by ``label_column``
  (default ``"label"``), every other column is a feature.

Images are (channels, height, width) float32 in [0, 1]; ``resize_to=(H, W)`` resamples
them so that domains of different sizes mix (USPS 16x16, MNIST 28x28, digits 8x8). A
missing or corrupt file raises :class:`~fedvote.errors.ConfigError` with a one-line
message that names the file and says where to get it.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedvote.data import cifar10
from fedvote.data.container import Dataset, DatasetSplits, resize_images
from fedvote.data.files import (
    DATA_ENV,
    PATH_PREFIXES,
    DatasetMissing,
    dataset_key,
    file_error,
    read_bytes,
    resolve_data_dir,
)
from fedvote.data.files import find as _find
from fedvote.data.files import gz_variants as _gz_variants
from fedvote.data.files import is_file as _is_file
from fedvote.data.files import search_dirs as _search_dirs
from fedvote.data.idx_files import (
    DIGIT_CLASSES as _DIGIT_CLASSES,
)
from fedvote.data.idx_files import (
    IDX_DATASETS,
    MNIST_URL,
    load_idx_dataset,
    locate_idx,
)
from fedvote.errors import ConfigError

# Re-exported: these lived here before the container, file and IDX modules were split off.
__all__ = [
    "DATA_ENV", "MNIST_URL", "USPS_URL", "Dataset", "DatasetMissing", "DatasetSplits",
    "DatasetStatus", "available_datasets", "check_dataset_name", "concatenate", "dataset_key",
    "dataset_status", "has_official_test_split", "is_dataset_name", "load_dataset", "load_digits",
    "load_splits", "resize_images", "resolve_data_dir",
]  # fmt: skip

#: Values of ``split``: the official training part (everything when a dataset has no
#: official split), the official test part, or both together.
SPLITS: tuple[str, ...] = ("train", "test", "all")

USPS_URL = "https://hastie.su.domains/ElemStatLearn/"
_MNIST_WHERE = IDX_DATASETS["mnist"].where_to_get


def _argument(where: str) -> str:
    """The flag a bad file is refused by: --dataset's (npz:PATH, csv:PATH) or --data-dir's."""
    return "dataset" if where in (_NPZ_WHERE, _CSV_WHERE) else "data_dir"


def _file_error(path: Path, problem: str, where: str) -> ConfigError:
    """A present file that cannot be read as the dataset."""
    return file_error(path, problem, where, _argument(where))


def _read_bytes(path: Path, where: str) -> bytes:
    """The file's bytes, gunzipped when it is gzip-compressed (by its magic, not its name)."""
    return read_bytes(path, where, _argument(where))



_USPS_FILES = {"train": "zip.train", "test": "zip.test"}
_USPS_WHERE = (
    "get zip.train.gz and zip.test.gz (the ESL 'zip code' USPS data) from "
    f"{USPS_URL} and put them in DATA_DIR/usps/"
)


def _load_text_table(path: Path, where: str) -> np.ndarray:
    """A whitespace-separated numeric table (n, columns) from a text file, gzipped or not."""
    try:
        text = _read_bytes(path, where).decode("ascii")
    except UnicodeDecodeError as error:
        raise _file_error(path, f"not a text file (byte {error.start} is not ASCII)", where) from error
    if not text.strip():
        raise _file_error(path, "empty file", where)
    try:
        table = np.loadtxt(io.StringIO(text), dtype=np.float64, ndmin=2)
    except ValueError as error:
        raise _file_error(path, f"not a numeric table ({error})", where) from error
    if not np.isfinite(table).all():
        raise _file_error(path, "holds non-finite values", where)
    return table


def _load_usps(root: Path | None, split: str) -> Dataset:
    path = _find(root, "usps", _gz_variants(_USPS_FILES[split]), "usps", _USPS_WHERE)
    table = _load_text_table(path, _USPS_WHERE)
    if table.shape[1] != 257:
        raise _file_error(
            path, f"{table.shape[1]} values per line, expected 257 (a label and 16x16 pixels)", _USPS_WHERE
        )
    raw_labels = table[:, 0]
    if not (np.all(raw_labels == np.round(raw_labels)) and raw_labels.min() >= 0 and raw_labels.max() <= 9):
        raise _file_error(path, "the first column must hold the digit labels 0..9", _USPS_WHERE)
    pixels = table[:, 1:]
    if pixels.min() < -1.0 - 1e-6 or pixels.max() > 1.0 + 1e-6:
        raise _file_error(
            path, f"pixel values in [{pixels.min():g}, {pixels.max():g}], expected [-1, 1]", _USPS_WHERE
        )
    features = np.clip((pixels + 1.0) / 2.0, 0.0, 1.0).astype(np.float32).reshape(-1, 1, 16, 16)
    return Dataset(
        name="usps",
        features=features,
        labels=raw_labels.astype(np.int64),
        class_names=_DIGIT_CLASSES,
        description=f"USPS {split} ({table.shape[0]} images of 16x16, ESL zip code data) from {path.parent}",
        split=split,
    )


# --------------------------------------------------------------------------- digits (bundled)


def load_digits() -> Dataset:
    """Scikit-learn's bundled handwritten digits as (1, 8, 8) images in [0, 1].

    Read from scikit-learn's own file (``sklearn/datasets/data/digits.csv.gz``: 64 pixel
    values 0..16 and the label per row, what ``sklearn.datasets.load_digits`` parses) without
    importing scikit-learn, whose import takes longer (0.5-3 s) than everything else a digits
    run does before training; ``load_digits`` itself if the file is not where it was.
    """
    table = _bundled_digits_table()  # (1797, 65): 64 pixels, then the label
    # pixels 0..16 -> (1797, 1, 8, 8) in [0, 1]
    features = (table[:, :-1].reshape(-1, 1, 8, 8) / 16.0).astype(np.float32)
    return Dataset(
        name="digits",
        features=features,
        labels=table[:, -1].astype(np.int64),
        class_names=_DIGIT_CLASSES,
        description="scikit-learn handwritten digits, 1797 images of 8x8, bundled (no download)",
    )


def _bundled_digits_table() -> np.ndarray:
    """scikit-learn's digits.csv.gz as an integer table (1797, 65), found without importing scikit-learn.

    Parsed as integers, which every entry is: 4 ms against 17-27 ms as floats.
    """
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            return np.loadtxt(path, delimiter=",", dtype=np.int64)
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    return np.column_stack([bunch.data, bunch.target]).astype(np.int64)


# --------------------------------------------------------------------------- npz / csv

_NPZ_WHERE = "give a NumPy .npz archive holding arrays x (examples) and y (labels)"
_CSV_WHERE = "give a CSV file with a header row, numeric feature columns and a label column"


def _encode_labels(raw: np.ndarray, path: Path, where: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """Class ids and names: non-negative integers are their own ids; anything else is sorted."""
    raw = np.asarray(raw).reshape(-1)
    numeric: np.ndarray | None = None
    if raw.dtype.kind in "biuf":
        numeric = raw.astype(np.float64)
    elif raw.dtype.kind in "US":
        try:
            numeric = raw.astype(np.float64)
        except ValueError:
            numeric = None
    else:
        raise _file_error(path, f"labels of dtype {raw.dtype} are neither numbers nor strings", where)
    if numeric is not None:
        if not np.isfinite(numeric).all():
            raise _file_error(path, "labels hold non-finite values", where)
        integral = bool(np.all(numeric == np.round(numeric)))
        if raw.size and integral and numeric.min() >= 0 and numeric.max() < 10_000:
            num_classes = int(numeric.max()) + 1
            return numeric.astype(np.int64), tuple(str(c) for c in range(num_classes))
    names, ids = np.unique(raw.astype(str), return_inverse=True)
    return ids.astype(np.int64).reshape(-1), tuple(str(n) for n in names)


def _as_features(
    x: np.ndarray, path: Path, where: str, image_shape: Sequence[int] | None
) -> np.ndarray:
    """Examples as float32: (n, C, H, W) images in [0, 1], or (n, d) vectors."""
    if x.dtype.kind not in "biuf":
        raise _file_error(path, f"features of dtype {x.dtype} are not numeric", where)
    if x.ndim < 2:
        raise _file_error(
            path, f"features of shape {x.shape}; expected (n, ...) with one row per example", where
        )
    if image_shape is not None:
        shape = tuple(int(d) for d in image_shape)
        if len(shape) == 2:
            shape = (1, *shape)
        if len(shape) != 3 or min(shape) < 1:
            raise ConfigError("image_shape", f"must be (H, W) or (C, H, W), got {tuple(image_shape)}")
        per_example = int(np.prod(x.shape[1:]))
        if per_example != int(np.prod(shape)):
            raise ConfigError(
                "image_shape",
                f"{shape} holds {int(np.prod(shape))} values but {path} has {per_example} per example",
            )
        x = x.reshape(x.shape[0], *shape)
    elif x.ndim == 3:
        x = x[:, None, :, :]
    elif x.ndim == 4 and x.shape[-1] in (1, 3, 4) and x.shape[1] not in (1, 3, 4):
        x = np.moveaxis(x, -1, 1)  # channels-last (n, H, W, C) -> (n, C, H, W)
    elif x.ndim > 4:
        raise _file_error(
            path, f"features of shape {x.shape}; expected (n, d), (n, H, W) or (n, C, H, W)", where
        )
    if x.dtype == np.uint8 and x.ndim == 4:
        return x.astype(np.float32) / np.float32(255.0)
    values = x.astype(np.float32)
    if not np.isfinite(values).all():
        raise _file_error(path, "features hold non-finite values", where)
    if values.ndim == 4 and values.size:
        low, high = float(values.min()), float(values.max())
        if low >= 0.0 and high <= 1.0:
            return values
        if low >= 0.0 and high <= 255.0 and np.all(values == np.round(values)):
            return values / np.float32(255.0)
        raise _file_error(
            path, f"pixel values in [{low:g}, {high:g}]; images must be in [0, 1] or integers 0..255", where
        )
    return values


def _load_npz(spec: str, root: Path | None, image_shape: Sequence[int] | None) -> DatasetSplits:
    path = _user_path(spec[len("npz:") :], root, "npz")
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    except Exception as error:  # noqa: BLE001 - zipfile, pickle and format errors alike
        problem = f"not a readable .npz archive ({type(error).__name__}: {error})"
        raise _file_error(path, problem, _NPZ_WHERE) from error
    missing = [key for key in ("x", "y") if key not in arrays]
    if missing:
        held = ", ".join(sorted(arrays)) or "nothing"
        raise _file_error(path, f"no array {' or '.join(missing)} (it holds {held})", _NPZ_WHERE)
    has_test = "x_test" in arrays or "y_test" in arrays
    if has_test and not ("x_test" in arrays and "y_test" in arrays):
        raise _file_error(path, "holds only one of x_test and y_test", _NPZ_WHERE)
    parts = [("x", "y")] + ([("x_test", "y_test")] if has_test else [])
    features = [_as_features(arrays[xk], path, _NPZ_WHERE, image_shape) for xk, _ in parts]
    raw_labels = [np.asarray(arrays[yk]).reshape(-1) for _, yk in parts]
    for (xk, yk), f, y in zip(parts, features, raw_labels, strict=True):
        if f.shape[0] != y.shape[0]:
            problem = f"{xk} has {f.shape[0]} examples but {yk} has {y.shape[0]} labels"
            raise _file_error(path, problem, _NPZ_WHERE)
    if has_test and features[0].shape[1:] != features[1].shape[1:]:
        problem = f"x {features[0].shape[1:]} and x_test {features[1].shape[1:]} differ in shape"
        raise _file_error(path, problem, _NPZ_WHERE)
    # Encode train and test labels together so that both use the same class ids.
    labels, class_names = _encode_labels(np.concatenate(raw_labels), path, _NPZ_WHERE)
    label_parts = np.split(labels, [features[0].shape[0]])
    datasets = [
        Dataset(
            name=spec,
            features=f,
            labels=label_parts[i],
            class_names=class_names,
            description=f"{path} ({xk}, {yk})",
            split=SPLITS[i],
        )
        for i, (f, (xk, yk)) in enumerate(zip(features, parts, strict=True))
    ]
    return DatasetSplits(train=datasets[0], test=datasets[1] if has_test else None)


def _load_csv(
    spec: str, root: Path | None, label_column: str, image_shape: Sequence[int] | None
) -> DatasetSplits:
    path = _user_path(spec[len("csv:") :], root, "csv")
    try:
        text = _read_bytes(path, _CSV_WHERE).decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise _file_error(path, f"not UTF-8 text (byte {error.start})", _CSV_WHERE) from error
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise _file_error(path, "empty file; expected a header row", _CSV_WHERE)
    header = [name.strip().strip('"') for name in lines[0].split(",")]
    if label_column not in header:
        shown = ", ".join(header[:8]) + (", ..." if len(header) > 8 else "")
        raise ConfigError("label_column", f"{path} has no column {label_column!r}; its columns are {shown}")
    label_index = header.index(label_column)
    feature_columns = [i for i in range(len(header)) if i != label_index]
    if not feature_columns:
        raise _file_error(path, "no feature column beside the label column", _CSV_WHERE)
    if len(lines) < 2:
        raise _file_error(path, "a header but no data rows", _CSV_WHERE)
    for number, line in enumerate(lines[1:], start=2):  # a row longer than the header lost its tail
        fields = line.count(",") + 1
        if line.strip() and fields != len(header):
            problem = f"line {number} has {fields} fields but the header names {len(header)} columns"
            raise _file_error(path, problem, _CSV_WHERE)
    try:
        x = np.loadtxt(io.StringIO(text), delimiter=",", skiprows=1, usecols=feature_columns, ndmin=2)
        y = np.loadtxt(io.StringIO(text), delimiter=",", skiprows=1, usecols=label_index, dtype=str, ndmin=1)
    except ValueError as error:
        raise _file_error(path, f"not a numeric table ({error})", _CSV_WHERE) from error
    y = np.char.strip(np.char.strip(y), '"')
    labels, class_names = _encode_labels(y, path, _CSV_WHERE)
    features = _as_features(x, path, _CSV_WHERE, image_shape)
    train = Dataset(
        name=spec,
        features=features,
        labels=labels,
        class_names=class_names,
        description=f"{path} (label column {label_column!r})",
    )
    return DatasetSplits(train=train, test=None)


def _user_path(raw: str, root: Path | None, kind: str) -> Path:
    if not raw:
        raise ConfigError("dataset", f"{kind}:PATH needs a path, e.g. {kind}:data/my.{kind}")
    path = Path(raw).expanduser()
    if _is_file(path):
        return path
    if not path.is_absolute() and root is not None and _is_file(root / path):
        return root / path
    where = f" or {root / path}" if not path.is_absolute() and root is not None else ""
    what = _NPZ_WHERE if kind == "npz" else _CSV_WHERE
    raise ConfigError("dataset", f"{kind} file {path}{where} not found; {what}")


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class _Source:
    """A named dataset: how to load each official split, and where its files live."""

    load: Callable[[Path | None, str], Dataset]
    splits: tuple[str, ...]  # official splits; ("train",) when there is none
    subdir: str | None  # folder under the data directory; None for bundled data
    locate: Callable[[Path | None, str], list[Path]]  # the files a split is read from
    where_to_get: str
    # A split's count, shape, classes and files without loading it (generated data); None: load it.
    describe: Callable[[Path | None, str], dict[str, Any]] | None = None
    # Folders looked in after the data directory (Debian's /usr/share/datasets/<name>/).
    system_dirs: tuple[Path, ...] = ()
    # What the dataset is, for people (fedvote data list).
    title: str = ""
    # Every official split holds as many records of each class, as its publisher documents
    # (CIFAR-10: 5,000 and 1,000 a class; Fashion-MNIST: 6,000 and 1,000): a pool drawn from
    # it has uniform class shares, known before any data is seen (tests/data: the full files).
    balanced_classes: bool = False


_SOURCES: dict[str, _Source] = {
    "digits": _Source(
        load=lambda root, split: load_digits(),
        splits=("train",),
        subdir=None,
        locate=lambda root, split: [],
        where_to_get="bundled with scikit-learn",
        title="scikit-learn's handwritten digits, 8x8 grey images",
    ),
    **{
        name: _Source(
            load=lambda root, split, name=name: load_idx_dataset(name, root, split),  # type: ignore[misc]
            splits=("train", "test"),
            subdir=kind.subdir,
            locate=lambda root, split, name=name: locate_idx(IDX_DATASETS[name], root, split),  # type: ignore[misc]
            where_to_get=kind.where_to_get,
            system_dirs=kind.system_dirs,
            title=f"{kind.title}, 28x28 grey images",
            balanced_classes=kind.balanced_classes,
        )
        for name, kind in IDX_DATASETS.items()
    },
    "cifar10": _Source(
        load=cifar10.load_cifar10,
        splits=("train", "test"),
        subdir="cifar10",
        locate=cifar10.locate,
        where_to_get=cifar10.WHERE,
        describe=cifar10.describe_split,
        title=f"{cifar10.TITLE}, 32x32 RGB images (decoded once, then cached)",
        balanced_classes=True,
    ),
    "usps": _Source(
        load=_load_usps,
        splits=("train", "test"),
        subdir="usps",
        locate=lambda root, split: [
            _find(root, "usps", _gz_variants(_USPS_FILES[split]), "usps", _USPS_WHERE)
        ],
        where_to_get=_USPS_WHERE,
        title="USPS (ESL zip code data), 16x16 grey images",
    ),
    # Generated from the installed fonts (fedvote.data.syndigits), or read from DATA_DIR/syndigits/.
    "syndigits": _Source(
        load=lambda root, split: _syndigits().load_syndigits(root, split),
        splits=("train", "test"),
        subdir="syndigits",
        locate=lambda root, split: [p for p in [_syndigits().split_file(root, split)] if p is not None],
        where_to_get="generated from the installed fonts (cached), or written to DATA_DIR/syndigits/ "
        "by fedvote data make-syndigits --out DATA_DIR",
        describe=lambda root, split: _syndigits().describe_split(root, split),
    ),
}


def _syndigits() -> Any:
    """The syndigits module, imported when first used (it imports this one)."""
    from fedvote.data import syndigits

    return syndigits


def register_source(name: str, source: _Source) -> None:
    """Register the dataset ``name``: for generated datasets built on registered ones.

    :mod:`fedvote.data.multidigit` (grids of digits 0-4, from the bundled digits or MNIST)
    registers ``multidigit`` and ``multidigit-mnist`` when it is imported, and
    :mod:`fedvote.data` imports it, so they are registered before any look-up while this
    registry never imports the module that builds on it (no import circle).
    """
    _SOURCES[name] = source


def documents_balanced_classes(name: str) -> bool:
    """Whether the registered dataset ``name``'s publisher documents equal class counts in every split.

    Public knowledge about the dataset (no record is read): the vote-sum student matches its
    class shares on a pool drawn from such a split to uniform
    (:func:`fedvote.models.vote_regression.prior_matched_offsets`). False for files of
    unknown balance (``npz:``, ``csv:``) and for datasets that do not document it.
    """
    source = _SOURCES.get(name)
    return source is not None and source.balanced_classes


def available_datasets() -> tuple[str, ...]:
    """Registered names accepted by :func:`load_dataset` (besides ``npz:PATH`` and ``csv:PATH``)."""
    return tuple(sorted(_SOURCES))


def is_dataset_name(name: str) -> bool:
    """Whether ``name`` is a registered dataset or an ``npz:PATH`` / ``csv:PATH`` spec."""
    return name in _SOURCES or any(name.startswith(p) and len(name) > len(p) for p in PATH_PREFIXES)


def has_official_test_split(name: str) -> bool:
    """Whether the registered dataset ``name`` ships an official test split (mnist, usps)."""
    return name in _SOURCES and "test" in _SOURCES[name].splits


def check_dataset_name(name: str, argument: str = "dataset") -> None:
    """Refuse, naming ``argument`` (``dataset`` or ``target``), a dataset neither registered nor a spec."""
    if not is_dataset_name(name):
        raise ConfigError(
            argument,
            f"unknown dataset {name!r}; choose from {', '.join(available_datasets())}, npz:PATH or csv:PATH",
        )


def load_splits(
    name: str,
    data_dir: str | Path | None = None,
    *,
    resize_to: tuple[int, int] | None = None,
    label_column: str = "label",
    image_shape: Sequence[int] | None = None,
) -> DatasetSplits:
    """A dataset's official train part and its official test part (None when it has none).

    Parameters
    ----------
    name : str
        ``digits``, ``mnist``, ``usps``, ``npz:PATH`` or ``csv:PATH``.
    data_dir : str or Path, optional
        Where file-based datasets are looked for; default ``$FEDVOTE_DATA``. Relative
        ``npz:``/``csv:`` paths are tried against the working directory, then this.
    resize_to : (int, int), optional
        Resample images to (height, width).
    label_column : str
        The CSV column holding the labels; default ``"label"``.
    image_shape : sequence of int, optional
        Reshape each flat npz/csv example to (H, W) or (C, H, W), e.g. (28, 28).

    """
    check_dataset_name(name)
    root = resolve_data_dir(data_dir)
    if name.startswith("npz:"):
        splits = _load_npz(name, root, image_shape)
    elif name.startswith("csv:"):
        splits = _load_csv(name, root, label_column, image_shape)
    else:
        source = _SOURCES[name]
        train = source.load(root, "train")
        test = source.load(root, "test") if "test" in source.splits else None
        splits = DatasetSplits(train=train, test=test)
    if resize_to is not None:
        splits = DatasetSplits(
            train=splits.train.resized(resize_to),
            test=splits.test.resized(resize_to) if splits.test is not None else None,
        )
    return splits


def load_dataset(
    name: str,
    data_dir: str | Path | None = None,
    *,
    split: str = "train",
    resize_to: tuple[int, int] | None = None,
    label_column: str = "label",
    image_shape: Sequence[int] | None = None,
) -> Dataset:
    """Load a dataset by name; ``data_dir`` is where file-based datasets are looked for.

    ``split`` is ``"train"`` (the official training part; everything for datasets
    without an official split, such as digits), ``"test"`` (the official test part) or
    ``"all"`` (both). Other arguments as in :func:`load_splits`.
    """
    check_dataset_name(name)
    if split not in SPLITS:
        raise ConfigError("split", f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    if name in _SOURCES and not (split == "all" and "test" in _SOURCES[name].splits):
        source = _SOURCES[name]
        if split == "test" and "test" not in source.splits:
            raise ConfigError("split", f"{name} has no official test split; use split='train' or 'all'")
        dataset = source.load(resolve_data_dir(data_dir), split if split == "test" else "train")
        return dataset.resized(resize_to) if resize_to is not None else dataset
    splits = load_splits(
        name, data_dir, resize_to=resize_to, label_column=label_column, image_shape=image_shape
    )
    if split == "train":
        return splits.train
    if splits.test is None:
        if split == "test":
            raise ConfigError(
                "split", f"{name} has no official test split (no x_test, y_test); use 'train' or 'all'"
            )
        return splits.train
    if split == "test":
        return splits.test
    return concatenate(splits.train, splits.test)


def concatenate(first: Dataset, second: Dataset) -> Dataset:
    """Two parts of one dataset (same classes and example shape) as one."""
    if first.class_names != second.class_names or first.example_shape != second.example_shape:
        raise ConfigError("dataset", f"cannot join {first.name} and {second.name}: classes or shapes differ")
    return Dataset(
        name=first.name,
        features=np.concatenate([first.features, second.features]),
        labels=np.concatenate([first.labels, second.labels]),
        class_names=first.class_names,
        description=f"{first.description} + {second.description}",
        split=first.split if first.split == second.split else "all",
        attribute_names=first.attribute_names,
    )


# --------------------------------------------------------------------------- listing


@dataclass(frozen=True)
class DatasetStatus:
    """Whether a registered dataset can be loaded, where fedvote looked, and what it holds.

    ``state`` is ``"available"``, ``"missing"`` (a file, or the data directory, is not
    there) or ``"corrupt"`` (a file is there but cannot be read as the dataset:
    ``error`` says why).
    """

    name: str
    available: bool
    searched: tuple[str, ...]
    splits: dict[str, dict[str, Any]]
    error: str | None
    where_to_get: str
    state: str = "available"
    description: str = ""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "name": self.name,
            "available": self.available,
            "state": self.state,
            "searched": list(self.searched),
            "splits": self.splits,
            "error": self.error,
            "where_to_get": self.where_to_get,
            "description": self.description,
        }


def dataset_status(name: str, data_dir: str | Path | None = None) -> DatasetStatus:
    """Try to load every official split of the registered dataset ``name`` and describe it.

    Never raises for missing or corrupt files: they make ``available`` False, ``state``
    ``"missing"`` or ``"corrupt"`` and ``error`` the one-line message :func:`load_dataset`
    would raise.
    """
    if name not in _SOURCES:
        choices = ", ".join(available_datasets())
        raise ConfigError("dataset", f"unknown dataset {name!r}; choose from {choices}")
    source = _SOURCES[name]
    root = resolve_data_dir(data_dir)
    if source.subdir is None:
        searched: tuple[str, ...] = ("(bundled)",)
    elif root is None and not source.system_dirs:
        searched = ()
    else:
        searched = tuple(str(d) for d in _search_dirs(root, source.subdir, source.system_dirs))
    splits: dict[str, dict[str, Any]] = {}
    error: str | None = None
    state = "available"
    for split in source.splits:
        label = split if len(source.splits) > 1 else "all"
        try:
            if source.describe is not None:
                splits[label] = source.describe(root, split)
                continue
            dataset = source.load(root, split)
        except ConfigError as exc:
            error = exc.detail
            state = "missing" if isinstance(exc, DatasetMissing) else "corrupt"
            break
        splits[label] = {
            "count": len(dataset),
            "shape": list(dataset.example_shape),
            "classes": dataset.num_classes,
            "files": [str(path) for path in source.locate(root, split)],
        }
        if dataset.attribute_names:  # multi-label: A binary attributes, 2^A label sets (not classes)
            splits[label]["attributes"] = len(dataset.attribute_names)
    return DatasetStatus(
        name=name,
        available=error is None,
        searched=searched,
        splits=splits if error is None else {},
        error=error,
        where_to_get=source.where_to_get,
        state=state,
        description=source.title,
    )
