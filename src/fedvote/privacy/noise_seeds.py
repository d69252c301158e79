"""One privacy-noise stream per run: the seed of a run inside a comparison or a sweep.

``--noise-seed S`` makes a simulation reproducible. A single ``fedvote run`` uses S as
it is. A command that runs several methods or grid points under one S (``fedvote
compare``, ``fedvote sweep``) must not hand every run the same streams: two rows drawn
from identical noise differ by a noise-free amount, which hides the variance a reader
compares them against (issue 15, defect 9). Each of those runs therefore gets its own
seed, derived here and nowhere else:

    run_noise_seed(S, method, point) = SeedSequence([S, tag(method), point]) → 63 bits,

with tag(method) the first 8 bytes of SHA-256 of the method's name (stable across
processes and Python versions; Python's ``hash()`` of a string is salted per process).
The derived seed is written into that run's config (``privacy.noise_seed``), so every
generator of the run (agents' noise shares, agent sampling, DP-SGD batches, PriFedSync's
clients) draws from it, and ``fedvote run --config`` on the run's recorded config
reproduces the run exactly.
"""

from __future__ import annotations

import hashlib

import numpy as np

from fedvote.errors import ConfigError

# The derived seed keeps 63 bits: a non-negative int64, safe in JSON, CSV and torch seeds.
_SEED_BITS = 63


def method_tag(method: str) -> int:
    """A stable 64-bit tag of ``method``'s name: the first 8 bytes of SHA-256, little-endian."""
    return int.from_bytes(hashlib.sha256(method.encode("utf-8")).digest()[:8], "little")


def run_noise_seed(noise_seed: int, method: str, point: int = 0) -> int:
    """The noise seed of ``method``'s run at grid point ``point`` under the user's ``noise_seed``.

    Different (method, point) pairs get independent streams (distinct SeedSequence
    entropy); the same triple always gives the same seed, in any process.
    """
    if isinstance(noise_seed, bool) or not isinstance(noise_seed, int) or noise_seed < 0:
        raise ConfigError("noise_seed", f"must be an integer >= 0, got {noise_seed!r}")
    if isinstance(point, bool) or not isinstance(point, int) or point < 0:
        raise ConfigError("point", f"must be an integer >= 0, got {point!r}")
    words = np.random.SeedSequence([noise_seed, method_tag(method), point]).generate_state(1, np.uint64)
    return int(words[0]) >> (64 - _SEED_BITS)
