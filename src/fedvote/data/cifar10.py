"""CIFAR-10 (JPEG copy): ``train-jpeg.npz`` / ``test-jpeg.npz`` decoded with Pillow, and cached.

Each file is a NumPy ``.npz`` (no pickles) holding a split's images as the JPEG files they
were found as (``../shared/datasets/README.md``):

* ``jpeg``: uint8, every image's JPEG bytes one after another;
* ``offsets``: int64 (n + 1,): image i is ``jpeg[offsets[i]:offsets[i + 1]]``;
* ``labels``: uint8 (n,), 0-9; ``classes`` (optional): the ten class names in label order.

The images were re-encoded as JPEG (lossy) by the repository they come from, so figures made
from them are close to, not equal to, published CIFAR-10 figures: the dataset's description
says "CIFAR-10 (JPEG copy)" wherever it is shown.

Decoding 60,000 JPEGs takes a few seconds, so the decoded pixels (uint8, (n, 3, 32, 32)) and
labels are cached in ``<cache>/cifar10/``: ``$FEDVOTE_CACHE/cifar10`` when that is set (the
tests set it), else ``$XDG_CACHE_HOME/fedvote/cifar10``, else ``~/.cache/fedvote/cifar10``.
A cache file is named by the SHA-256 of the source file and the decoder's versions (Pillow,
libjpeg), so a changed file or decoder decodes again; it is written atomically (a temporary
file renamed into place), a damaged one is decoded again and rewritten, and a cache directory
that cannot be written only costs the decoding next time. A missing file raises
:class:`~fedvote.data.files.DatasetMissing`, a corrupt one (not a zip, an array missing, counts
that disagree, a JPEG that does not decode to 32x32 RGB) a one-line
:class:`~fedvote.errors.ConfigError` naming the file.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedvote.data.container import Dataset
from fedvote.data.files import DatasetMissing, file_error, find, one_line

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"
TITLE = "CIFAR-10 (JPEG copy)"
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
SPLIT_FILES = {"train": "train-jpeg.npz", "test": "test-jpeg.npz"}
SIDE = 32
WHERE = (
    "give the CIFAR-10 JPEG copy (train-jpeg.npz and test-jpeg.npz: arrays jpeg, offsets, labels; "
    "see fedvote's datasets README) in DATA_DIR/cifar10/; the original CIFAR-10 is at "
    f"{CIFAR10_URL}"
)
# The environment variable that moves fedvote's caches (fedvote.models.extractor_cache.CACHE_ENV).
CACHE_ENV = "FEDVOTE_CACHE"
# Bump when the cached layout changes meaning.
CACHE_FORMAT = 2
# Decoding takes long enough to say so on stderr from this many images on.
ANNOUNCE_FROM = 5_000


def cache_dir() -> Path:
    """``$FEDVOTE_CACHE/cifar10``, else ``$XDG_CACHE_HOME/fedvote/cifar10``, else ``~/.cache/...``."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser() / "cifar10"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "fedvote" / "cifar10"


def locate(root: Path | None, split: str) -> list[Path]:
    """The file ``split`` is read from: ``DATA_DIR/cifar10/<file>`` or ``DATA_DIR/<file>``."""
    return [find(root, "cifar10", (SPLIT_FILES[split],), "cifar10", WHERE)]


def load_cifar10(root: Path | None, split: str, *, cache: Path | None = None) -> Dataset:
    """One official split as (n, 3, 32, 32) float32 in [0, 1]; decoded once, then read from the cache.

    ``cache`` is the cache directory (default :func:`cache_dir`).
    """
    (path,) = locate(root, split)
    pixels, labels, classes = _decoded(path, cache if cache is not None else cache_dir())
    features = np.empty(pixels.shape, dtype=np.float32)  # (n, 3, 32, 32)
    np.divide(pixels, np.float32(255.0), out=features, dtype=np.float32)
    return Dataset(
        name="cifar10",
        features=features,
        labels=labels.astype(np.int64),
        class_names=classes,
        description=f"{TITLE} {split} ({len(labels)} images of 32x32 RGB, re-encoded as JPEG) "
        f"from {path.parent}",
        split=split,
    )


def _decoded(path: Path, directory: Path) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Pixels (n, 3, 32, 32) uint8, labels (n,) uint8 and class names of ``path``: cached, or decoded."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        if not path.exists():
            raise DatasetMissing("data_dir", f"cifar10: {path} disappeared; {WHERE}") from error
        raise file_error(path, f"cannot read it ({error.strerror or error})", WHERE) from error
    cached = directory / f"{cache_key(raw)}.npz"
    hit = _read_cache(cached)
    if hit is not None:
        return hit
    pixels, labels, classes = decode_archive(raw, path)
    _write_cache(cached, pixels, labels, classes)
    return pixels, labels, classes


def cache_key(raw: bytes) -> str:
    """SHA-256 over the source file's bytes, the cache format and the decoder's versions."""
    from PIL import Image, __version__

    decoder = getattr(Image.core, "jpeglib_version", "")
    digest = hashlib.sha256(raw)
    digest.update(f"\0format={CACHE_FORMAT}\0pillow={__version__}\0jpeg={decoder}".encode())
    return digest.hexdigest()


def decode_archive(raw: bytes, path: Path) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Check the archive's arrays and decode every JPEG: pixels (n, 3, 32, 32) uint8, labels (n,) uint8."""
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    except Exception as error:  # noqa: BLE001 - zipfile, pickle and format errors alike
        problem = f"not a readable .npz archive ({type(error).__name__}: {error})"
        raise file_error(path, problem, WHERE) from error
    missing = [key for key in ("jpeg", "offsets", "labels") if key not in arrays]
    if missing:
        held = ", ".join(sorted(arrays)) or "nothing"
        raise file_error(path, f"no array {', '.join(missing)} (it holds {held})", WHERE)
    jpeg, offsets, labels = arrays["jpeg"], arrays["offsets"], arrays["labels"]
    _check_arrays(path, jpeg, offsets, labels)
    classes = _class_names(path, arrays.get("classes"))
    pixels = _decode_all(path, jpeg.reshape(-1), offsets.astype(np.int64))
    return pixels, labels.astype(np.uint8), classes


def _check_arrays(path: Path, jpeg: np.ndarray, offsets: np.ndarray, labels: np.ndarray) -> None:
    """Refuse, naming ``path``, arrays whose types, shapes or counts do not fit together."""
    if jpeg.dtype != np.uint8 or jpeg.ndim != 1:
        raise file_error(path, f"jpeg must be 1-D uint8 bytes, got {jpeg.dtype} {jpeg.shape}", WHERE)
    if offsets.dtype.kind not in "iu" or offsets.ndim != 1 or offsets.shape[0] < 1:
        problem = f"offsets must be 1-D integers (n + 1,), got {offsets.dtype} {offsets.shape}"
        raise file_error(path, problem, WHERE)
    if labels.dtype.kind not in "iu" or labels.ndim != 1:
        problem = f"labels must be 1-D integers (n,), got {labels.dtype} {labels.shape}"
        raise file_error(path, problem, WHERE)
    if offsets.shape[0] != labels.shape[0] + 1:
        problem = f"{offsets.shape[0]} offsets for {labels.shape[0]} labels; expected one offset more"
        raise file_error(path, problem, WHERE)
    if labels.shape[0] == 0:
        raise file_error(path, "holds no images", WHERE)
    steps = np.diff(offsets.astype(np.int64))
    if int(offsets[0]) != 0 or int(offsets[-1]) != jpeg.shape[0] or (steps <= 0).any():
        problem = f"offsets must rise from 0 to the {jpeg.shape[0]} JPEG bytes, each image at least one byte"
        raise file_error(path, problem, WHERE)
    if labels.min() < 0 or labels.max() >= len(CLASSES):
        raise file_error(path, f"labels in [{labels.min()}, {labels.max()}], expected 0..9", WHERE)


def _class_names(path: Path, names: np.ndarray | None) -> tuple[str, ...]:
    """The archive's ``classes`` when it has them (ten names), else CIFAR-10's."""
    if names is None:
        return CLASSES
    if names.dtype.kind not in "US" or names.shape != (len(CLASSES),):
        problem = f"classes must be {len(CLASSES)} names, got {names.dtype} {names.shape}"
        raise file_error(path, problem, WHERE)
    return tuple(str(n) for n in names)


def _decode_all(path: Path, jpeg: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Every image, (n, 3, 32, 32) uint8; one Pillow decode each (~40 µs), said on stderr when many."""
    from PIL import Image

    count = offsets.shape[0] - 1
    announce = count >= ANNOUNCE_FROM
    if announce:
        print(f"cifar10: decoding {count} JPEG images of {path} (once; then cached)", file=sys.stderr)
    started = time.perf_counter()
    pixels = np.empty((count, SIDE, SIDE, 3), dtype=np.uint8)  # (n, H, W, RGB)
    data = jpeg.tobytes()
    bounds = offsets.tolist()
    for i in range(count):
        try:
            with Image.open(io.BytesIO(data[bounds[i] : bounds[i + 1]])) as image:
                if image.format != "JPEG":
                    raise ValueError(f"a {image.format} image, not a JPEG")
                rgb = image.convert("RGB")
                if rgb.size != (SIDE, SIDE):
                    raise ValueError(f"{rgb.size[0]}x{rgb.size[1]}, expected {SIDE}x{SIDE}")
                pixels[i] = np.asarray(rgb)
        except Exception as error:  # noqa: BLE001 - Pillow raises many types for a damaged image
            problem = f"the image at index {i} (of {count}) does not decode ({_decode_problem(error)})"
            raise file_error(path, problem, WHERE) from error
    if announce:
        seconds = time.perf_counter() - started
        print(f"cifar10: decoded {count} images in {seconds:.1f} s", file=sys.stderr, flush=True)
    return np.ascontiguousarray(pixels.transpose(0, 3, 1, 2))  # (n, H, W, RGB) -> (n, RGB, H, W)


# A Python object's default repr (``<_io.BytesIO object at 0x7f...>``), which Pillow puts in its
# messages about the in-memory file it was given: it names nothing the user can find.
_OBJECT_REPR = re.compile(r"\s*<[\w.]+ object at 0x[0-9a-fA-F]+>")


def _decode_problem(error: Exception) -> str:
    """Why one image did not decode, on one line and without the repr of the buffer it was read from."""
    from PIL import UnidentifiedImageError

    if isinstance(error, UnidentifiedImageError):
        return "not an image Pillow can identify"
    return one_line(_OBJECT_REPR.sub("", str(error))) or type(error).__name__


def _read_cache(path: Path) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]] | None:
    """A cache file's pixels, labels and classes; None when it is absent or damaged (decode again)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            pixels, labels = archive["pixels"], archive["labels"]
            classes = tuple(str(n) for n in archive["classes"])
    except Exception:  # noqa: BLE001 - absent, truncated or foreign: decode again
        return None
    if (
        pixels.dtype != np.uint8
        or pixels.shape[1:] != (3, SIDE, SIDE)
        or labels.shape != (pixels.shape[0],)
        or len(classes) != len(CLASSES)
    ):
        return None
    return pixels, labels, classes


def _write_cache(path: Path, pixels: np.ndarray, labels: np.ndarray, classes: tuple[str, ...]) -> None:
    """``np.savez`` to a temporary file beside ``path``, renamed onto it; skipped if it cannot be written."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(temporary, "xb") as file:
            np.savez(file, pixels=pixels, labels=labels, classes=np.array(classes))
        os.replace(temporary, path)
    except OSError as error:
        try:
            temporary.unlink(missing_ok=True)
        except OSError:  # the directory itself could not be made
            pass
        print(f"cifar10: could not cache the decoded images in {path} ({error})", file=sys.stderr)


def describe_split(root: Path | None, split: str) -> dict[str, Any]:
    """What ``fedvote data list`` shows of a split: count, shape, classes, files (no float conversion)."""
    (path,) = locate(root, split)
    pixels, _, classes = _decoded(path, cache_dir())
    count = int(pixels.shape[0])
    return {"count": count, "shape": [3, SIDE, SIDE], "classes": len(classes), "files": [str(path)]}
