"""MNIST and Fashion-MNIST: the four IDX files each ships, parsed and checked against their headers.

Both datasets share one format (gzip-compressed IDX, big-endian: a magic number, the sizes,
then uint8 data; 60,000 training and 10,000 test images of 28x28, labels 0-9), so one reader
serves both; :data:`IDX_DATASETS` holds what differs (folder, class names, where to get it,
a system folder). Images come back as (n, 1, 28, 28) float32 in [0, 1].
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedvote.data.container import Dataset
from fedvote.data.files import file_error, find, gz_variants, read_bytes

MNIST_URL = "http://yann.lecun.com/exdb/mnist/"
FASHION_MNIST_URL = "https://github.com/zalandoresearch/fashion-mnist"
# Debian's package dataset-fashion-mnist installs the four files here.
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")

DIGIT_CLASSES = tuple(str(c) for c in range(10))
FASHION_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip

# The official file names of each split: images, labels (the same for both datasets).
IDX_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


@dataclass(frozen=True)
class IdxDataset:
    """What tells the IDX datasets apart: name, folder, title, classes, where to get the files."""

    name: str
    subdir: str
    title: str
    class_names: tuple[str, ...]
    where_to_get: str
    system_dirs: tuple[Path, ...] = ()
    balanced_classes: bool = False  # every split documented with equal class counts


IDX_DATASETS = {
    "mnist": IdxDataset(
        name="mnist",
        subdir="mnist",
        title="MNIST",
        class_names=DIGIT_CLASSES,
        where_to_get="get the official MNIST IDX files (train-images-idx3-ubyte.gz, "
        "train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz) from "
        f"{MNIST_URL} and put them in DATA_DIR/mnist/",
    ),
    "fashion-mnist": IdxDataset(
        name="fashion-mnist",
        subdir="fashion-mnist",
        title="Fashion-MNIST",
        class_names=FASHION_CLASSES,
        where_to_get="get the four Fashion-MNIST IDX files (train-images-idx3-ubyte.gz, ...) from "
        f"{FASHION_MNIST_URL} and put them in DATA_DIR/fashion-mnist/, or on Debian/Ubuntu "
        f"apt-get install dataset-fashion-mnist (installs them in {DEBIAN_FASHION_MNIST}/)",
        system_dirs=(DEBIAN_FASHION_MNIST,),
        balanced_classes=True,  # 6,000 training and 1,000 test images a class (its README)
    ),
}


def idx_names(base: str) -> tuple[str, ...]:
    """The spellings of one IDX file, compressed or not; some mirrors write "train-images.idx3-ubyte"."""
    dotted = base.replace("-idx", ".idx")
    return (*gz_variants(base), *gz_variants(dotted))


def parse_idx(data: bytes, path: Path, ndim: int, where: str = "") -> np.ndarray:
    """An IDX array of unsigned bytes with ``ndim`` dimensions, validated against its header.

    The header is the magic ``0x0000 08 ndim`` (big-endian) and ``ndim`` 32-bit sizes; the
    data must hold exactly their product of bytes.
    """
    header = 4 + 4 * ndim
    if len(data) < header:
        raise file_error(path, f"{len(data)} bytes, too short for an IDX header of {header} bytes", where)
    magic = int.from_bytes(data[:4], "big")
    expected = 0x0800 + ndim
    if magic != expected:
        raise file_error(
            path, f"bad magic number 0x{magic:08x}, expected 0x{expected:08x} (IDX, uint8, {ndim}-D)", where
        )
    dims = struct.unpack(f">{ndim}I", data[4:header])
    size = math.prod(dims)  # Python ints: an int64 product wraps (2³¹·2³¹·2³¹ is 0)
    if len(data) - header != size:
        state = "truncated" if len(data) - header < size else "has trailing bytes"
        raise file_error(
            path,
            f"{state}: the header announces {'x'.join(map(str, dims))} = {size} bytes of data, "
            f"the file holds {len(data) - header}",
            where,
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def locate_idx(kind: IdxDataset, root: Path | None, split: str) -> list[Path]:
    """The image file and the label file of ``split``, as the loader finds them."""
    return [
        find(root, kind.subdir, idx_names(base), kind.name, kind.where_to_get, kind.system_dirs)
        for base in IDX_FILES[split]
    ]


def load_idx_dataset(name: str, root: Path | None, split: str) -> Dataset:
    """The registered IDX dataset ``name`` (``"mnist"`` or ``"fashion-mnist"``), one official split."""
    kind = IDX_DATASETS[name]
    where = kind.where_to_get
    image_path, label_path = locate_idx(kind, root, split)
    images = parse_idx(read_bytes(image_path, where), image_path, 3, where)  # (n, 28, 28) uint8
    labels = parse_idx(read_bytes(label_path, where), label_path, 1, where)  # (n,) uint8
    if images.shape[0] != labels.shape[0]:
        raise file_error(
            image_path, f"{images.shape[0]} images but {label_path} holds {labels.shape[0]} labels", where
        )
    if labels.size and labels.max() >= len(kind.class_names):
        raise file_error(
            label_path, f"label {int(labels.max())} outside 0..{len(kind.class_names) - 1}", where
        )
    features = images.astype(np.float32)[:, None, :, :]  # (n, 1, 28, 28)
    features /= 255.0
    return Dataset(
        name=name,
        features=features,
        labels=labels.astype(np.int64),
        class_names=kind.class_names,
        description=f"{kind.title} {split} ({images.shape[0]} images of {images.shape[1]}x{images.shape[2]}) "
        f"from {image_path.parent}",
        split=split,
    )
