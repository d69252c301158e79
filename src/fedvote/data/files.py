"""Finding and reading a registered dataset's files in the data directory.

The data directory is ``--data-dir`` or ``$FEDVOTE_DATA``; a dataset's files are looked for
in ``<dir>/<subdir>/`` then ``<dir>``, and for some datasets then in a system folder (Debian's
``/usr/share/datasets/fashion-mnist/``, where ``apt-get install dataset-fashion-mnist`` puts
them). A file that is absent raises :class:`DatasetMissing`, one that is present but cannot
be read a :class:`~fedvote.errors.ConfigError`: each one line that names the file and says
where to get it.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Sequence
from pathlib import Path

from fedvote.errors import ConfigError

#: Environment variable naming the default data directory.
DATA_ENV = "FEDVOTE_DATA"


class DatasetMissing(ConfigError):
    """A registered dataset's file (or the data directory itself) is absent, not corrupt."""


def resolve_data_dir(data_dir: str | Path | None) -> Path | None:
    """``data_dir`` if given, else ``$FEDVOTE_DATA`` if set, else None."""
    if data_dir is None or str(data_dir) == "":
        env = os.environ.get(DATA_ENV, "")
        if not env:
            return None
        data_dir = env
    return Path(data_dir).expanduser()


def one_line(text: str) -> str:
    """``text`` with every run of white space (newlines included) made one space."""
    return " ".join(str(text).split())


def file_error(path: Path, problem: str, where: str, argument: str = "data_dir") -> ConfigError:
    """A present file that cannot be read as the dataset, refused by ``argument``'s name."""
    return ConfigError(argument, one_line(f"{path}: {problem}; {where}"))


def read_bytes(path: Path, where: str, argument: str = "data_dir") -> bytes:
    """The file's bytes, gunzipped when it is gzip-compressed (by its magic, not its name)."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise file_error(path, f"cannot read it ({error.strerror or error})", where, argument) from error
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as error:
            raise file_error(path, f"corrupt gzip data ({error})", where, argument) from error
    if path.suffix == ".gz":
        raise file_error(path, "named .gz but not gzip-compressed", where, argument)
    return raw


def search_dirs(root: Path | None, subdir: str, system_dirs: Sequence[Path] = ()) -> tuple[Path, ...]:
    """Where a dataset's files are looked for, in order: ``root/subdir``, ``root``, then ``system_dirs``."""
    own = (root / subdir, root) if root is not None else ()
    return (*own, *system_dirs)


def find(
    root: Path | None,
    subdir: str,
    names: Sequence[str],
    dataset: str,
    where: str,
    system_dirs: Sequence[Path] = (),
) -> Path:
    """The first of ``names`` found in ``root/subdir``, ``root``, then ``system_dirs``."""
    if root is None and not system_dirs:
        raise DatasetMissing(
            "data_dir",
            f"{dataset} reads {names[0]} from a data directory, and none was given "
            f"(use --data-dir DIR or set {DATA_ENV}); {where}",
        )
    dirs = search_dirs(root, subdir, system_dirs)
    for directory in dirs:
        for name in names:
            candidate = directory / name
            try:
                found = candidate.is_file()
            except OSError as error:  # e.g. a name too long for the file system (is_file raises it)
                raise ConfigError(
                    "data_dir", f"cannot look in {directory} ({error.strerror or error}); {where}"
                ) from error
            if found:
                return candidate
    looked = " or ".join(str(d) for d in dirs)
    no_dir = "" if root is not None else f" (no data directory given: use --data-dir DIR or set {DATA_ENV})"
    raise DatasetMissing("data_dir", f"{dataset}: {names[0]} not found in {looked}{no_dir}; {where}")


def gz_variants(base: str) -> tuple[str, ...]:
    """``base.gz`` then ``base``: a file may be stored compressed or not."""
    return (f"{base}.gz", base)


def is_file(path: Path) -> bool:
    """``path.is_file()``, False for a path the system cannot even look up (a name too long)."""
    try:
        return path.is_file()
    except OSError:
        return False


#: Dataset names given by a prefix and a path rather than a registry entry.
PATH_PREFIXES: tuple[str, ...] = ("npz:", "csv:")


def dataset_key(name: str, data_dir: str | Path | None = None) -> str:
    """The identity of the dataset ``name`` names, however it is spelled.

    Registered names ignore case and surrounding space (``" MNIST"`` is ``"mnist"``);
    ``npz:``/``csv:`` specs become their prefix plus the file's resolved path, found as
    the loader finds it (working directory, then ``data_dir``), so ``npz:a.npz`` and
    ``npz:./a.npz`` are one dataset. Two names with one key load the same records: the
    check that keeps the agents' records out of the public pool compares keys.
    """
    text = name.strip()
    prefix = next((p for p in PATH_PREFIXES if text.lower().startswith(p)), None)
    if prefix is None:
        return text.casefold()
    raw = Path(text[len(prefix) :].strip()).expanduser()
    root = resolve_data_dir(data_dir)
    candidates = [raw] if raw.is_absolute() or root is None else [raw, root / raw]
    found = next((c for c in candidates if is_file(c)), raw)
    return prefix + str(found.resolve())
