"""Secure sum: Shamir sharing, fixed point, exact sums, dropouts, and what the server sees."""

import itertools

import numpy as np
import pytest
from scipy import stats

from fedvote.aggregation.secure_sum import (
    MERSENNE_127,
    FixedPoint,
    ProtocolViolation,
    SecureSumAborted,
    SecureSumRound,
    deal,
    expand_mask,
    reconstruct,
    secure_sum,
    share,
)
from fedvote.errors import ConfigError
from fedvote.models.training import TrainingConfig
from fedvote.transport.local import LocalTransport


def seeded_bytes(seed: int):
    return np.random.default_rng(seed).bytes


def noisy_votes(rng, agents: int, queries: int = 13, classes: int = 10, noise: float = 3.0) -> list[np.ndarray]:
    """One-hot votes plus Gaussian noise, the vectors the transport sums: agents × (Q, C)."""
    out = []
    for _ in range(agents):
        votes = np.eye(classes)[rng.integers(0, classes, size=queries)]
        out.append(votes + rng.normal(0.0, noise, size=votes.shape))
    return out


def encoded_sum(codec: FixedPoint, vectors) -> np.ndarray:
    """Σ of the signed encodings in exact integer arithmetic (Python ints), as int64."""
    total = sum(codec.to_signed(codec.encode(v)).astype(object) for v in vectors)
    return np.asarray(total, dtype=np.int64)


# --- Shamir ----------------------------------------------------------------------------------


def test_any_t_shares_reconstruct_the_secret():
    secret = 0x1234_5678_9ABC_DEF0_1122_3344_5566_7788 % MERSENNE_127
    shares = share(secret, threshold=3, holders=range(1, 7), random_bytes=seeded_bytes(0))
    for size in (3, 4, 6):
        for subset in itertools.combinations(shares, size):
            assert reconstruct({x: shares[x] for x in subset}, threshold=3) == secret


def test_fewer_than_t_shares_refuse():
    shares = share(5, threshold=4, holders=[1, 2, 3, 4], random_bytes=seeded_bytes(1))
    with pytest.raises(SecureSumAborted):
        reconstruct({x: shares[x] for x in (1, 2, 3)}, threshold=4)


@pytest.mark.parametrize(("prime", "threshold"), [(7, 2), (11, 3), (5, 4)])
def test_t_minus_1_shares_are_uniform_whatever_the_secret(prime, threshold):
    # Perfect secrecy, by enumeration in a small field: for every secret, the t−1 shares
    # at points 1..t−1 over all p^(t−1) random polynomials take every value in
    # GF(p)^(t−1) exactly once, so they are uniform and independent of the secret (every
    # secret is consistent with any t−1 shares, in exactly one way).
    holders = range(1, threshold)
    for secret in range(prime):
        seen = {}
        for tail in itertools.product(range(prime), repeat=threshold - 1):
            coefficients = (secret, *tail)
            values = tuple(
                sum(c * x**k for k, c in enumerate(coefficients)) % prime for x in holders
            )
            seen[values] = seen.get(values, 0) + 1
        assert len(seen) == prime ** (threshold - 1)
        assert set(seen.values()) == {1}


def test_dealt_polynomial_has_the_secret_at_zero_and_degree_t_minus_1():
    polynomial = deal(42, 5, seeded_bytes(2))
    assert polynomial(0) == 42 and len(polynomial.coefficients) == 5
    points = {x: polynomial(x) for x in (3, 9, 12, 40, 41)}
    assert reconstruct(points, threshold=5) == 42


# --- fixed point -----------------------------------------------------------------------------


def test_fixed_point_round_trip_within_half_a_step():
    codec = FixedPoint()
    values = np.random.default_rng(3).normal(0.0, 50.0, size=1000)
    values[:3] = [codec.bound, -codec.bound, 0.0]
    assert np.max(np.abs(codec.decode(codec.encode(values)) - values)) <= codec.resolution / 2


def test_capacity_is_checked_so_sums_never_wrap():
    codec = FixedPoint(bits=16, scale_bits=4, bound=100.0)  # |enc| ≤ 1600; 20·1600 < 2^15
    assert codec.max_agents() == 20
    codec.check_capacity(20)
    with pytest.raises(ConfigError, match="could wrap"):
        codec.check_capacity(21)
    with pytest.raises(ConfigError, match="could wrap"):
        SecureSumRound(num_agents=21, threshold=11, codec=codec)
    for extreme in (100.0, -100.0):  # the worst case at capacity still decodes exactly
        total = secure_sum([np.full(3, extreme)] * 20, threshold=11, codec=codec, random_bytes=seeded_bytes(4))
        np.testing.assert_array_equal(total, np.full(3, 20 * extreme))
    assert FixedPoint().max_agents() == 2**19 - 1  # default: 64 bits, 2^-24, ±2^20


def test_encode_refuses_values_it_cannot_represent():
    codec = FixedPoint(bound=10.0)
    with pytest.raises(ConfigError, match="outside the fixed-point range"):
        codec.encode(np.array([1.0, -10.5]))
    with pytest.raises(ConfigError, match="non-finite"):
        codec.encode(np.array([np.nan]))
    with pytest.raises(ConfigError):
        FixedPoint(bits=32, scale_bits=24, bound=2.0**10)  # 2^34 does not fit in 31 bits


# --- exact sums ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "codec",
    [FixedPoint(), FixedPoint(bits=32, scale_bits=12, bound=1000.0), FixedPoint(bits=48, scale_bits=30, bound=64.0)],
)
def test_sum_equals_the_sum_of_encodings_exactly(codec):
    rng = np.random.default_rng(5)
    vectors = noisy_votes(rng, agents=7)
    protocol = SecureSumRound(num_agents=7, threshold=4, codec=codec, random_bytes=seeded_bytes(6))
    masked = {i: protocol.mask(i, v) for i, v in enumerate(vectors)}
    total = protocol.unmask(masked, responders=range(7))  # (13, 10) in Z_{2^k}
    assert total.shape == (13, 10) and total.dtype == np.uint64
    np.testing.assert_array_equal(codec.to_signed(total), encoded_sum(codec, vectors))
    # each encoding is off by ≤ 2^-(s+1), so the sum by ≤ N·2^-(s+1) < N·2^-s
    plain = np.sum(vectors, axis=0)
    assert np.max(np.abs(codec.decode(total) - plain)) <= 7 * codec.resolution


def test_pair_masks_cancel_in_the_sum():
    protocol = SecureSumRound(num_agents=5, threshold=3, random_bytes=seeded_bytes(7))
    zeros = np.zeros(64)
    total = np.zeros(64, dtype=np.uint64)
    for i in range(5):
        self_mask = expand_mask(protocol._seeds[("self", i, i)], 64, label=b"fedvote/secure-sum/self")
        total = total + (protocol.mask(i, zeros) - self_mask)  # agent i's pair masks only
    np.testing.assert_array_equal(total, np.zeros(64, dtype=np.uint64))


def test_secure_sum_helper_matches_the_float_sum():
    vectors = noisy_votes(np.random.default_rng(8), agents=12)
    total = secure_sum(vectors, threshold=7, random_bytes=seeded_bytes(9))
    assert np.max(np.abs(total - np.sum(vectors, axis=0))) <= 12 * FixedPoint().resolution
    with pytest.raises(SecureSumAborted):
        secure_sum(vectors[:3], threshold=4)


# --- dropouts --------------------------------------------------------------------------------


def test_agents_dropping_after_masking_are_recovered_from_t_survivors():
    codec = FixedPoint()
    vectors = noisy_votes(np.random.default_rng(10), agents=8)
    protocol = SecureSumRound(num_agents=8, threshold=5, codec=codec, random_bytes=seeded_bytes(11))
    masked = {i: protocol.mask(i, v) for i, v in enumerate(vectors)}  # everyone masked...
    dropped = {2, 6}  # ...but these two vectors never arrive
    arrived = {i: y for i, y in masked.items() if i not in dropped}
    survivors = sorted(arrived)
    total = protocol.unmask(arrived, responders=survivors)
    np.testing.assert_array_equal(codec.to_signed(total), encoded_sum(codec, [vectors[i] for i in survivors]))


def test_inputs_that_arrived_count_even_when_their_agent_leaves_before_unmasking():
    codec = FixedPoint()
    vectors = noisy_votes(np.random.default_rng(12), agents=8)
    protocol = SecureSumRound(num_agents=8, threshold=5, codec=codec, random_bytes=seeded_bytes(13))
    arrived = {i: protocol.mask(i, vectors[i]) for i in (0, 1, 3, 4, 5, 7)}  # agents 2, 6 dropped
    total = protocol.unmask(arrived, responders=[0, 1, 3, 4, 7])  # agent 5 gone too: exactly t left
    np.testing.assert_array_equal(codec.to_signed(total), encoded_sum(codec, [vectors[i] for i in arrived]))


def test_below_threshold_the_sum_is_not_released():
    vectors = noisy_votes(np.random.default_rng(14), agents=8)
    protocol = SecureSumRound(num_agents=8, threshold=5, random_bytes=seeded_bytes(15))
    arrived = {i: protocol.mask(i, vectors[i]) for i in (0, 1, 3, 4, 5, 7)}
    with pytest.raises(SecureSumAborted, match="4 agents responded"):
        protocol.unmask(arrived, responders=[0, 1, 3, 4])
    fresh = SecureSumRound(num_agents=8, threshold=5, random_bytes=seeded_bytes(16))
    few = {i: fresh.mask(i, vectors[i]) for i in (0, 1, 2, 3)}
    with pytest.raises(SecureSumAborted, match="4 inputs arrived"):
        fresh.unmask(few, responders=[0, 1, 2, 3])


def test_honest_agents_never_reveal_both_masks_of_one_agent():
    vectors = noisy_votes(np.random.default_rng(17), agents=6)
    protocol = SecureSumRound(num_agents=6, threshold=4, random_bytes=seeded_bytes(18))
    arrived = {i: protocol.mask(i, vectors[i]) for i in range(5)}  # agent 5 dropped
    protocol.unmask(arrived, responders=range(5))
    # The server now holds agent 5's pair seeds; asking again as if 5 had arrived would
    # give it b_5 too. Every agent that already answered refuses.
    with pytest.raises(ProtocolViolation):
        protocol.reveal_shares(0, received=range(6))
    with pytest.raises(ProtocolViolation, match="responders"):
        SecureSumRound(num_agents=6, threshold=4).unmask(
            {i: np.zeros(3, dtype=np.uint64) for i in range(4)}, responders=[0, 1, 2, 5]
        )


# --- what the server sees --------------------------------------------------------------------

# Uniformity of one agent's masked vector y_i as the server sees it. Each test buckets
# n = 16,000 coordinates of y_i ∈ Z_{2^64} into 16 bins (the low 4 bits, and the top 4
# bits) and applies Pearson's χ² test against the uniform distribution: expected count
# n/16 = 1000 per bin (far above the usual ≥ 5), so X² ~ χ²(15) under H0. Each test
# rejects at α = 1e-4 (critical value χ²₁₅(1 − 1e-4) ≈ 44.3); 4 agents × 2 tests × 2
# inputs = 16 tests, so by Bonferroni the family rejects a truly uniform view with
# probability ≤ 1.6e-3 (and the seeds are fixed, so the outcome is reproducible). Power:
# the input is a constant one-hot pattern, so the unmasked encoding puts all of its mass
# in one or two bins (X² ≈ 15·n = 240,000) and a mask missing the top bits leaves the top
# buckets constant; both fail by orders of magnitude (checked below).
SAMPLE = 16_000
ALPHA = 1e-4


def chi_square_p(values: np.ndarray) -> tuple[float, float]:
    """p-values of the χ² uniformity tests of the low 4 bits and of the top 4 bits."""
    low = np.bincount((values & np.uint64(15)).astype(np.int64), minlength=16)
    top = np.bincount((values >> np.uint64(60)).astype(np.int64), minlength=16)
    return stats.chisquare(low).pvalue, stats.chisquare(top).pvalue


@pytest.mark.parametrize("pattern", ["one-hot", "large"])
def test_each_agents_masked_vector_looks_uniform_to_the_server(pattern):
    agents = 4
    if pattern == "one-hot":
        vector = np.tile(np.eye(10)[3], SAMPLE // 10)  # (SAMPLE,), the same vote every time
    else:
        vector = np.full(SAMPLE, 1000.5)
    protocol = SecureSumRound(num_agents=agents, threshold=3, random_bytes=seeded_bytes(19))
    codec = protocol.codec
    for agent in range(agents):
        masked = protocol.mask(agent, vector)  # (SAMPLE,) what the server receives
        low_p, top_p = chi_square_p(masked)
        assert low_p > ALPHA and top_p > ALPHA, (agent, low_p, top_p)
        assert stats.kstest(masked.astype(np.float64) / 2.0**64, "uniform").pvalue > ALPHA
    # power: the same tests reject the unmasked encoding and a mask of the low 32 bits only
    encoded = codec.encode(vector)
    assert max(chi_square_p(encoded)) < 1e-100
    half_masked = encoded + (expand_mask(7, SAMPLE, label=b"test") & np.uint64(2**32 - 1))
    assert chi_square_p(half_masked)[1] < 1e-100


def test_a_late_vector_of_a_dropped_agent_stays_masked():
    vectors = noisy_votes(np.random.default_rng(20), agents=6, queries=SAMPLE // 10)
    protocol = SecureSumRound(num_agents=6, threshold=4, random_bytes=seeded_bytes(21))
    masked = {i: protocol.mask(i, vectors[i]) for i in range(6)}
    arrived = {i: masked[i] for i in range(5)}  # agent 5 is declared dropped...
    protocol.unmask(arrived, responders=range(5))
    late = masked[5].reshape(-1)  # ...and its vector arrives afterwards.
    # Even a server given every pair seed of agent 5 is left with enc(x_5) + PRG(b_5),
    # and b_5 was never revealed: what remains is uniform, not the vote.
    for peer in range(5):
        pair = expand_mask(protocol._pair_seed(5, peer), late.size, label=b"fedvote/secure-sum/pair")
        late = late + pair  # agent 5 subtracted its masks with lower-indexed peers
    encoded = protocol.codec.encode(vectors[5]).reshape(-1)
    assert np.mean(late == encoded) < 1e-3
    low_p, top_p = chi_square_p(late)
    assert low_p > ALPHA and top_p > ALPHA


# --- the local transport ---------------------------------------------------------------------


def test_local_transport_secure_sum_equals_the_plain_sum(small_federation):
    config = TrainingConfig(model="logistic", epochs=1, batch_size=64)
    plain = LocalTransport(small_federation, seed=1, noise_seed=2)
    secure = LocalTransport(small_federation, seed=1, noise_seed=2, secure_sum=True)
    plain.train_teachers(config)
    secure.train_teachers(config)
    queries = np.arange(40)
    for noise_std in (0.0, 2.0):  # same noise seed: the same noisy votes go into both sums
        a = plain.vote_sum(queries, noise_std, min_responders=10)
        b = secure.vote_sum(queries, noise_std, min_responders=10)
        assert a is not None and b is not None and b.responders == 10
        assert np.max(np.abs(a.sums - b.sums)) <= 10 * FixedPoint().resolution
    clean = secure.vote_sum(queries, 0.0, min_responders=1)
    assert clean is not None
    np.testing.assert_array_equal(clean.sums, np.round(clean.sums))  # integers survive exactly
    np.testing.assert_array_equal(clean.sums.sum(axis=1), np.full(40, 10.0))


# --- every agent's vector at once; float updates; rounding after the noise ---------------------


def test_mask_all_gives_every_agent_the_same_vector_as_mask():
    protocol = SecureSumRound(num_agents=6, threshold=4, random_bytes=seeded_bytes(3))
    vectors = noisy_votes(np.random.default_rng(3), 6)
    together = protocol.mask_all(vectors)
    for agent, vector in enumerate(vectors):
        np.testing.assert_array_equal(together[agent], protocol.mask(agent, vector))
    with pytest.raises(ValueError):
        protocol.mask_all(vectors[:5])


def test_secure_sum_of_clipped_noisy_updates_is_within_the_encoding_error():
    """DP-FedAvg's releases: updates of norm ≤ S = 0.08 in d = 5000 coordinates plus a noise share;
    the default codec holds them, and the sum is off by at most N·2^-25 per coordinate."""
    rng = np.random.default_rng(0)
    n, d, clip = 20, 5000, 0.08
    updates = [rng.normal(size=d) for _ in range(n)]
    releases = [u * clip / np.linalg.norm(u) + rng.normal(0.0, clip / np.sqrt(n), size=d) for u in updates]
    total = secure_sum(releases, threshold=n // 2 + 1)
    assert np.max(np.abs(total - np.sum(releases, axis=0))) <= n * 2.0**-25


def test_rounding_after_the_noise_is_refused_when_the_share_does_not_smooth_the_grid():
    """η of the lattice-smoothing bound: 0 in double precision for real noise shares; a share of a
    few grid steps is refused (rounding it would leak), no noise at all is not a claim and passes."""
    codec = FixedPoint()
    assert codec.rounding_eta(0.08 / np.sqrt(50), 50) == 0.0
    assert codec.rounding_eta(4 * codec.resolution, 50) > 0.0
    assert codec.rounding_eta(0.0, 50) == np.inf
    codec.check_smoothing(0.01, 50)
    codec.check_smoothing(0.0, 50)
    with pytest.raises(ConfigError) as error:
        codec.check_smoothing(4 * codec.resolution, 50)
    assert error.value.argument == "sigma"
