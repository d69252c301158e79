"""Records identified by content: a 64-bit hash of each record's features.

A person's record is its features: the same features under another label, another file
name or another path are still that person's record. Both the public-pool check (a
public pool or test set must hold none of the agents' records) and the ledger (a budget
binds every record it was spent on) compare records through :func:`record_hashes`.

Features are hashed as float32 values (the dtype every loader returns), with the
example shape, and with ``-0.0`` read as ``0.0``, so that two loads of the same bytes,
through any loader, give the same hashes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np


def record_hashes(features: np.ndarray) -> np.ndarray:
    """One unsigned 64-bit hash per record of ``features`` (n, *shape), in record order: (n,) uint64.

    BLAKE2b with an 8-byte digest over the example shape and the record's float32 bytes.
    Collisions between distinct records have probability about n²/2⁶⁵ (negligible for
    any federation that fits in memory); a collision can only make a check refuse more.
    """
    values = np.ascontiguousarray(np.asarray(features, dtype=np.float32) + np.float32(0.0))  # -0.0 → 0.0
    header = repr(tuple(int(d) for d in values.shape[1:])).encode()
    rows = values.reshape(values.shape[0], -1) if values.shape[0] else values.reshape(0, 0)
    out = np.empty(values.shape[0], dtype=np.uint64)
    for index, row in enumerate(rows):
        digest = hashlib.blake2b(header + row.tobytes(), digest_size=8).digest()
        out[index] = np.frombuffer(digest, dtype="<u8")[0]
    return out


def sorted_record_hashes(features: np.ndarray) -> np.ndarray:
    """The distinct :func:`record_hashes` of ``features``, sorted: the compact form a ledger stores."""
    return np.unique(record_hashes(features))


def shared_record_count(records: np.ndarray, other_features: np.ndarray) -> int:
    """How many records of ``other_features`` hold features of a record whose hashes are ``records``.

    ``records`` is a sorted array of distinct hashes (:func:`sorted_record_hashes`).
    """
    other = record_hashes(other_features)
    if records.size == 0 or other.size == 0:
        return 0
    position = np.searchsorted(records, other).clip(max=records.size - 1)
    return int(np.count_nonzero(records[position] == other))


def overlap_count(first: np.ndarray, second: np.ndarray) -> int:
    """How many hashes two sorted arrays of distinct hashes share."""
    return int(np.intersect1d(first, second, assume_unique=True).size)


def sorted_hashes_of(parts: Iterable[np.ndarray]) -> np.ndarray:
    """The distinct :func:`record_hashes` of several feature arrays together (each agent's), sorted.

    Hashes each array apart, so a federation's records are never copied into one array.
    """
    hashed = [record_hashes(features) for features in parts]
    return np.unique(np.concatenate(hashed)) if hashed else np.empty(0, dtype=np.uint64)
