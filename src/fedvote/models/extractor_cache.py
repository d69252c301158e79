"""A disk cache of trained public feature extractors, addressed by the content they were trained on.

A learned extractor (an autoencoder's or SimCLR's encoder, :mod:`fedvote.models.features`)
is a deterministic function of the public pool and its training settings, and training it
takes seconds to a minute; every run of a sweep over the same public pool would train the
same one again. :func:`load_or_train` keeps the trained weights (``torch.save`` of the
``state_dict``) under a key that is a SHA-256 over everything the training depends on:
the pool's bytes, shape and dtype, the kind, output dimension, seed, epochs, the training
recipe (e.g. :class:`fedvote.models.contrastive.ContrastiveConfig`) and
:data:`FORMAT_VERSION`. A hit loads the weights instead of training.

The key leaves out the torch version and the thread count: training is deterministic on
one machine and thread count, but another may give weights that differ in the last bits.
A hit returns the encoder the first run stored, so runs sharing a cache directory share
exactly one encoder per key; delete the directory to retrain.

The cache holds only functions of *public* data (the server's public pool); nothing in it
derives from an agent's records, so it releases nothing and needs no privacy accounting.

Files are written atomically (a temporary file in the same directory, then ``os.replace``):
a reader sees a whole file or none. A file that cannot be read or does not fit the
architecture is ignored with a :class:`ExtractorCacheWarning` and the extractor is trained
again (and the file rewritten); a cache directory that cannot be written only warns.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

# Bump when a stored file's layout or an extractor's architecture changes meaning.
FORMAT_VERSION = 1
CACHE_ENV = "FEDVOTE_CACHE"


class ExtractorCacheWarning(UserWarning):
    """A cache file was unreadable (the extractor is retrained) or could not be written."""


def default_cache_dir() -> Path:
    """``$FEDVOTE_CACHE`` if set (and not empty), else ``~/.cache/fedvote/extractors``."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "fedvote" / "extractors"


def extractor_key(
    public_features: np.ndarray, *, kind: str, dim: int, seed: int, epochs: int, recipe: str = ""
) -> str:
    """The SHA-256 (hex) naming the extractor of ``kind`` trained on ``public_features``.

    Covers the pool's dtype, shape and bytes (C order), ``kind``, ``dim``, ``seed``,
    ``epochs``, ``recipe`` (the training settings beyond those, as text) and
    :data:`FORMAT_VERSION`; any change to one of them gives another key.
    """
    pool = np.ascontiguousarray(public_features)
    settings = {
        "format": FORMAT_VERSION,
        "kind": kind,
        "dim": int(dim),
        "seed": int(seed),
        "epochs": int(epochs),
        "recipe": recipe,
        "dtype": pool.dtype.str,
        "shape": [int(s) for s in pool.shape],
    }
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    digest.update(pool.reshape(-1).view(np.uint8).data)  # the C-order bytes, without a copy
    return digest.hexdigest()


def cache_path(directory: Path, key: str) -> Path:
    """Where the extractor of ``key`` is stored in ``directory``."""
    return Path(directory) / f"{key}.pt"


def load_or_train(
    key: str, directory: Path, *, build: Callable[[], nn.Module], train: Callable[[], nn.Module]
) -> nn.Module:
    """The module stored under ``key`` in ``directory``, else ``train()``'s, stored there.

    ``build`` makes an untrained module of the architecture ``train`` returns; a hit
    loads the stored ``state_dict`` into it (strictly) and returns it in eval mode without
    gradients, as ``train`` returns its own. An unreadable or mismatching file warns and
    falls through to training.
    """
    path = cache_path(directory, key)
    if path.exists():
        try:
            stored = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(stored, dict) or stored.get("key") != key:
                raise ValueError("the file does not hold this key's extractor")
            module = build()
            module.load_state_dict(stored["state_dict"], strict=True)
            return module.eval().requires_grad_(False)
        except Exception as error:  # torch raises many types for a damaged file
            warnings.warn(
                f"ignoring the unreadable extractor cache file {path} ({error}); training again",
                ExtractorCacheWarning,
                stacklevel=2,
            )
    module = train()
    _store(path, key, module)
    return module


def _store(path: Path, key: str, module: nn.Module) -> None:
    """Write ``module``'s state_dict to ``path`` atomically; warn (never raise) if it cannot."""
    temporary: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
        with os.fdopen(handle, "wb") as file:
            torch.save({"key": key, "format": FORMAT_VERSION, "state_dict": module.state_dict()}, file)
        os.replace(temporary, path)
        temporary = None
    except OSError as error:
        warnings.warn(
            f"could not write the extractor cache file {path} ({error})", ExtractorCacheWarning, stacklevel=3
        )
    finally:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
