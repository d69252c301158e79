"""Secure privacy noise: exact discrete Gaussians from a CSPRNG, CSPRNG-seeded generators.

``--secure-noise`` (``docs/privacy.md``, "Secure noise") replaces the floating-point
Gaussians that a simulation draws from PCG64 with noise a deployment can trust:

* **Integer votes** get **exact discrete Gaussian** noise N_Z(0, σ²), the distribution
  P[X = x] ∝ exp(−x²/(2σ²)) on the integers (Canonne, Kamath & Steinke 2020, "The
  Discrete Gaussian for Differential Privacy", NeurIPS; arXiv:2004.00010). The sampler is
  OpenDP's (``opendp.measurements.make_gaussian`` on an integer vector domain), which
  implements CKS20's Algorithm 3 — a discrete Laplace proposal accepted by
  Bernoulli(exp(−γ)) coins (their Algorithm 1), all in exact rational arithmetic — with
  its random bits from a cryptographically secure generator seeded by the operating
  system (OpenSSL's ``RAND_bytes`` in the published wheels). Nothing in it is a float,
  so none of the floating-point attacks on Gaussian samplers (Mironov 2012; Jin et al.
  2022) applies. OpenDP is the optional extra ``fedvote[secure]`` (installed by
  ``make install-dev`` and with ``fedvote[deploy]``); a secure run without it is refused.
* **Real-valued releases** (DP-FedAvg's updates, DP-SGD's gradients) keep the continuous
  Gaussian, drawn from a generator seeded with 256 bits of ``os.urandom``
  (:func:`csprng_seeded_generator`, :func:`csprng_seeded_torch_generator`), as Opacus's
  ``secure_mode`` does with a CSPRNG-seeded torch generator, and each value is the sum
  of four Gaussians over 2 (Opacus ``_generate_noise``, after Holohan & Braghin 2021,
  Sec. 5.1), which hides the low-order bits a single float sample leaks.

Why OpenDP and not our own sampler: measured on the 2-core machine (load ~2), OpenDP
draws 200,000 values (100 agents × 200 queries × 10 classes) in about 2 s (σ = 3.5;
~9 µs a value, 3.6 s at σ = 0.3 where the rejection loop runs longer); a pure-Python
port of CKS20's reference code with ``fractions.Fraction`` costs tens of µs a value and
its exactness would rest on our review alone. OpenDP's wheel is large (~265 MB
installed, 2 s to import), so it is an optional extra imported only when secure noise
is drawn, not a core dependency.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from fedvote.errors import ConfigError

# How to install the sampler, for the refusal when OpenDP is missing.
INSTALL_HINT = "pip install 'fedvote[secure]' (OpenDP's exact sampler)"

# The largest σ accepted: OpenDP converts σ to a rational and samples in exact
# arithmetic; the sums of integer votes must stay exact in float64 (below 2^53).
MAX_DISCRETE_SIGMA = 2.0**40


def _opendp() -> Any:
    """The ``opendp.prelude`` module with its contrib features enabled, or a ConfigError."""
    try:
        import opendp.prelude as dp
    except ImportError as error:  # pragma: no cover - exercised where OpenDP is absent
        raise ConfigError("secure_noise", f"needs OpenDP's exact sampler: {INSTALL_HINT}") from error
    dp.enable_features("contrib")
    return dp


@functools.lru_cache(maxsize=64)
def _sampler(sigma: float) -> Callable[[list[int]], list[int]]:
    """OpenDP's discrete Gaussian measurement of scale ``sigma`` on integer vectors (cached by σ)."""
    dp = _opendp()
    space = dp.vector_domain(dp.atom_domain(T="i64")), dp.l2_distance(T="i64")
    return dp.m.make_gaussian(*space, scale=float(sigma))  # type: ignore[no-any-return]


def discrete_gaussian(sigma: float, shape: tuple[int, ...]) -> np.ndarray:
    """Independent draws of N_Z(0, ``sigma``²), int64 of ``shape``, exact, from a CSPRNG.

    ``sigma`` is the discrete Gaussian's scale parameter (CKS20, Definition 1): the pmf is
    ∝ exp(−x²/(2σ²)); its variance is slightly below σ² (CKS20, Corollary 9), and every
    privacy bound of ``docs/privacy.md`` is stated in σ. ``sigma`` 0 draws nothing (zeros).
    """
    if not (math.isfinite(sigma) and 0.0 <= sigma <= MAX_DISCRETE_SIGMA):
        raise ValueError(f"sigma must be a finite number in [0, {MAX_DISCRETE_SIGMA:g}], got {sigma}")
    count = math.prod(shape)
    if sigma == 0.0 or count == 0:
        return np.zeros(shape, dtype=np.int64)
    draws = _sampler(float(sigma))([0] * count)  # noise added to zeros: the noise itself
    return np.asarray(draws, dtype=np.int64).reshape(shape)


def discrete_gaussian_pmf(sigma: float, values: np.ndarray) -> np.ndarray:
    """The exact pmf of N_Z(0, σ²) at the integers ``values``: e^(−x²/(2σ²)) / Σ_y e^(−y²/(2σ²)).

    The normaliser is summed (``math.fsum``) over |y| ≤ ⌈40σ⌉ + 1, beyond which the
    terms are below e^(−800) relative to the largest: exact to double precision.
    """
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be a finite number > 0, got {sigma}")
    reach = math.ceil(40.0 * sigma) + 1
    normaliser = math.fsum(math.exp(-(y * y) / (2.0 * sigma * sigma)) for y in range(-reach, reach + 1))
    x = np.asarray(values, dtype=np.float64)
    return np.exp(-(x * x) / (2.0 * sigma * sigma)) / normaliser


def csprng_seed(bits: int = 256) -> int:
    """A seed of ``bits`` bits read from the OS CSPRNG (``os.urandom``)."""
    return int.from_bytes(os.urandom((bits + 7) // 8), "little") >> ((8 - bits % 8) % 8)


def csprng_seeded_generator() -> np.random.Generator:
    """A NumPy generator (PCG64) seeded with 256 bits from ``os.urandom``, for real-valued noise."""
    return np.random.default_rng(np.random.SeedSequence(csprng_seed(256)))


def csprng_seeded_torch_generator() -> Any:
    """A torch CPU generator seeded from ``os.urandom`` (63 bits: ``manual_seed`` takes one int64).

    What Opacus's ``secure_mode`` would take from ``torchcsprng``, which has no wheel for
    the torch this project pins; the stream itself is torch's Mersenne Twister.
    """
    import torch

    return torch.Generator().manual_seed(csprng_seed(63))


def secure_gaussian(rng: np.random.Generator, std: float, shape: tuple[int, ...]) -> np.ndarray:
    """N(0, ``std``²) of ``shape`` as (z₁ + z₂ + z₃ + z₄)/2, z_j ~ N(0, std²) from ``rng``.

    The same distribution as one draw; the sum hides the float representation of any one
    sample (Holohan & Braghin 2021, Sec. 5.1; Opacus ``_generate_noise`` with
    ``secure_mode``). ``rng`` should be :func:`csprng_seeded_generator`'s.
    """
    total = np.zeros(shape, dtype=np.float64)
    for _ in range(4):
        total += rng.normal(0.0, std, size=shape)
    return total / 2.0
