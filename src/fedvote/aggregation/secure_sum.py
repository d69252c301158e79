"""Secure summation by pairwise masks, tolerant to dropouts (Bonawitz et al. 2017).

The reputation-weighted PATE paper (appendix A.2) sketches mask-based secure
aggregation: each contributor adds a random mask to its data and only the masks'
total is ever removed. This module is the standard, dropout-tolerant form of that idea
(Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving Machine
Learning", CCS 2017), for an *honest-but-curious* server, run in-process by
:class:`fedvote.transport.LocalTransport`:

1. **Setup.** Every pair of agents i < j shares a seed s_ij (simulated key agreement:
   drawn by the simulator; a deployment derives it by Diffie-Hellman, as Flower's SecAgg+
   does), and every agent draws a self-mask seed b_i. Each seed is Shamir-shared t-of-N
   among the agents (s_ij dealt by i, b_i by i), so any t agents can rebuild it and
   t − 1 learn nothing about it.
2. **Masking** (:meth:`SecureSumRound.mask`). Agent i sends, in Z_{2^k},
   y_i = enc(x_i) + PRG(b_i) + Σ_{j>i} PRG(s_ij) − Σ_{j<i} PRG(s_ij).
3. **Unmasking** (:meth:`SecureSumRound.unmask`). The server received y_u from a set U.
   At least t responders hand over shares of b_u for every u ∈ U and of s_du for every
   dropped d ∉ U and u ∈ U, never both kinds for one agent. The server rebuilds those
   seeds, subtracts every PRG(b_u) and the dropped agents' unmatched pair masks:
   Σ_{u∈U} y_u − Σ_u PRG(b_u) ± Σ_{d,u} PRG(s_du) = Σ_{u∈U} enc(x_u) (mod 2^k).
   Pair masks between two members of U cancel. With fewer than t inputs or responders
   it raises :class:`SecureSumAborted`: nothing is released.

The server sees each y_u (uniform on Z_{2^k}, whatever x_u is, as long as one mask seed
of u stays secret) and the total. A "dropped" agent's vector arriving late stays hidden
behind PRG(b_d): the server only ever learns b of agents *in* U.

Fixed point (:class:`FixedPoint`): a float x with |x| ≤ bound becomes round(x·2^s) in
two's complement modulo 2^k; ``check_capacity(N)`` refuses an N for which a sum of N
such values could wrap (N·round(bound·2^s) ≥ 2^(k−1)). Each agent rounds its *noisy*
value, so the decoded sum is not a function of the noisy sum alone; given that sum, the
agents' positions between grid points are within a factor 1 ± η of uniform
(:meth:`FixedPoint.rounding_eta`, the lattice-smoothing bound of ``docs/privacy.md``,
"Quantisation"), and ``check_smoothing`` refuses a noise share for which η is not 0 in
double precision, so rounding adds nothing to ε.

Mask generator: SHAKE-256 (FIPS 202, ``hashlib``) of a domain label and the seed, an
extendable-output function that is a cryptographic PRG: its output is computationally
indistinguishable from uniform without the seed, which is what hiding x_i needs.
numpy's PCG64 and Philox are statistical generators without that guarantee (PCG64's
state can be recovered from its outputs), so they are not used here.

Shamir shares live in GF(p), p = 2^127 − 1 (a Mersenne prime); seeds are field
elements (≈127 bits).
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from fedvote.errors import ConfigError

MERSENNE_127 = 2**127 - 1

# A source of random bytes: ``os.urandom`` in deployment, ``np.random.default_rng(s).bytes``
# in tests that need to be reproducible.
RandomBytes = Callable[[int], bytes]

# Bytes drawn per field element: 256 bits reduced modulo p < 2^128 are uniform up to a
# statistical distance below p / 2^256 < 2^-128.
_ELEMENT_BYTES = 32


class SecureSumAborted(RuntimeError):
    """Too few agents took part to unmask the sum (fewer than the threshold t); nothing released."""


class ProtocolViolation(RuntimeError):
    """A request an honest agent refuses (it would reveal an agent's input to the server)."""


# --- Shamir secret sharing over GF(p) -------------------------------------------------------


def random_field_elements(count: int, random_bytes: RandomBytes, prime: int = MERSENNE_127) -> list[int]:
    """``count`` uniform elements of GF(``prime``) from ``random_bytes``."""
    raw = random_bytes(_ELEMENT_BYTES * count)
    return [
        int.from_bytes(raw[i * _ELEMENT_BYTES : (i + 1) * _ELEMENT_BYTES], "little") % prime
        for i in range(count)
    ]


@dataclass(frozen=True)
class Polynomial:
    """f(x) = c_0 + c_1·x + … + c_{t−1}·x^{t−1} over GF(prime); f(0) = c_0 is the secret."""

    coefficients: tuple[int, ...]
    prime: int = MERSENNE_127

    def __call__(self, x: int) -> int:
        """f(x) mod prime, by Horner's rule."""
        value = 0
        for coefficient in reversed(self.coefficients):
            value = (value * x + coefficient) % self.prime
        return value


def deal(secret: int, threshold: int, random_bytes: RandomBytes, prime: int = MERSENNE_127) -> Polynomial:
    """A random polynomial of degree ``threshold`` − 1 with f(0) = ``secret`` (Shamir 1979).

    Any ``threshold`` of its values f(x), x ≠ 0, determine f (and so the secret); any
    ``threshold`` − 1 of them are uniform and independent of the secret.
    """
    if threshold < 1:
        raise ValueError(f"threshold must be at least 1, got {threshold}")
    if not 0 <= secret < prime:
        raise ValueError(f"secret must lie in [0, {prime}), got {secret}")
    return Polynomial((secret, *random_field_elements(threshold - 1, random_bytes, prime)), prime)


def share(
    secret: int,
    *,
    threshold: int,
    holders: Sequence[int],
    random_bytes: RandomBytes,
    prime: int = MERSENNE_127,
) -> dict[int, int]:
    """Shamir shares {x: f(x)} of ``secret`` for the evaluation points ``holders`` (distinct, ≠ 0)."""
    points = list(holders)
    if len(set(points)) != len(points) or any(not 0 < x < prime for x in points):
        raise ValueError(f"holders must be distinct points in [1, {prime}), got {points}")
    if len(points) < threshold:
        raise ValueError(f"{len(points)} holders cannot meet the threshold {threshold}")
    polynomial = deal(secret, threshold, random_bytes, prime)
    return {x: polynomial(x) for x in points}


def reconstruct(shares: Mapping[int, int], *, threshold: int, prime: int = MERSENNE_127) -> int:
    """The secret f(0) from at least ``threshold`` shares {x: f(x)}, by Lagrange interpolation.

    f(0) = Σ_j y_j · Π_{m≠j} x_m / (x_m − x_j), over the first ``threshold`` shares.
    """
    if len(shares) < threshold:
        raise SecureSumAborted(f"{len(shares)} shares cannot reconstruct a {threshold}-of-n secret")
    points = list(shares.items())[:threshold]
    secret = 0
    for j, (x_j, y_j) in enumerate(points):
        numerator, denominator = 1, 1
        for m, (x_m, _) in enumerate(points):
            if m != j:
                numerator = numerator * x_m % prime
                denominator = denominator * (x_m - x_j) % prime
        secret = (secret + y_j * numerator * pow(denominator, -1, prime)) % prime
    return secret


# --- fixed-point encoding in Z_{2^k} ----------------------------------------------------------


@dataclass(frozen=True)
class FixedPoint:
    """Floats with |x| ≤ ``bound`` as round(x·2^scale_bits) in two's complement mod 2^bits.

    Parameters
    ----------
    bits : int
        k, the ring Z_{2^k} (2 ≤ k ≤ 64; default 64).
    scale_bits : int
        s, the resolution 2^-s of the encoding (default 24: 6e-8).
    bound : float
        Largest magnitude one agent may encode (default 2^20). A sum of N encodings
        stays unambiguous while N·round(bound·2^s) < 2^(k−1): :meth:`max_agents`.

    """

    bits: int = 64
    scale_bits: int = 24
    bound: float = 2.0**20

    def __post_init__(self) -> None:
        if not 2 <= self.bits <= 64:
            raise ConfigError("bits", f"must lie in [2, 64], got {self.bits}")
        if self.scale_bits < 0:
            raise ConfigError("scale_bits", f"must be >= 0, got {self.scale_bits}")
        if not (np.isfinite(self.bound) and self.bound > 0):
            raise ConfigError("bound", f"must be a positive number, got {self.bound}")
        if self.max_agents() < 1:
            raise ConfigError(
                "bound", f"bound·2^scale_bits = {self.bound * 2.0**self.scale_bits:g} does not fit in "
                f"{self.bits} signed bits"
            )

    @property
    def ring_mask(self) -> np.uint64:
        """2^k − 1: reduces a uint64 modulo 2^k."""
        return np.uint64(2**self.bits - 1)

    @property
    def resolution(self) -> float:
        """2^-s, the step of the encoding (each value is off by at most half of it)."""
        return 2.0**-self.scale_bits

    def max_agents(self) -> int:
        """The largest N whose sum of encodings cannot wrap: N·round(bound·2^s) ≤ 2^(k−1) − 1."""
        largest = int(np.floor(self.bound * 2.0**self.scale_bits + 0.5))  # max |round(x·2^s)|
        return (2 ** (self.bits - 1) - 1) // max(largest, 1)

    def check_capacity(self, num_agents: int) -> None:
        """Refuse a federation whose sum could wrap around 2^k (it would decode wrongly)."""
        if num_agents > self.max_agents():
            raise ConfigError(
                "secure_sum",
                f"{num_agents} agents encoding up to ±{self.bound:g} at 2^-{self.scale_bits} could wrap "
                f"the {self.bits}-bit ring (at most {self.max_agents()} agents); lower the bound or scale",
            )

    def rounding_eta(self, noise_std: float, contributors: int) -> float:
        """η: how far from uniform the contributors' positions modulo 2^-s can be, given their sum.

        Each of ``contributors`` (n) agents rounds a value carrying its own Gaussian share
        of std ``noise_std`` (s). Given the sum, the shares have covariance s²(I − 11ᵀ/n)
        (smallest non-zero eigenvalue s²/n), and by Poisson summation the density of the
        positions on the torus is within 1 ± η of uniform, η ≤ (1 + 2e^(−a)/(1 − e^(−a)))ⁿ⁻¹ − 1
        with a = 2π²s²/(nΔ²), Δ = 2^-s the resolution (``docs/privacy.md``, "Quantisation").
        Infinite without noise.
        """
        if not noise_std > 0:
            return math.inf
        n = max(contributors, 2)
        a = 2.0 * math.pi**2 * noise_std**2 / (n * self.resolution**2)
        per_axis = 2.0 * math.exp(-a) / -math.expm1(-a) if a < 745.0 else 0.0
        return math.expm1((n - 1) * math.log1p(per_axis))

    def check_smoothing(self, noise_std: float, contributors: int) -> None:
        """Refuse a noise share too small for rounding after the noise to be free (η > 0).

        A share of 0 (no noise: nothing is claimed about the rounded values) passes.
        """
        if noise_std > 0 and self.rounding_eta(noise_std, contributors) > 0.0:
            raise ConfigError(
                "sigma",
                f"a noise share of std {noise_std:g} is too small for the fixed-point resolution "
                f"2^-{self.scale_bits} with {contributors} agents: rounding after the noise would "
                "leak (raise sigma)",
            )

    def encode(self, values: np.ndarray) -> np.ndarray:
        """round(values·2^s) mod 2^k, same shape, uint64; refuses non-finite or out-of-range values."""
        array = np.asarray(values, dtype=np.float64)
        if not np.all(np.isfinite(array)):
            raise ConfigError("secure_sum", "cannot encode a non-finite value")
        largest = float(np.max(np.abs(array))) if array.size else 0.0
        if largest > self.bound:
            raise ConfigError(
                "secure_sum", f"value {largest:g} outside the fixed-point range ±{self.bound:g}"
            )
        scaled = np.rint(array * 2.0**self.scale_bits).astype(np.int64)  # exact: |·| < 2^63
        return scaled.view(np.uint64) & self.ring_mask

    def to_signed(self, encoded: np.ndarray) -> np.ndarray:
        """Elements of Z_{2^k} read in two's complement, int64: [2^(k−1), 2^k) ↦ negative."""
        words = np.asarray(encoded, dtype=np.uint64) & self.ring_mask
        if self.bits == 64:
            return words.view(np.int64)
        signed = words.astype(np.int64)
        return np.where(signed >= 2 ** (self.bits - 1), signed - 2**self.bits, signed)

    def decode(self, encoded: np.ndarray) -> np.ndarray:
        """The float64 value of (a sum of) encodings: to_signed(encoded)·2^-s."""
        return self.to_signed(encoded).astype(np.float64) * self.resolution


# --- the mask generator -----------------------------------------------------------------------


def expand_mask(seed: int, size: int, *, label: bytes, bits: int = 64) -> np.ndarray:
    """PRG(seed): ``size`` uniform elements of Z_{2^bits}, (size,) uint64, by SHAKE-256.

    ``label`` separates the uses of one seed (pair masks vs self masks).
    """
    stream = hashlib.shake_256(label + b"\x00" + seed.to_bytes(16, "little")).digest(8 * size)
    words = np.frombuffer(stream, dtype="<u8").astype(np.uint64)  # (size,)
    return words & np.uint64(2**bits - 1)


_PAIR = b"fedvote/secure-sum/pair"
_SELF = b"fedvote/secure-sum/self"


# --- one round of the protocol ----------------------------------------------------------------

SecretId = tuple[str, int, int]  # ("self", i, i) for b_i; ("pair", i, j), i < j, for s_ij


@dataclass(kw_only=True)
class SecureSumRound:
    """One secure summation among ``num_agents`` agents with dropout threshold ``threshold``.

    Construction is the setup (pair seeds, self seeds, their Shamir sharing); then each
    agent calls :meth:`mask` on its vector and the server :meth:`unmask` on what arrived.
    Use a fresh round for every sum: reusing seeds would let the server subtract two
    rounds' masked vectors of one agent.

    Parameters
    ----------
    num_agents : int
        N; agents are 0 … N−1 and hold the Shamir shares at points 1 … N.
    threshold : int
        t: inputs and responders needed to unmask (1 ≤ t ≤ N). Bonawitz et al. take
        t > N/2, so that two disjoint groups of survivors cannot both unmask.
    codec : FixedPoint
        The fixed-point encoding; its capacity is checked against N.
    random_bytes : callable
        Randomness for seeds and Shamir coefficients (default ``os.urandom``).

    """

    num_agents: int
    threshold: int
    codec: FixedPoint = field(default_factory=FixedPoint)
    random_bytes: RandomBytes = os.urandom
    _seeds: dict[SecretId, int] = field(init=False, repr=False)
    _dealings: dict[SecretId, Polynomial] = field(init=False, repr=False)
    _answered: dict[int, frozenset[int]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.num_agents < 1:
            raise ConfigError("num_agents", f"must be at least 1, got {self.num_agents}")
        if not 1 <= self.threshold <= self.num_agents:
            raise ConfigError("threshold", f"must lie in [1, {self.num_agents}], got {self.threshold}")
        self.codec.check_capacity(self.num_agents)
        n = self.num_agents
        ids: list[SecretId] = [("self", i, i) for i in range(n)]
        ids += [("pair", i, j) for i in range(n) for j in range(i + 1, n)]
        self._seeds = dict(zip(ids, random_field_elements(len(ids), self.random_bytes), strict=True))
        # Each seed is dealt t-of-N; agent h's share of secret `sid` is _dealings[sid](h + 1).
        # The simulation evaluates a share when its holder hands it over (the same value
        # as at dealing: a fixed polynomial at a fixed point), not all N shares up front.
        self._dealings = {
            sid: deal(seed, self.threshold, self.random_bytes) for sid, seed in self._seeds.items()
        }
        self._answered = {}

    def _pair_seed(self, i: int, j: int) -> int:
        return self._seeds[("pair", min(i, j), max(i, j))]

    # -- agent side ------------------------------------------------------------------------

    def mask(self, agent: int, values: np.ndarray) -> np.ndarray:
        """Agent ``agent``'s masked vector y_i in Z_{2^k}, same shape as ``values``, uint64.

        y_i = enc(x_i) + PRG(b_i) + Σ_{j>i} PRG(s_ij) − Σ_{j<i} PRG(s_ij)  (mod 2^k).
        """
        self._check_agent(agent)
        encoded = self.codec.encode(values)  # same shape as values
        size, bits = encoded.size, self.codec.bits
        self_mask = expand_mask(self._seeds[("self", agent, agent)], size, label=_SELF, bits=bits)
        masked = encoded.reshape(-1) + self_mask  # (size,), wraps mod 2^64
        for peer in range(self.num_agents):
            if peer == agent:
                continue
            pair_mask = expand_mask(self._pair_seed(agent, peer), size, label=_PAIR, bits=bits)
            masked = masked + pair_mask if peer > agent else masked - pair_mask  # wraps mod 2^64
        return (masked & self.codec.ring_mask).reshape(encoded.shape)

    def mask_all(self, vectors: Sequence[np.ndarray]) -> dict[int, np.ndarray]:
        """Every agent's :meth:`mask` of ``vectors[i]`` (one per agent), expanding each pair mask once.

        The same y_i as N calls of :meth:`mask` (a simulation shortcut: PRG(s_ij) is added
        to y_i and subtracted from y_j from one expansion, halving the SHAKE-256 output).
        """
        if len(vectors) != self.num_agents:
            raise ValueError(f"{len(vectors)} vectors for {self.num_agents} agents")
        encoded = [self.codec.encode(v) for v in vectors]
        shapes = {e.shape for e in encoded}
        if len(shapes) != 1:
            raise ValueError(f"vectors of different shapes: {sorted(shapes)}")
        (shape,) = shapes
        size, bits = int(np.prod(shape, dtype=np.int64)), self.codec.bits
        masked = [
            e.reshape(-1) + expand_mask(self._seeds[("self", i, i)], size, label=_SELF, bits=bits)
            for i, e in enumerate(encoded)
        ]  # (size,) each, wraps mod 2^64
        for i in range(self.num_agents):
            for j in range(i + 1, self.num_agents):
                pair_mask = expand_mask(self._pair_seed(i, j), size, label=_PAIR, bits=bits)
                masked[i] = masked[i] + pair_mask
                masked[j] = masked[j] - pair_mask
        return {i: (y & self.codec.ring_mask).reshape(shape) for i, y in enumerate(masked)}

    def reveal_shares(self, holder: int, received: Collection[int]) -> dict[SecretId, int]:
        """What honest agent ``holder`` sends in the unmasking step, given the inputs the server got.

        Shares of b_u for every u in ``received`` and of s_du for every d not in it and u
        in it. The holder answers one ``received`` set per round only: a server asking
        again with another set could collect both b_d and the pair seeds of one agent d,
        and unmask it.
        """
        self._check_agent(holder)
        survivors = frozenset(received)
        if self._answered.setdefault(holder, survivors) != survivors:
            raise ProtocolViolation(
                f"agent {holder} already revealed shares for another set of inputs this round"
            )
        point = holder + 1
        shares = {("self", u, u): self._dealings[("self", u, u)](point) for u in survivors}
        for dropped in set(range(self.num_agents)) - survivors:
            for u in survivors:
                sid: SecretId = ("pair", min(dropped, u), max(dropped, u))
                shares[sid] = self._dealings[sid](point)
        return shares

    # -- server side -----------------------------------------------------------------------

    def unmask(self, masked: Mapping[int, np.ndarray], responders: Collection[int]) -> np.ndarray:
        """Σ_{u ∈ U} enc(x_u) mod 2^k (uint64, the inputs' shape) from the masked vectors that arrived.

        ``masked`` maps each agent u ∈ U whose y_u reached the server to y_u; ``responders``
        (⊆ U) answer the unmasking request with their shares. Raises
        :class:`SecureSumAborted` when |U| or the number of responders is below t.
        """
        received = frozenset(masked)
        helpers = sorted(set(responders))
        for agent in (*received, *helpers):
            self._check_agent(agent)
        if len(received) < self.threshold:
            raise SecureSumAborted(
                f"{len(received)} inputs arrived, fewer than the threshold t = {self.threshold}"
            )
        if not set(helpers) <= received:
            raise ProtocolViolation("responders must be agents whose masked input arrived")
        if len(helpers) < self.threshold:
            raise SecureSumAborted(
                f"{len(helpers)} agents responded, fewer than the threshold t = {self.threshold}"
            )
        collected: dict[SecretId, dict[int, int]] = {}
        for holder in helpers:
            for sid, value in self.reveal_shares(holder, received).items():
                collected.setdefault(sid, {})[holder + 1] = value
        rebuilt = {sid: reconstruct(shares, threshold=self.threshold) for sid, shares in collected.items()}

        shapes = {np.shape(vector) for vector in masked.values()}
        if len(shapes) != 1:
            raise ValueError(f"masked vectors of different shapes arrived: {sorted(shapes)}")
        (shape,) = shapes
        size, bits = int(np.prod(shape, dtype=np.int64)), self.codec.bits
        total = np.zeros(size, dtype=np.uint64)  # (size,), wraps mod 2^64
        for vector in masked.values():
            total = total + np.asarray(vector, dtype=np.uint64).reshape(-1)
        for u in received:  # every self mask of an input that arrived
            total = total - expand_mask(rebuilt[("self", u, u)], size, label=_SELF, bits=bits)
        for dropped in set(range(self.num_agents)) - received:  # unmatched pair masks
            for u in received:
                seed = rebuilt[("pair", min(dropped, u), max(dropped, u))]
                pair_mask = expand_mask(seed, size, label=_PAIR, bits=bits)
                # u added +PRG(s_ud) when d > u and −PRG(s_ud) when d < u: undo it.
                total = total - pair_mask if dropped > u else total + pair_mask
        return (total & self.codec.ring_mask).reshape(shape)

    def _check_agent(self, agent: int) -> None:
        if not 0 <= agent < self.num_agents:
            raise ValueError(f"no agent {agent} among {self.num_agents}")


def secure_sum(
    vectors: Sequence[np.ndarray],
    *,
    threshold: int,
    codec: FixedPoint | None = None,
    random_bytes: RandomBytes = os.urandom,
) -> np.ndarray:
    """Σ_i vectors[i] through one :class:`SecureSumRound` in which every agent responds, float64.

    Equals the sum of the encoded values exactly, so the plain float sum up to
    N·2^-(s+1). Raises :class:`SecureSumAborted` when ``len(vectors)`` < ``threshold``.
    """
    codec = codec if codec is not None else FixedPoint()
    if len(vectors) < threshold:
        raise SecureSumAborted(f"{len(vectors)} inputs, fewer than the threshold t = {threshold}")
    protocol = SecureSumRound(
        num_agents=len(vectors), threshold=threshold, codec=codec, random_bytes=random_bytes
    )
    masked = protocol.mask_all(vectors)
    return codec.decode(protocol.unmask(masked, responders=range(len(vectors))))
