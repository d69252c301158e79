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
import secrets
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


# --- An exact discrete Gaussian sampler over whole arrays (issue 46) ---------------------------
#
# OpenDP draws one value at a time through exact rationals: ~10 µs a value at σ = 3.5, ~50 µs at
# σ ≈ 10⁴ (measured under load), so the N·d shares of a distributed-noise gradient round (digits:
# 50 × 9,610 a round) take ~25 s a round. The sampler below runs the same algorithms of Canonne,
# Kamath & Steinke 2020 (Algorithm 1: Bernoulli(exp(−γ)); Algorithm 2: discrete Laplace;
# Algorithm 3: discrete Gaussian) on whole arrays at once, every step an exact integer operation
# (uniform integers by rejection from os.urandom words; comparisons of integers): no float touches
# a sample. σ² must be an integer (a caller rounds σ² up: more noise, never less).

# The largest σ² accepted: 2 σ² t² (t = ⌊σ⌋ + 1), times the Bernoulli loop's counter, stays far
# below 2^62, and (|Y|·t − σ²)² below 2^62 for every |Y| short of ~128σ (beyond, exact Python ints).
MAX_EXACT_SIGMA_SQUARED = 2**24
_WORD_BITS = 62
_WORD = 1 << _WORD_BITS


def _uniform_below(bound: np.ndarray, random_bytes: Callable[[int], bytes]) -> np.ndarray:
    """Independent uniform integers in [0, bound) for each entry of ``bound`` (int64, 1 ≤ bound < 2^62).

    62-bit words from ``random_bytes``, each kept when below the largest multiple of its bound
    (then reduced modulo it): exactly uniform, at least half the words kept.
    """
    bound = np.asarray(bound, dtype=np.int64).reshape(-1)
    out = np.empty(bound.shape, dtype=np.int64)
    pending = np.arange(bound.size)
    while pending.size:
        raw = np.frombuffer(random_bytes(8 * pending.size), dtype=np.uint64)
        words = (raw >> np.uint64(64 - _WORD_BITS)).astype(np.int64)  # (m,) uniform in [0, 2^62)
        b = bound[pending]
        limit = (_WORD // b) * b  # (m,): the largest multiple of b at most 2^62
        kept = words < limit
        out[pending[kept]] = words[kept] % b[kept]
        pending = pending[~kept]
    return out


def _bernoulli(
    numerator: np.ndarray, denominator: np.ndarray, random_bytes: Callable[[int], bytes]
) -> np.ndarray:
    """Bernoulli(numerator/denominator) per entry, exactly (0 ≤ numerator ≤ denominator < 2^62)."""
    return _uniform_below(denominator, random_bytes) < numerator


def _bernoulli_exp_neg_scalar(numerator: int, denominator: int) -> bool:
    """Bernoulli(exp(−numerator/denominator)) for one γ ≥ 0 in Python integers (CKS20 Algorithm 1)."""

    def fraction(num: int, den: int) -> bool:  # γ = num/den ∈ [0, 1]
        k = 1
        while secrets.randbelow(den * k) < num:
            k += 1
        return k % 2 == 1

    whole, rest = divmod(numerator, denominator)
    return all(fraction(1, 1) for _ in range(whole)) and fraction(rest, denominator)


def bernoulli_exp_neg(
    numerator: np.ndarray, denominator: np.ndarray, random_bytes: Callable[[int], bytes] = os.urandom
) -> np.ndarray:
    """Bernoulli(exp(−γ)) per entry, γ = numerator/denominator ≥ 0, exactly (CKS20 Algorithm 1).

    γ ∈ [0, 1]: K = 1; while Bernoulli(γ/K): K += 1; the outcome is whether K is odd
    (P = Σ_j (−γ)^j/j! = e^(−γ)). γ > 1: ⌊γ⌋ draws of Bernoulli(e^(−1)) must all succeed, then
    one of Bernoulli(e^(−(γ − ⌊γ⌋))). int64 arrays of one shape; ``denominator`` ≥ 1.
    """
    num = np.asarray(numerator, dtype=np.int64).reshape(-1)
    den = np.asarray(denominator, dtype=np.int64).reshape(-1)
    if np.any(num < 0) or np.any(den < 1):
        raise ValueError("bernoulli_exp_neg needs numerator >= 0 and denominator >= 1")
    whole, rest = np.divmod(num, den)
    alive = np.ones(num.shape, dtype=bool)
    step = 0
    while True:  # the ⌊γ⌋ draws of Bernoulli(e^(−1))
        sel = np.flatnonzero(alive & (whole > step))
        if sel.size == 0:
            break
        ones = np.ones(sel.size, dtype=np.int64)
        alive[sel] = _bernoulli_exp_neg_fraction(ones, ones, random_bytes)
        step += 1
    sel = np.flatnonzero(alive)
    alive[sel] = _bernoulli_exp_neg_fraction(rest[sel], den[sel], random_bytes)
    return alive.reshape(np.shape(numerator))


def _bernoulli_exp_neg_fraction(
    num: np.ndarray, den: np.ndarray, random_bytes: Callable[[int], bytes]
) -> np.ndarray:
    """Bernoulli(exp(−num/den)) for num ≤ den: CKS20 Algorithm 1's loop on whole arrays."""
    k = np.ones(num.shape, dtype=np.int64)
    going = np.arange(num.size)
    while going.size:
        safe = den[going] <= (_WORD - 1) // (k[going] + 1)  # den·K below 2^62 (K ≥ 2^13 never seen)
        for index in going[~safe]:  # exact in Python integers, should it ever happen
            kk = int(k[index])
            while secrets.randbelow(int(den[index]) * kk) < int(num[index]):
                kk += 1
            k[index] = kk
        going = going[safe]
        success = _bernoulli(num[going], den[going] * k[going], random_bytes)
        k[going[success]] += 1
        going = going[success]
    return k % 2 == 1


def discrete_laplace(
    scale: int, size: int, random_bytes: Callable[[int], bytes] = os.urandom
) -> np.ndarray:
    """``size`` exact draws of the discrete Laplace P[x] ∝ exp(−|x|/scale), int64 (CKS20 Alg. 2, s = 1)."""
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise ValueError(f"scale must be an integer >= 1, got {scale!r}")
    out = np.empty(size, dtype=np.int64)
    pending = np.arange(size)
    while pending.size:
        m = pending.size
        u = _uniform_below(np.full(m, scale, dtype=np.int64), random_bytes)
        d = bernoulli_exp_neg(u, np.full(m, scale, dtype=np.int64), random_bytes)
        v = np.zeros(m, dtype=np.int64)
        going = np.arange(m)
        while going.size:  # V: the number of successes of Bernoulli(e^(−1)) before the first failure
            ones = np.ones(going.size, dtype=np.int64)
            more = bernoulli_exp_neg(ones, ones, random_bytes)
            v[going[more]] += 1
            going = going[more]
        x = u + scale * v
        sign = _uniform_below(np.full(m, 2, dtype=np.int64), random_bytes)
        accepted = d & ~((sign == 1) & (x == 0))
        out[pending[accepted]] = ((1 - 2 * sign) * x)[accepted]
        pending = pending[~accepted]
    return out


def exact_discrete_gaussian(
    sigma_squared: int, shape: tuple[int, ...], random_bytes: Callable[[int], bytes] = os.urandom
) -> np.ndarray:
    """Independent draws of N_Z(0, σ²), σ² = ``sigma_squared`` an integer, int64 of ``shape`` (CKS20 Alg. 3).

    t = ⌊σ⌋ + 1; Y ~ discrete Laplace(t), kept with probability exp(−(|Y| − σ²/t)²/(2σ²)) =
    exp(−(|Y|·t − σ²)²/(2σ²t²)), an integer ratio. Every step exact; the randomness is
    ``random_bytes`` (default ``os.urandom``: the operating system's CSPRNG).
    """
    if isinstance(sigma_squared, bool) or not isinstance(sigma_squared, int | np.integer):
        raise ValueError(f"sigma_squared must be an integer, got {sigma_squared!r}")
    s = int(sigma_squared)
    if not 1 <= s <= MAX_EXACT_SIGMA_SQUARED:
        raise ValueError(f"sigma_squared must lie in [1, {MAX_EXACT_SIGMA_SQUARED}], got {s}")
    size = math.prod(shape)
    t = math.isqrt(s) + 1
    out = np.empty(size, dtype=np.int64)
    pending = np.arange(size)
    den = 2 * s * t * t
    while pending.size:
        y = discrete_laplace(t, pending.size, random_bytes)
        diff = np.abs(y) * t - s
        small = np.abs(diff) < (1 << 31)
        keep = np.zeros(y.shape, dtype=bool)
        keep[small] = bernoulli_exp_neg(diff[small] ** 2, np.full(int(small.sum()), den, dtype=np.int64),
                                        random_bytes)
        for index in np.flatnonzero(~small):  # |Y| beyond ~2^31/t: exact in Python integers
            keep[index] = _bernoulli_exp_neg_scalar(int(diff[index]) ** 2, den)
        out[pending[keep]] = y[keep]
        pending = pending[~keep]
    return out.reshape(shape)
