"""Gaussian DP for PriFedSync: Tables 1 and 2 of the paper, G_μ, conversions."""

import math

import numpy as np
import pytest
from dp_accounting import dp_event, pld
from scipy.stats import norm

from fedvote.errors import ConfigError
from fedvote.privacy.fdp import (
    clt_mu,
    compose_gdp,
    federated_mu,
    gdp_delta,
    gdp_epsilon,
    gdp_mu,
    gdp_tradeoff,
    prifedsync_mu,
    replace_one_dp_sgd_epsilon,
    replace_one_poisson_gaussian_epsilon,
    subsampled_tradeoff,
)

# federated-f-dp-prifedsync.txt, Table 1 (MNIST, B = 16, K = 38, n = 60000/100 = 600 per client):
# (p, σ, R, μ_max). p only changes R; μ follows Theorem 2.
TABLE_1 = [
    (1.0, 1.0, 93, 2.71), (1.0, 0.9, 83, 3.10), (1.0, 0.75, 64, 3.96),
    (0.5, 1.0, 194, 3.92), (0.5, 0.9, 176, 4.51), (0.5, 0.75, 127, 5.58),
    (0.25, 1.0, 386, 5.52), (0.25, 0.9, 325, 6.13), (0.25, 0.75, 245, 7.75),
]
# Table 2 (p = 0.5): (σ, B, K, R, μ_max)
TABLE_2 = [
    (1.0, 8, 76, 266, 3.24), (1.0, 16, 38, 194, 3.92),
    (0.9, 8, 76, 229, 3.64), (0.9, 16, 38, 176, 4.51),
    (0.75, 8, 76, 191, 4.84), (0.75, 16, 38, 127, 5.58),
]


@pytest.mark.parametrize(("p", "sigma", "rounds", "mu"), TABLE_1)
def test_table_1(p, sigma, rounds, mu):
    assert round(prifedsync_mu(sigma, 16, 600, 38, rounds), 2) == mu


@pytest.mark.parametrize(("sigma", "batch", "steps", "rounds", "mu"), TABLE_2)
def test_table_2(sigma, batch, steps, rounds, mu):
    assert round(prifedsync_mu(sigma, batch, 600, steps, rounds), 2) == mu


def test_clt_formula_and_small_sigma():
    sigma, q, steps = 0.8, 0.02, 5000
    c = q * math.sqrt(steps)
    direct = math.sqrt(2) * c * math.sqrt(
        math.exp(sigma**-2) * norm.cdf(1.5 / sigma) + 3 * norm.cdf(-0.5 / sigma) - 2
    )
    assert clt_mu(sigma, q, steps) == pytest.approx(direct, rel=1e-12)
    # σ = 0.02: e^{2500} overflows a float; the log-space form does not
    expected = math.exp(0.5 * math.log(2) + math.log(1e-300) + 1250)
    assert clt_mu(0.02, 1e-300, 1) == pytest.approx(expected, rel=1e-9)
    assert math.isinf(clt_mu(0.02, 0.5, 1))
    assert clt_mu(1.0, 0.0, 100) == 0.0
    assert math.isinf(clt_mu(1e-320, 0.04, 4))  # σ⁻² overflowed a float


@pytest.mark.parametrize("sigma", [1.0, 1.5, 3.0, 10.0, 1e2, 1e4, 2.6e8, 1e30, 1e200])
def test_clt_mu_for_large_sigma_matches_80_digit_arithmetic(sigma):
    """Large σ: the bracket is ≈ 1/(2σ²) and its naive form subtracts numbers near 2 (it
    raised a math domain error at σ = 2.6e8); checked against mpmath at 80 digits."""
    import mpmath

    mpmath.mp.dps = 80
    x = 1 / mpmath.mpf(sigma)
    bracket = mpmath.e ** (x * x) * mpmath.ncdf(1.5 * x) + 3 * mpmath.ncdf(-0.5 * x) - 2
    expected = float(mpmath.sqrt(2) * mpmath.mpf(0.04) * mpmath.sqrt(4) * mpmath.sqrt(bracket))
    assert clt_mu(sigma, 0.04, 4) == pytest.approx(expected, rel=1e-12)


def test_tradeoff_function():
    alpha = np.linspace(0.0, 1.0, 101)
    np.testing.assert_allclose(gdp_tradeoff(0.0, alpha), 1 - alpha, atol=1e-12)
    # Neyman–Pearson for N(0,1) vs N(μ,1): reject above t, α = 1 − Φ(t), β = Φ(t − μ)
    t = np.linspace(-3, 3, 61)
    np.testing.assert_allclose(gdp_tradeoff(1.3, 1 - norm.cdf(t)), norm.cdf(t - 1.3), atol=1e-12)
    # G_μ is symmetric: G_μ(G_μ(α)) = α
    inner = np.linspace(0.01, 0.99, 50)
    np.testing.assert_allclose(gdp_tradeoff(0.7, gdp_tradeoff(0.7, inner)), inner, atol=1e-9)


def test_subsampled_tradeoff_lemma_3_8():
    alpha = np.linspace(0, 1, 201)
    g = subsampled_tradeoff(lambda a: gdp_tradeoff(2.0, a), 0.5)(alpha)
    assert np.all(g >= gdp_tradeoff(2.0, alpha) - 1e-15)
    assert np.all(g >= 1 - alpha - 0.25 - 1e-15)
    np.testing.assert_allclose(g, np.maximum(gdp_tradeoff(2.0, alpha), 1 - alpha - 0.25))


def test_composition_and_federated_mu():
    assert compose_gdp(3.0, 4.0) == pytest.approx(5.0)
    assert compose_gdp(*([0.5] * 16)) == pytest.approx(2.0)
    assert federated_mu(2.71, 100, strong=False) == 2.71
    assert federated_mu(2.71, 100, strong=True) == pytest.approx(2.71 * math.sqrt(99))
    # One client: no other client to guard against, even when μ overflowed to ∞ (√0·∞ is NaN).
    assert federated_mu(math.inf, 1, strong=True) == 0.0
    assert federated_mu(2.71, 1, strong=True) == 0.0


def test_gdp_clt_with_one_client_and_tiny_noise_answers():
    """Found by the boundary fuzz: σ = 1/64 with one client gave a NaN μ_strong and a traceback."""
    from fedvote.cli.app import main

    main(["account", "gdp-clt", "--batch-size", "4", "--records", "100", "--local-steps", "2",
          "--rounds", "2", "--sigma", "0.015625", "--clients", "1", "--json"])  # fmt: skip


@pytest.mark.parametrize("mu", [0.3, 1.0, 2.71, 8.0])
def test_gdp_conversions_against_dp_accounting(mu):
    # μ-GDP is exactly a Gaussian mechanism with σ = 1/μ (unit sensitivity)
    accountant = pld.PLDAccountant().compose(dp_event.GaussianDpEvent(1.0 / mu))
    eps = gdp_epsilon(mu, 1e-5)
    assert eps == pytest.approx(accountant.get_epsilon(1e-5), rel=0.01)
    assert gdp_delta(mu, eps) <= 1e-5 * (1 + 1e-9)
    assert gdp_mu(eps, 1e-5) == pytest.approx(mu, rel=1e-6)
    assert gdp_delta(gdp_mu(eps, 1e-5), eps) <= 1e-5 * (1 + 1e-9)


def test_replace_one_pld_counterpart():
    # q = 1: the replace-one pair N(−1, 4σ²) vs N(1, 4σ²) is μ = 1/σ per step
    steps, sigma = 50, 2.0
    assert replace_one_dp_sgd_epsilon(sigma, 1.0, steps, 1e-5) == pytest.approx(
        gdp_epsilon(math.sqrt(steps) / sigma, 1e-5), rel=0.01
    )
    # the same run as Table 1's first row: the PLD figure is finite and below the CLT's ε
    steps = 38 * 93
    pld_eps = replace_one_dp_sgd_epsilon(1.0, 16 / 600, steps, 1e-5)
    assert 0 < pld_eps < gdp_epsilon(prifedsync_mu(1.0, 16, 600, 38, 93), 1e-5)
    assert replace_one_dp_sgd_epsilon(1.0, 0.0, 10, 1e-5) == 0.0


def test_bad_input():
    for call in (
        lambda: clt_mu(0.0, 0.1, 10),
        lambda: prifedsync_mu(1.0, 700, 600, 38, 10),
        lambda: gdp_epsilon(1.0, 1.5),
        lambda: federated_mu(1.0, 0, strong=True),
        lambda: subsampled_tradeoff(lambda a: a, 2.0),
    ):
        with pytest.raises(ConfigError):
            call()


def test_replace_one_poisson_gaussian_for_dp_fedavg_instance_level():
    from fedvote.privacy.accountant import epsilon_for
    from fedvote.privacy.events import dp_fedavg_events

    # q = 1: the replace-one pair N(−1, z²) vs N(1, z²) is a Gaussian with μ = 2/z per round
    assert replace_one_poisson_gaussian_epsilon(1.0, 3.0, 10, 1e-5) == pytest.approx(
        gdp_epsilon(2 * math.sqrt(10) / 3.0, 1e-5), rel=0.01
    )
    # with sampling it is DP-FedAvg's instance-level headline, the ledger's replace-one event
    tight = replace_one_poisson_gaussian_epsilon(0.05, 1.0, 200, 1e-3)
    assert tight == pytest.approx(5.137, abs=0.01)  # pinned, dp-accounting 0.6.0 PLD
    assert tight == pytest.approx(epsilon_for(dp_fedavg_events(0.05, 1.0, 200).instance, 1e-3), rel=1e-6)


@pytest.mark.parametrize("sigma", [0.5, 0.75, 1.0, 2.0, 5.0])
def test_theorem_2_bracket_by_numeric_integration(sigma):
    """Theorem 2's e^{σ⁻²}Φ(1.5/σ) + 3Φ(−0.5/σ) − 2 is E_{x~N(0,1)}[(L(x) − 1)²; x > 1/(2σ)].

    L(x) = e^{x/σ − 1/(2σ²)} is the likelihood ratio of N(1/σ, 1) to N(0, 1); the CLT's
    variance comes from the half-line where the symmetrised C_p(G_{1/σ}) uses f_p. The
    integral is computed by quadrature, independently of the closed form (relative
    tolerance 1e-7, well above quad's error).
    """
    from scipy import integrate

    m = 1.0 / sigma

    def integrand(x):
        return math.expm1(m * x - m * m / 2) ** 2 * norm.pdf(x)

    integral = integrate.quad(integrand, m / 2, m / 2 + 40.0, epsabs=0, epsrel=1e-10, limit=200)[0]
    q, steps = 16 / 600, 38 * 194
    assert clt_mu(sigma, q, steps) == pytest.approx(math.sqrt(2) * q * math.sqrt(steps) * math.sqrt(integral), rel=1e-7)


def test_strong_is_sqrt_m_minus_1_weak_for_every_table_1_row():
    for _, sigma, rounds, _ in TABLE_1:
        weak = prifedsync_mu(sigma, 16, 600, 38, rounds)
        assert federated_mu(weak, 100, strong=True) == pytest.approx(math.sqrt(99) * weak)
        assert federated_mu(weak, 100, strong=False) == weak
