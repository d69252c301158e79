"""An agent's records mapped through its φ once, then reused by every later message.

Flower handles every message an agent answers (register, teacher, each vote round) in a fresh
ClientApp process, and each one reads the agent's file. Mapping its records through the file's
input features φ (:class:`~fedvote.models.input_features.InputMap`) is the costly part: about
17 s of CPU for 20,000 Fashion-MNIST records, several times that on a busy host. So the mapped
records are kept, keyed by the SHA-256 of the agent file's *content* (with fedvote's version,
whose code does the mapping): never by its name or path, so an edited or replaced file is mapped
afresh and a copy of the same file is not.

Two tiers, each bounded to :data:`CACHED_FILES` entries (the oldest dropped first):

* in memory, for a process that answers several messages (a simulation engine's worker, tests);
* on disk, in the directory the node config's ``records-cache`` names (``fedvote deploy agent``
  gives one inside its Flower home, removed when the agent stops), for the fresh processes of a
  deployment. The mapped records are as private as the raw ones: they stay on the agent's node,
  in its own work directory.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections import OrderedDict
from pathlib import Path

import numpy as np

from fedvote._meta import __version__
from fedvote.flower.files import AgentFile, load_agent_file, map_agent_records
from fedvote.models.input_features import InputMap

CACHED_FILES = 4  # agent files kept mapped, per tier (a node runs one agent; a few for tests, reruns)
_CHUNK = 1 << 20  # bytes hashed per read

_memory: OrderedDict[str, AgentFile] = OrderedDict()  # content key → the loaded, mapped file


def content_key(path: str | Path) -> str:
    """SHA-256 of the file's bytes and fedvote's version: the identity of its mapped records."""
    digest = hashlib.sha256(f"fedvote {__version__}\0".encode())
    with Path(path).open("rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def cached_agent_file(path: str | Path, directory: str | Path | None = None) -> AgentFile:
    """The agent file at ``path``, its records mapped through its φ once per content.

    A file already seen by this process comes from memory; else its mapped records come from
    ``directory`` when a process before this one mapped the same content, and are written
    there otherwise. A file that cannot be read is refused as :func:`load_agent_file` refuses it.
    """
    if not Path(path).is_file():
        return load_agent_file(path)  # its one-line refusal
    key = content_key(path)
    if key in _memory:
        _memory.move_to_end(key)
        return _memory[key]
    store = None if directory is None else Path(directory)

    def mapped(input_map: InputMap, features: np.ndarray) -> np.ndarray:
        return _stored_mapping(store, key, input_map, features)

    file = load_agent_file(path, map_records=mapped)
    _memory[key] = file
    while len(_memory) > CACHED_FILES:
        _memory.popitem(last=False)
    return file


def clear_memory() -> None:
    """Forget the files this process holds mapped (the next message reads the disk tier or maps)."""
    _memory.clear()


def _stored_mapping(store: Path | None, key: str, input_map: InputMap, features: np.ndarray) -> np.ndarray:
    """φ(records) from ``store``'s file for ``key`` if it holds the right shape, else mapped and stored."""
    if store is None:
        return map_agent_records(input_map, features)
    target = store / f"mapped-{key}.npy"
    expected = (len(features), input_map.extractor.dim)
    try:
        held = np.load(target, allow_pickle=False)
        if held.shape == expected and held.dtype == np.float32:
            os.utime(target)  # recently used: dropped last
            return held
    except (OSError, ValueError):  # absent, or a damaged or partial file: map again
        pass
    records = map_agent_records(input_map, features)
    _store(store, target, records)
    return records


def _store(store: Path, target: Path, records: np.ndarray) -> None:
    """Write ``records`` to ``target`` atomically (private to this user), then keep the newest few."""
    store.mkdir(parents=True, exist_ok=True, mode=0o700)
    handle, temporary = tempfile.mkstemp(dir=store, prefix=".mapped-", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            np.save(out, records, allow_pickle=False)
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    kept = sorted(store.glob("mapped-*.npy"), key=lambda entry: entry.stat().st_mtime_ns, reverse=True)
    for old in kept[CACHED_FILES:]:
        old.unlink(missing_ok=True)
