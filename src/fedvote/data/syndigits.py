"""SynDigits-style synthetic digits: a street-number-like domain rendered from the installed fonts.

The voting paper's digits-across-domains setting (Section 5.1) gives 140 of its agents
SVHN, house numbers photographed in the street. SVHN cannot be downloaded here, so this
module renders a stand-in in the spirit of Ganin & Lempitsky's SynDigits ("Unsupervised
domain adaptation by backpropagation", 2015): RGB 32x32 crops of one to three digits in
a TrueType font, the *centre* digit being the label (as SVHN's cropped-digit format),
with random position, scale, rotation, stroke width, foreground and background colours
(with a minimum luminance contrast, either polarity), gradient and low-frequency
textured backgrounds, light blur and pixel noise. It differs from MNIST and USPS in
everything but the classes: colour, typeset rather than handwritten glyphs, clutter from
neighbouring digits, background texture (``tests/data/test_syndigits.py`` measures the
shift: a classifier trained on MNIST loses more than 20 points on it).

Generation is deterministic given ``seed``, the font set and the rendering library
(Pillow and its FreeType); the font set is every ``*.ttf`` under
:data:`FONT_ROOT`, listed once at import time and sorted, less the faces too thin to
survive 32x32 (:data:`EXCLUDED_FACES`). Which fonts exist depends on the Debian font
packages installed (``make fonts`` installs :data:`FONT_PACKAGES`); the list is written
into every dataset's description, and the on-the-fly cache is keyed by the fonts'
content, so another font set gives another dataset, never a stale one.

Values are quantised to multiples of 1/255 (as 8-bit images are), so a dataset stored
as ``uint8`` (``fedvote data make-syndigits``) is bit-identical to one generated on the fly.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from fedvote.data.container import Dataset
from fedvote.data.files import DatasetMissing
from fedvote.errors import ConfigError

#: Bump when a change to the generator changes the images a seed gives.
GENERATOR_VERSION = 1
#: Where TrueType fonts are looked for.
FONT_ROOT = Path("/usr/share/fonts/truetype")
#: The Debian packages ``make fonts`` installs (DejaVu and Liberation; FreeFont and Lato add faces).
FONT_PACKAGES: tuple[str, ...] = ("fonts-dejavu-core", "fonts-liberation", "fonts-freefont-ttf", "fonts-lato")
#: Face names (substrings of the file name) left out: strokes under a pixel at 32x32, or not text faces.
EXCLUDED_FACES: tuple[str, ...] = ("Hairline", "Thin", "ExtraLight", "Math")
#: Image side and the supersampling factor glyphs are drawn at before they are shrunk.
SIDE = 32
_SUPER = 2
#: Defaults of the registered ``syndigits`` dataset when no files are in the data directory.
DEFAULT_COUNTS: dict[str, int] = {"train": 20_000, "test": 5_000}
DEFAULT_SEEDS: dict[str, int] = {"train": 0, "test": 1}
#: The file names ``fedvote data make-syndigits`` writes, per split, under ``<dir>/syndigits/``.
SPLIT_FILES: dict[str, str] = {"train": "train.npz", "test": "test.npz"}
#: The most images one call renders (2.4 GB as float32).
MAX_COUNT = 200_000

_CLASSES = tuple(str(c) for c in range(10))
_NO_FONTS = (
    f"syndigits found no TrueType font under {FONT_ROOT}; install one, e.g. "
    f"apt-get install {' '.join(FONT_PACKAGES[:2])} (or run make fonts)"
)


def _list_fonts(root: Path) -> tuple[Path, ...]:
    """Every usable ``*.ttf`` under ``root``, sorted by path (so generation is deterministic)."""
    try:
        found = sorted(root.rglob("*.ttf"))
    except OSError:
        return ()
    return tuple(p for p in found if not any(face in p.name for face in EXCLUDED_FACES))


#: The fonts found at import time.
FONTS: tuple[Path, ...] = _list_fonts(FONT_ROOT)


def font_names(fonts: tuple[Path, ...] = FONTS) -> tuple[str, ...]:
    """The fonts as paths relative to :data:`FONT_ROOT` (``dejavu/DejaVuSans.ttf``)."""
    return tuple(str(p.relative_to(FONT_ROOT)) if p.is_relative_to(FONT_ROOT) else str(p) for p in fonts)


def _require_fonts(fonts: tuple[Path, ...]) -> None:
    if not fonts:
        raise ConfigError("dataset", _NO_FONTS)


@lru_cache(maxsize=4096)
def _font(path: Path, size: int) -> Any:
    from PIL import ImageFont

    return ImageFont.truetype(str(path), size)


@dataclass(frozen=True)
class _Draws:
    """Every random choice for ``n`` images, drawn at once (vectorised) from the seeded generator."""

    labels: np.ndarray  # (n,) int64, the centre digit
    left: np.ndarray  # (n,) int64, the left neighbour, -1 for none
    right: np.ndarray  # (n,) int64, the right neighbour, -1 for none
    font: np.ndarray  # (n,) index into the font list
    size: np.ndarray  # (n,) font size in supersampled pixels
    stroke: np.ndarray  # (n,) stroke width in supersampled pixels
    angle: np.ndarray  # (n,) rotation in degrees
    shift: np.ndarray  # (n, 2) offset of the label's centre from the image centre, pixels (x, y)
    blur: np.ndarray  # (n,) Gaussian blur radius of the glyph mask, supersampled pixels
    background: np.ndarray  # (n, 3) RGB in [0, 1]
    foreground: np.ndarray  # (n, 3) RGB in [0, 1]
    gradient: np.ndarray  # (n, 3) strength, direction cos, direction sin
    texture: np.ndarray  # (n, 4, 4) low-frequency texture field, N(0, 1)
    texture_gain: np.ndarray  # (n,)
    noise: np.ndarray  # (n,) pixel noise standard deviation


_LUMA = np.array([0.299, 0.587, 0.114])  # ITU-R BT.601 luminance weights
_MIN_CONTRAST = 0.3  # |luma(foreground) - luma(background)| at least this


def _contrasting_colours(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Background and foreground RGB (n, 3) whose luminances differ by >= _MIN_CONTRAST (rejection)."""
    background = np.empty((n, 3))
    foreground = np.empty((n, 3))
    todo = np.arange(n)
    while todo.size:
        bg = rng.uniform(0.0, 1.0, (todo.size, 3))
        fg = rng.uniform(0.0, 1.0, (todo.size, 3))
        ok = np.abs((fg - bg) @ _LUMA) >= _MIN_CONTRAST
        background[todo[ok]], foreground[todo[ok]] = bg[ok], fg[ok]
        todo = todo[~ok]
    return background, foreground


def _draw(rng: np.random.Generator, n: int, num_fonts: int) -> _Draws:
    labels = rng.permutation(np.arange(n) % 10).astype(np.int64)  # balanced: each digit n/10 times
    digits = rng.choice(3, size=n, p=[0.4, 0.3, 0.3])  # 0: alone, 1: one neighbour, 2: two
    side = rng.integers(0, 2, size=n)  # with one neighbour: left (0) or right (1)
    neighbours = rng.integers(0, 10, size=(n, 2))
    left = np.where((digits == 2) | ((digits == 1) & (side == 0)), neighbours[:, 0], -1)
    right = np.where((digits == 2) | ((digits == 1) & (side == 1)), neighbours[:, 1], -1)
    background, foreground = _contrasting_colours(rng, n)
    return _Draws(
        labels=labels,
        left=left.astype(np.int64),
        right=right.astype(np.int64),
        font=rng.integers(0, num_fonts, size=n),
        size=_SUPER * rng.integers(16, 29, size=n),  # glyph height about 0.5-0.9 of the frame
        stroke=rng.choice(3, size=n, p=[0.6, 0.3, 0.1]),
        angle=rng.uniform(-15.0, 15.0, size=n),
        shift=rng.uniform(-3.0, 3.0, size=(n, 2)),
        blur=rng.choice([0.0, 0.0, 0.8, 1.6], size=n),
        background=background,
        foreground=foreground,
        gradient=np.column_stack(
            [rng.uniform(0.0, 0.35, n), *(lambda t: (np.cos(t), np.sin(t)))(rng.uniform(0, 2 * np.pi, n))]
        ),
        texture=rng.standard_normal((n, 4, 4)),
        texture_gain=rng.uniform(0.0, 0.12, n),
        noise=rng.uniform(0.0, 0.04, n),
    )


def _glyph_mask(draws: _Draws, index: int, fonts: tuple[Path, ...]) -> np.ndarray:
    """Coverage (SIDE, SIDE) float in [0, 1] of image ``index``'s digits, label centred then moved."""
    from PIL import Image, ImageDraw, ImageFilter

    canvas = SIDE * _SUPER
    font = _font(fonts[int(draws.font[index])], int(draws.size[index]))
    left = str(draws.left[index]) if draws.left[index] >= 0 else ""
    right = str(draws.right[index]) if draws.right[index] >= 0 else ""
    label = str(draws.labels[index])
    # Put the label's horizontal centre (and the string's vertical middle) at the canvas centre.
    x = canvas / 2 - font.getlength(left) - font.getlength(label) / 2
    mask = Image.new("L", (canvas, canvas), 0)
    ImageDraw.Draw(mask).text(
        (x, canvas / 2),
        left + label + right,
        fill=255,
        font=font,
        anchor="lm",
        stroke_width=int(draws.stroke[index]),
        stroke_fill=255,
    )
    dx, dy = (round(float(v) * _SUPER) for v in draws.shift[index])  # whole supersampled pixels
    mask = mask.rotate(
        float(draws.angle[index]), resample=Image.Resampling.BILINEAR, translate=(dx, dy)
    )
    if draws.blur[index] > 0:
        mask = mask.filter(ImageFilter.GaussianBlur(float(draws.blur[index])))
    mask = mask.resize((SIDE, SIDE), Image.Resampling.BOX)
    return np.asarray(mask, dtype=np.float32) / 255.0


def _backgrounds(draws: _Draws) -> np.ndarray:
    """Gradient plus textured backgrounds (n, 3, SIDE, SIDE), before the glyphs."""
    import torch
    from torch.nn import functional

    grid = (np.arange(SIDE) - (SIDE - 1) / 2) / SIDE  # (SIDE,) in [-0.5, 0.5]
    # Linear ramp along a random direction: (n, SIDE, SIDE).
    strength, cos, sin = (draws.gradient[:, k, None, None] for k in range(3))  # each (n, 1, 1)
    ramp = strength * (cos * grid[None, None, :] + sin * grid[None, :, None])
    with torch.no_grad():  # a 4x4 random field smoothly upsampled: texture at the scale of a few pixels
        field = functional.interpolate(
            torch.from_numpy(draws.texture[:, None]), size=(SIDE, SIDE), mode="bicubic", align_corners=False
        )[:, 0].numpy()  # (n, SIDE, SIDE)
    shade = ramp + draws.texture_gain[:, None, None] * field  # (n, SIDE, SIDE)
    return draws.background[:, :, None, None] + shade[:, None, :, :]  # (n, 3, SIDE, SIDE)


def make_syndigits(
    count: int,
    seed: int,
    *,
    split: str = "train",
    fonts: tuple[Path, ...] | None = None,
    progress: bool = False,
) -> Dataset:
    """``count`` synthetic digit images (n, 3, 32, 32) float32 in [0, 1] with labels 0-9.

    Deterministic under ``seed`` (a NumPy ``Generator``) for a given font set, Pillow and
    FreeType. The labels are balanced (each digit ``count/10`` times, up to one). ``split``
    only names the part (``"train"``/``"test"``); choose distinct seeds for distinct parts.
    ``progress`` writes a line to stderr every 5000 images.
    """
    if isinstance(count, bool) or not isinstance(count, int | np.integer) or not 1 <= count <= MAX_COUNT:
        raise ConfigError("count", f"must be an integer in [1, {MAX_COUNT}], got {count!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError("seed", f"must be a non-negative integer, got {seed!r}")
    fonts = FONTS if fonts is None else tuple(fonts)
    _require_fonts(fonts)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), GENERATOR_VERSION, 0x5D16]))
    draws = _draw(rng, int(count), len(fonts))
    masks = np.empty((int(count), SIDE, SIDE), dtype=np.float32)  # (n, SIDE, SIDE) glyph coverage
    for index in range(int(count)):
        masks[index] = _glyph_mask(draws, index, fonts)
        if progress and (index + 1) % 5000 == 0:
            print(f"syndigits: {index + 1}/{count} images", file=sys.stderr, flush=True)
    ink = masks[:, None, :, :]  # (n, 1, SIDE, SIDE)
    colour = draws.foreground[:, :, None, None]  # (n, 3, 1, 1)
    images = _backgrounds(draws) * (1.0 - ink) + colour * ink  # (n, 3, SIDE, SIDE)
    images += draws.noise[:, None, None, None] * rng.standard_normal(images.shape)
    quantised = np.rint(np.clip(images, 0.0, 1.0) * 255.0).astype(np.uint8)
    return _dataset(quantised, draws.labels, split, seed, fonts)


def _dataset(
    pixels: np.ndarray, labels: np.ndarray, split: str, seed: int | str, fonts: tuple[Path, ...]
) -> Dataset:
    """The Dataset of ``pixels`` (n, 3, SIDE, SIDE) uint8 with its origin in the description."""
    features = pixels.astype(np.float32)
    features /= 255.0
    return Dataset(
        name="syndigits",
        features=features,
        labels=np.asarray(labels, dtype=np.int64),
        class_names=_CLASSES,
        description=(
            f"SynDigits-style synthetic digits {split} ({len(labels)} RGB {SIDE}x{SIDE} images, "
            f"generator v{GENERATOR_VERSION}, seed {seed}) rendered from {len(fonts)} fonts: "
            f"{', '.join(font_names(fonts))}"
        ),
        split=split,
    )


# --------------------------------------------------------------------------- files and cache


def write_split(path: Path, dataset: Dataset, seed: int, fonts: tuple[Path, ...] = FONTS) -> None:
    """Write ``dataset`` to ``path`` atomically: .npz of ``x`` uint8 (n, 3, 32, 32), ``y``, ``seed``, fonts.

    ``dataset`` holds multiples of 1/255 (:func:`make_syndigits` quantises), so ``x`` is exact.
    """
    pixels = np.rint(dataset.features * 255.0).astype(np.uint8)
    _write_npz(
        path,
        x=pixels,
        y=dataset.labels,
        seed=np.array(seed, dtype=np.int64),
        fonts=np.array(font_names(fonts)),
        version=np.array(GENERATOR_VERSION, dtype=np.int64),
    )


def _write_npz(path: Path, **arrays: np.ndarray) -> None:
    """``np.savez`` to a temporary file beside ``path`` (the umask's permissions), then renamed onto it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(temporary, "xb") as file:
            np.savez(file, **arrays)  # type: ignore[arg-type]
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def read_split(path: Path, split: str) -> Dataset:
    """A split written by :func:`write_split`; a file that is not one raises a one-line ConfigError."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            pixels, labels = archive["x"], archive["y"]
            seed = int(archive["seed"]) if "seed" in archive.files else "?"
            names = tuple(str(n) for n in archive["fonts"]) if "fonts" in archive.files else ()
    except Exception as error:  # noqa: BLE001 - zipfile, key and format errors alike
        raise ConfigError(
            "data_dir", f"{path}: not a syndigits file ({type(error).__name__}: {error}); rewrite it with "
            "fedvote data make-syndigits"
        ) from error
    if pixels.dtype != np.uint8 or pixels.ndim != 4 or pixels.shape[1:] != (3, SIDE, SIDE):
        shape = f"(n, 3, {SIDE}, {SIDE})"
        raise ConfigError("data_dir", f"{path}: x must be uint8 {shape}, got {pixels.dtype} {pixels.shape}")
    if labels.shape != (pixels.shape[0],) or (labels.size and (labels.min() < 0 or labels.max() > 9)):
        raise ConfigError("data_dir", f"{path}: y must hold one label in 0..9 per image")
    return _dataset(pixels, labels, split, seed, tuple(FONT_ROOT / n for n in names))


def _font_digest(fonts: tuple[Path, ...]) -> str:
    """SHA-256 over the fonts' names and bytes, and the Pillow/FreeType versions that render them."""
    from PIL import ImageFont, __version__

    digest = hashlib.sha256()
    digest.update(json.dumps([__version__, getattr(ImageFont.core, "freetype2_version", "")]).encode())
    for name, path in zip(font_names(fonts), fonts, strict=True):
        digest.update(name.encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def cache_key(count: int, seed: int, fonts: tuple[Path, ...] = FONTS) -> str:
    """The SHA-256 naming the generated set: generator version, fonts (content), count and seed."""
    settings = json.dumps({"version": GENERATOR_VERSION, "count": int(count), "seed": int(seed)})
    return hashlib.sha256((settings + _font_digest(fonts)).encode()).hexdigest()


def cache_dir() -> Path:
    """``syndigits/`` inside the directory the extractor cache uses (``$FEDVOTE_CACHE``)."""
    from fedvote.models.extractor_cache import default_cache_dir

    return default_cache_dir() / "syndigits"


def generated_split(split: str, *, directory: Path | None = None) -> Dataset:
    """The default ``split`` (:data:`DEFAULT_COUNTS`, :data:`DEFAULT_SEEDS`): cached, or generated and cached.

    A cache file that cannot be read is regenerated; one that cannot be written is skipped
    (the dataset is still returned).
    """
    _require_fonts(FONTS)
    count, seed = DEFAULT_COUNTS[split], DEFAULT_SEEDS[split]
    path = (directory or cache_dir()) / f"{cache_key(count, seed)}.npz"
    if path.is_file():
        try:
            return read_split(path, split)
        except ConfigError:
            pass  # damaged: generate again and overwrite it
    dataset = make_syndigits(count, seed, split=split)
    try:
        write_split(path, dataset, seed)
    except OSError:
        pass
    return dataset


def split_file(root: Path | None, split: str) -> Path | None:
    """``<root>/syndigits/<split>.npz`` when ``fedvote data make-syndigits`` wrote it there, else None."""
    if root is None:
        return None
    path = root / "syndigits" / SPLIT_FILES[split]
    try:
        return path if path.is_file() else None
    except OSError:
        return None


def load_syndigits(root: Path | None, split: str) -> Dataset:
    """The registered ``syndigits`` split: the data directory's files if there, else generated (cached)."""
    path = split_file(root, split)
    if path is not None:
        return read_split(path, split)
    if not FONTS:
        raise DatasetMissing("dataset", _NO_FONTS)
    return generated_split(split)


def describe_split(root: Path | None, split: str) -> dict[str, Any]:
    """What ``fedvote data list`` shows of a split, without generating it: count, shape, classes, files."""
    path = split_file(root, split)
    if path is not None:
        dataset = read_split(path, split)
        count, files = len(dataset), [str(path)]
    elif not FONTS:
        raise DatasetMissing("dataset", _NO_FONTS)
    else:
        count, files = DEFAULT_COUNTS[split], []
    return {"count": count, "shape": [3, SIDE, SIDE], "classes": len(_CLASSES), "files": files}
