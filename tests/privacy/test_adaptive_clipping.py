"""Adaptive clipping's math (Andrew et al. 2021): the combined multiplier, σ_b's default, the clip step."""

import math

import numpy as np
import pytest

from fedvote.privacy import adaptive_clipping as ac


@pytest.mark.parametrize(("z", "count_std"), [(0.77, 1.22), (1.0, 5.0), (2.5, 1.3), (0.3, 0.16)])
def test_update_multiplier_inverts_the_combination(z, count_std):
    """σ_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2) and z = (σ_Δ⁻² + (2σ_b)⁻²)^(−1/2) are inverses; σ_Δ > z."""
    update = ac.update_noise_multiplier(z, count_std)
    assert update > z
    assert ac.combined_noise_multiplier(update, count_std) == pytest.approx(z, rel=1e-12)
    # The closed form written out once more, by hand.
    assert update == pytest.approx(1.0 / math.sqrt(1.0 / z**2 - 1.0 / (4.0 * count_std**2)), rel=1e-12)


def test_a_count_noise_at_or_below_half_z_is_refused():
    with pytest.raises(ValueError, match="must exceed z/2"):
        ac.update_noise_multiplier(1.0, 0.5)
    with pytest.raises(ValueError, match="must exceed z/2"):
        ac.update_noise_multiplier(1.0, 0.3)


@pytest.mark.parametrize(("z", "expected_agents"), [(0.77, 2.5), (1.0, 100.0), (0.5, 100.0), (1.2, 1000.0)])
def test_default_count_std_is_the_papers_or_takes_at_most_its_share(z, expected_agents):
    """σ_b = max(m/20, z/(2√share)) with share 0.01: the paper's count at its m = 100, z = 1."""
    assert ac.DEFAULT_COUNT_SHARE == 0.01
    count_std = ac.default_count_std(z, expected_agents)
    assert count_std >= expected_agents / 20.0
    assert (2.0 * count_std) ** -2 <= 0.01 * z**-2 * (1 + 1e-12)
    if expected_agents / 20.0 >= z / (2.0 * math.sqrt(0.01)):  # the paper's value is feasible: kept
        assert count_std == expected_agents / 20.0
    else:  # raised to exactly the share
        assert (2.0 * count_std) ** -2 == pytest.approx(0.01 * z**-2, rel=1e-12)


def test_digits_defaults_cost_the_updates_half_a_percent_of_noise():
    """qN = 2.5, z = 0.767: σ_b = 5z = 3.84 and σ_Δ = z/√0.99 (was z/√0.9 with a tenth)."""
    z = 0.767
    count_std = ac.default_count_std(z, 2.5)
    assert count_std == pytest.approx(5.0 * z, rel=1e-12)
    assert ac.update_noise_multiplier(z, count_std) == pytest.approx(z / math.sqrt(0.99), rel=1e-12)


@pytest.mark.parametrize(
    ("count_std", "expected_agents", "step"),
    [
        (5.0, 100.0, 0.2),  # the paper's σ_b = m/20: its η_C
        (2.0, 100.0, 0.2),  # a count less noisy than the paper's: not sped up
        (3.835, 2.5, 0.2 * 0.125 / 3.835),  # digits' defaults: η_C·(m/20)/σ_b ≈ 0.0065
        (0.0, 2.5, 0.2),  # non-private: the exact count, η_C
    ],
)
def test_clip_step_keeps_the_papers_log_clip_noise(count_std, expected_agents, step):
    """η = η_C·min(1, (m/20)/σ_b), so the noise of the log-step, η·σ_b/m, is at most η_C/20."""
    got = ac.clip_step(0.2, count_std, expected_agents)
    assert got == pytest.approx(step, rel=1e-12)
    if count_std > 0:
        assert got * count_std / expected_agents <= 0.2 / 20.0 * (1 + 1e-12)


@pytest.mark.parametrize(("z", "count_std", "clip"), [(0.77, 1.22, 0.08), (1.5, 3.0, 2.0)])
def test_stacked_release_is_one_gaussian_of_multiplier_z(z, count_std, clip):
    """The stacked (update, (b − ½)·σ_Δ·C/σ_b) has norm ≤ √(C² + (scale/2)²) and noise std σ_Δ·C:
    its sensitivity over its noise is 1/z exactly (the paper's combined mechanism)."""
    update = ac.update_noise_multiplier(z, count_std)
    scale = ac.count_scale(update, clip, count_std)
    bound = ac.stacked_norm_bound(clip, scale)
    assert bound / (update * clip) == pytest.approx(1.0 / z, rel=1e-12)
    # The bit's noise, read back in units of the count, is σ_b.
    assert update * clip / scale == pytest.approx(count_std, rel=1e-12)


def test_clip_moves_toward_the_quantile():
    """More than γ of the updates under C: C shrinks; fewer: it grows; exactly γ: it stays."""
    assert ac.next_clip(1.0, 0.9, 0.5, 0.2) == pytest.approx(math.exp(-0.08))
    assert ac.next_clip(1.0, 0.1, 0.5, 0.2) == pytest.approx(math.exp(0.08))
    assert ac.next_clip(2.0, 0.5, 0.5, 0.2) == 2.0


def test_fraction_estimate_is_unbiased():
    """b̃ = (Σ(b_i − ½) + noise)/(qN) + ½ has mean the true fraction when m = qN (noise of mean 0)."""
    rng = np.random.default_rng(0)
    m, true_fraction, sigma_b, trials = 40, 0.3, 2.0, 20_000
    bits = rng.random((trials, m)) < true_fraction
    noisy = (bits - 0.5).sum(axis=1) + rng.normal(0.0, sigma_b, trials)
    estimates = np.array([ac.estimated_fraction(v, m) for v in noisy])
    standard_error = estimates.std() / math.sqrt(trials)
    assert abs(estimates.mean() - true_fraction) < 5 * standard_error


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_bad_inputs_are_refused(bad):
    with pytest.raises(ValueError):
        ac.combined_noise_multiplier(bad, 1.0)
    with pytest.raises(ValueError):
        ac.next_clip(bad, 0.5, 0.5, 0.2)
    with pytest.raises(ValueError):
        ac.clip_step(bad, 1.0, 2.5)
