"""A labelled *public* validation set for reputation-weighted voting.

The reputation paper (reputation-weighted-pate.txt, Sec. 3.1) scores each teacher on a
validation set after training. fedvote only ever scores on public data:

* a slice of the server's public pool that the server had labelled for this purpose
  (in simulation the pool's true labels stand in for that labelling); the slice leaves
  the query pool, so no point is both a validation point and a query; or
* a labelled public file the user supplies (npz with arrays ``x`` and ``y``).

Weights computed on anything private would have to be accounted; fedvote refuses that by
construction: there is no way to score on agents' data.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedvote.data.federation import Federation, LabeledData
from fedvote.data.public_pool_check import refuse_agents_records_in_public
from fedvote.errors import ConfigError


@dataclass(frozen=True)
class ValidationNeed:
    """A labelled public validation set a method asks the runner for (it never sees the federation).

    ``file``: a labelled public npz file; else ``size`` random points of the public pool
    (they leave the query pool); else, with ``share``, that share of the pool (at least 1,
    at most ``most`` points) — a default chosen from the pool's size, a public quantity;
    with none of them: the whole pool, read but never queried (PriFedSync's stop rule).
    """

    file: str | None = None
    size: int | None = None
    share: float | None = None
    most: int | None = None


def provide_validation(federation: Federation, need: ValidationNeed | None, seed: int) -> Federation:
    """``federation`` with the validation set ``need`` asks for; unchanged when none is asked or one is set.

    Idempotent: a federation that already has a validation set comes back as is.
    """
    if need is None or federation.validation is not None:
        return federation
    if need.file is not None:
        validation = load_validation_file(need.file, federation.example_shape, federation.num_classes)
        refuse_agents_records_in_public(  # a file the user names may be a copy of the agents' records
            [agent.features for agent in federation.agents],
            {"validation set": validation.features},
            argument="validation_file",
        )
        return dataclasses.replace(federation, validation=validation)
    if need.size is not None:
        return with_validation(federation, need.size, seed)
    if need.share is not None:
        size = max(1, int(need.share * len(federation.public)))
        return with_validation(federation, size if need.most is None else min(size, need.most), seed)
    return dataclasses.replace(federation, validation=federation.public)


def with_validation(federation: Federation, size: int, seed: int) -> Federation:
    """``federation`` with ``size`` random public-pool points moved to a labelled validation set.

    The pool shrinks by ``size``; the chosen points keep their (simulated) labels as
    ``federation.validation``. Deterministic under ``seed``.
    """
    pool = len(federation.public)
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
        raise ConfigError("validation_size", f"must be an integer >= 1, got {size!r}")
    if size >= pool:
        raise ConfigError(
            "validation_size", f"{size} validation points leave nothing of the {pool}-point public pool"
        )
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x7A11]))
    order = rng.permutation(pool)
    chosen, rest = np.sort(order[:size]), np.sort(order[size:])
    public = federation.public
    return dataclasses.replace(
        federation,
        public=LabeledData(public.features[rest], public.labels[rest]),
        validation=LabeledData(public.features[chosen], public.labels[chosen]),
    )


def load_validation_file(path: str | Path, example_shape: tuple[int, ...], num_classes: int) -> LabeledData:
    """A labelled public validation set from an npz file with ``x`` (V, *shape) and ``y`` (V,).

    ``x`` must have the federation's example shape (or its flat size, reshaped) and ``y``
    integer labels in 0..C−1 with the federation's class ids.
    """
    file = Path(path)
    try:
        with np.load(file, allow_pickle=False) as archive:
            if "x" not in archive.files or "y" not in archive.files:
                held = ", ".join(archive.files)
                raise ConfigError("validation_file", f"{file} needs arrays x and y (it holds {held})")
            x = np.asarray(archive["x"], dtype=np.float32)
            y = np.asarray(archive["y"]).reshape(-1)
    except ConfigError:
        raise
    except Exception as error:  # noqa: BLE001 - missing file, zip and format errors alike
        problem = f"cannot read {file}: {type(error).__name__}: {error}"
        raise ConfigError("validation_file", problem) from error
    if x.shape[0] != y.shape[0] or x.shape[0] < 1:
        raise ConfigError("validation_file", f"{file}: x has {x.shape[0]} examples and y {y.shape[0]} labels")
    if tuple(x.shape[1:]) != tuple(example_shape):
        if int(np.prod(x.shape[1:])) != int(np.prod(example_shape)):
            raise ConfigError(
                "validation_file",
                f"{file}: examples of shape {x.shape[1:]}, the federation's are {example_shape}",
            )
        x = x.reshape((x.shape[0], *example_shape))
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= num_classes:
        raise ConfigError("validation_file", f"{file}: labels must be integers in 0..{num_classes - 1}")
    return LabeledData(x, y.astype(np.int64))
