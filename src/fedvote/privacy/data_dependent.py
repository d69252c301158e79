"""Data-dependent privacy of noisy-argmax voting, from the *clean* vote histograms.

**What it covers.** A data-dependent bound holds only for a mechanism whose outputs are
the noisy *argmax* (and, for Confident-GNMax, the pass bits of a noisy threshold check):
it exploits that a large vote margin makes the released label nearly constant. A run that
lets the noisy vote *sums* out (PATE-FL's and Private-kNN-FL's Algorithm 1/2, weighted
voting) releases a Gaussian mechanism whose loss does not shrink with the margin, so no
data-dependent figure applies to it (``fedvote.analysis`` labels such runs
:data:`NOT_APPLICABLE_SUMS`); only PATE-FL with ``--release labels`` (Confident-GNMax,
:func:`confident_gnmax_epsilon`) claims one.

Everything here reads the private, noiseless vote counts, so its output is itself
**data-dependent (not itself private)**: report it separately from the run's ε and
never as the headline figure (releasing it privately needs smooth sensitivity,
Papernot et al. 2018, §B, which is not done here).

Inputs: ``histogram`` of shape (queries, classes) — the clean vote sums Σᵢ fᵢ(x) per
query (one-hot counts for PATE-FL, sums of mean-of-k votes for Private-kNN-FL), and
``sigma`` — the standard deviation of the Gaussian noise actually added to each sum
(with distributed noise: the total over the agents that responded, ≥ the accounted σ).

Bounds (per query, then composed over queries by adding RDP at each order, converted
to (ε, δ) and capped by the data-independent ε of the same run):

* ``gnmax`` — Papernot, Song, Mironov, Raghunathan, Talwar, Erlingsson (2018), *Scalable
  private learning with PATE*: Proposition 7 (q ≤ Σ_{j≠j*} Φ̄((n* − n_j)/(√2·σ)),
  :func:`gnmax_logq`) and Theorem 6 with the two higher orders of its Proposition 10
  (μ₂ = √(−log q / ρ), μ₁ = μ₂ + 1; :func:`gnmax_rdp`) — the bound the authors' own
  code computes (``rdp_gaussian``). Their data-independent curve is Proposition 8,
  λ/σ² (ρ = 1/σ²: replace-one of one teacher's vote, L2 sensitivity √2). Theorem 6 is
  stated for *any* mechanism with (μ₁, ε₁)- and (μ₂, ε₂)-RDP under a neighbouring
  relation and any bound q̃ ≥ Pr[M(D) ≠ j*]; q depends on D only. So it holds for
  every adjacency under which the Gaussian sum is (λ, ρλ)-RDP in both directions:
  here ρ = s²/(2σ²) with the level's sensitivity s (agent/zero-out s = 1, PATE-FL
  instance s = √2, ...). See ``docs/privacy.md``.
* ``theorem5`` — Lemma 4 / Theorem 5 of the voting paper (Lemma 12-14 and Theorem 14 of
  its appendix). Lemma 4: with margin γ·N = n* − n₂ in vote-sum units, the noisy argmax
  differs from the clean one with probability ≤ q = C·exp(−(Nγ)²/(8σ²)). Theorem 5 is
  Lemma 13 with that q and ε(2α) = 2α·s²/(2σ²); we use Lemma 13 *before* the paper's
  simplification (whose printed exponent (2α−1)σ²/(2s²) is a typo of (2α−1)·α·s²/(2σ²)):
  ε(α) ≤ −log(1−q) + log(1 + √q·(1−q)^{α−1}·e^{(2α−1)·α·s²/(2σ²)})/(α−1).
  Lemma 13 bounds D_α(M(D')‖M(D)) with the actual data D in the *second* argument
  (its proof needs Pr_{M(D)}[j*] ≥ 1 − q); GNMax's Theorem 6 bounds D_λ(M(D)‖M(D')).
* Confident-GNMax (Papernot et al. 2018, Algorithm 1; :func:`confident_gnmax_epsilon`) —
  the threshold check's pass bit on every checked query (Theorem 6 with
  q = min(p, 1 − p), p = Pr[max_j(n_j + N(0, σ₁²)) ≥ T] exact: :func:`threshold_rdp`, the
  authors' ``compute_rdp_threshold``) plus ``gnmax`` on the answered queries only, as the
  paper composes them (§4); the data-independent cap charges both on every query.

Each per-query curve is capped at the data-independent Gaussian RDP ρ·α before
composing, and the final ε is min(data-dependent, data-independent) so it can never
exceed the data-independent ε.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import special

from fedvote.errors import ConfigError
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import compose_events, gaussian_release_event

LABEL = "data-dependent (not itself private)"
# Why a run that releases the noisy vote sums claims no data-dependent ε.
NOT_APPLICABLE_SUMS = (
    "not applicable: the server receives the noisy vote sums, not only the argmax; "
    "the data-dependent analysis (Papernot et al. 2018, Thm 6; voting paper, Thm 5) covers "
    "argmax-only releases"
)
BOUNDS: tuple[str, ...] = ("gnmax", "theorem5")

# Orders for data-dependent RDP: every order is a valid bound, so a moderate grid keeps
# the (queries × orders) arrays small. Theorem 6 needs λ > 1.
DATA_DEPENDENT_ORDERS: tuple[float, ...] = tuple(
    np.concatenate(
        [
            1.0 + np.geomspace(0.02, 1.0, 12)[:-1],
            np.arange(2.0, 10.0, 0.5),
            np.arange(10.0, 64.0, 2.0),
            np.geomspace(64.0, 1e5, 40),
        ]
    ).tolist()
)

_CHUNK = 8192  # queries per vectorised block (bounds memory at ~chunk × orders floats)


def _check_histogram(histogram: np.ndarray) -> np.ndarray:
    counts = np.asarray(histogram, dtype=float)
    if counts.ndim == 1:
        counts = counts[None, :]
    if counts.ndim != 2:
        raise ConfigError("histogram", f"must be (queries × classes), got shape {counts.shape}")
    if counts.shape[0] == 0:
        raise ConfigError("histogram", "holds no queries")
    if counts.shape[1] < 2:
        raise ConfigError("histogram", f"needs at least 2 classes, got {counts.shape[1]}")
    if not np.all(np.isfinite(counts)) or np.any(counts < 0):
        raise ConfigError("histogram", "vote counts must be finite and >= 0")
    return counts


def _check_sigma(sigma: float) -> None:
    if not sigma > 0 or not math.isfinite(sigma):
        raise ConfigError("sigma", f"must be a finite number > 0, got {sigma}")


def vote_margins(histogram: np.ndarray) -> np.ndarray:
    """n* − n₂ per query: the gap between the largest and second-largest vote sums (= N·γ(x))."""
    counts = _check_histogram(histogram)
    top2 = -np.partition(-counts, 1, axis=1)[:, :2]
    return np.asarray(top2[:, 0] - top2[:, 1])


def lemma4_mismatch_probability(histogram: np.ndarray, sigma: float) -> np.ndarray:
    """Lemma 4 (voting paper): Pr[noisy argmax ≠ clean argmax] ≤ min(1, C·e^{−(Nγ)²/(8σ²)})."""
    return np.asarray(np.exp(lemma4_log_mismatch_probability(histogram, sigma)))


def lemma4_log_mismatch_probability(histogram: np.ndarray, sigma: float) -> np.ndarray:
    """The log of :func:`lemma4_mismatch_probability`'s bound, min(0, log C − (Nγ)²/(8σ²)), (Q,).

    Computed in log space: a wide margin's probability underflows to 0 as a float, its log does not.
    """
    _check_sigma(sigma)
    counts = _check_histogram(histogram)
    margins = vote_margins(counts)
    log_q = math.log(counts.shape[1]) - margins**2 / (8.0 * sigma * sigma)
    return np.asarray(np.minimum(log_q, 0.0))


def gnmax_logq(histogram: np.ndarray, sigma: float) -> np.ndarray:
    """Proposition 7 of Papernot et al. (2018): log of a bound on Pr[GNMax ≠ clean argmax].

    log q = log Σ_{j ≠ j*} Φ̄((n* − n_j)/(√2·σ)), capped at log(1 − 1/C) (a tie, or worse,
    cannot be more likely than picking any other class), vectorised over queries.
    """
    _check_sigma(sigma)
    counts = _check_histogram(histogram)
    rows = np.arange(counts.shape[0])
    top = np.argmax(counts, axis=1)
    gaps = counts[rows, top][:, None] - counts
    log_tail = special.log_ndtr(-gaps / (math.sqrt(2.0) * sigma))
    log_tail[rows, top] = -np.inf  # exclude exactly one argmax index
    log_q = special.logsumexp(log_tail, axis=1)
    return np.asarray(np.minimum(log_q, math.log1p(-1.0 / counts.shape[1])))


def _log1mexp(x: np.ndarray) -> np.ndarray:
    """log(1 − e^x) for x < 0, stable at both ends."""
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > -math.log(2.0), np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def gnmax_rdp(log_q: np.ndarray, rho: float, orders: np.ndarray) -> np.ndarray:
    """Data-dependent RDP of a Gaussian noisy argmax, Theorem 6 of Papernot et al. (2018).

    ``rho`` is the data-independent RDP slope (the mechanism is (λ, ρλ)-RDP; ρ = s²/(2σ²)).
    Returns an array (queries × orders), each entry the minimum of the Theorem 6 bound
    (where its conditions hold, with μ₂ = √(−log q/ρ), μ₁ = μ₂ + 1) and ρλ.
    """
    log_q = np.atleast_1d(np.asarray(log_q, dtype=float))
    orders = np.asarray(orders, dtype=float)
    if np.any(orders <= 1):
        raise ValueError("Theorem 6 needs orders > 1")
    if np.any(log_q > 0):
        raise ValueError("log q must be <= 0")
    result = np.broadcast_to(rho * orders, (log_q.shape[0], orders.shape[0])).copy()
    result[np.isneginf(log_q)] = 0.0  # the output is fixed: no privacy loss at all
    finite = np.isfinite(log_q)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mu2 = np.sqrt(np.where(finite, -log_q, 0.0) / rho)
        mu1 = mu2 + 1.0
        eps1 = rho * mu1
        eps2 = rho * mu2
        log_a2 = (mu2 - 1.0) * eps2
        applicable = (
            finite
            & (mu2 > 1.0)
            & (log_q <= log_a2 - mu2 * (np.log1p(1.0 / (mu1 - 1.0)) + np.log1p(1.0 / (mu2 - 1.0))))
            & (-log_q > eps2)
        )
        if not np.any(applicable):
            return result
        rows = np.flatnonzero(applicable)
        lq = log_q[rows]
        log1q = _log1mexp(lq)
        # Per-query constants, so that each (query, order) entry costs a few flops.
        slope_a = (log1q - _log1mexp((lq + eps2[rows]) * (1.0 - 1.0 / mu2[rows])))[:, None]
        slope_b = (eps1[rows] - lq / (mu1[rows] - 1.0))[:, None]
        lam_minus_1 = orders[None, :] - 1.0
        log_s = np.logaddexp((log1q[:, None] + lam_minus_1 * slope_a), lq[:, None] + lam_minus_1 * slope_b)
        bound = log_s / lam_minus_1
        valid = (mu1[rows][:, None] > orders[None, :]) & np.isfinite(bound)
        current = result[rows]
        result[rows] = np.where(valid, np.minimum(current, bound), current)
    return np.asarray(np.maximum(result, 0.0))


def theorem5_rdp(histogram: np.ndarray, sigma: float, sensitivity: float, orders: np.ndarray) -> np.ndarray:
    """Per-query data-dependent RDP by Lemma 13 / Theorem 5 of the voting paper (queries × orders).

    q from Lemma 4; ε(2α) = α·s²/σ² (Gaussian sum, L2 sensitivity s); capped at the
    data-independent α·s²/(2σ²). Where q ≥ 1 the bound says nothing (data-independent).
    """
    _check_sigma(sigma)
    counts = _check_histogram(histogram)
    orders = np.asarray(orders, dtype=float)
    ratio = sensitivity / sigma
    rho = 0.5 * ratio * ratio  # inf, never OverflowError, for a sensitivity far above σ
    margins = vote_margins(counts)
    log_q = np.minimum(math.log(counts.shape[1]) - margins**2 / (8.0 * sigma * sigma), 0.0)[:, None]
    lam = orders[None, :]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log1q = _log1mexp(np.minimum(log_q, -1e-300))
        exponent = 0.5 * log_q + (lam - 1.0) * log1q + (2.0 * lam - 1.0) * lam * rho
        bound = -log1q + np.logaddexp(0.0, exponent) / (lam - 1.0)
    bound = np.where(np.isfinite(bound) & (log_q < 0), bound, np.inf)
    return np.asarray(np.minimum(bound, rho * lam))


@dataclass(frozen=True)
class DataDependentResult:
    """Data-dependent ε of a run's votes — **not itself private**; see :data:`LABEL`."""

    epsilon: float
    epsilon_data_dependent: float
    epsilon_data_independent: float
    delta: float
    bound: str
    sensitivity: float
    sigma: float
    queries: int
    order: float
    margins: np.ndarray = field(repr=False)
    log_q: np.ndarray = field(repr=False)
    per_query_epsilon: np.ndarray = field(repr=False)
    label: str = LABEL

    def to_dict(self, per_query: bool = True) -> dict[str, object]:
        """A JSON-ready dict (per-query arrays as lists when ``per_query``)."""
        out: dict[str, object] = {
            "epsilon": self.epsilon,
            "epsilon_data_dependent": self.epsilon_data_dependent,
            "epsilon_data_independent": self.epsilon_data_independent,
            "delta": self.delta,
            "bound": self.bound,
            "sensitivity": self.sensitivity,
            "sigma": self.sigma,
            "queries": self.queries,
            "order": self.order,
            "label": self.label,
        }
        if per_query:
            out["per_query"] = {
                "margin": self.margins.tolist(),
                "q": np.exp(self.log_q).tolist(),
                "epsilon": self.per_query_epsilon.tolist(),
            }
        return out


def data_dependent_epsilon(
    histogram: np.ndarray,
    sigma: float,
    delta: float,
    sensitivity: float = 1.0,
    bound: str = "gnmax",
    accountant: str = "exact",
    orders: tuple[float, ...] = DATA_DEPENDENT_ORDERS,
) -> DataDependentResult:
    """Data-dependent ε at ``delta`` of releasing **only** the noisy argmax of every row of ``histogram``.

    Not valid for a run that also releases the noisy sums (see the module docstring).
    Per-query RDP by ``bound`` ("gnmax" or "theorem5"), composed over queries, converted
    with dp-accounting's RDP → DP conversion; the reported ``epsilon`` is the minimum of
    that and the data-independent ε of the same Gaussian releases (``accountant``; the
    default "exact" closed form equals the tight PLD value for these pure Gaussian
    compositions and costs microseconds), so it never exceeds the data-independent ε.
    ``per_query_epsilon`` is each query alone at δ (classic conversion).
    """
    _check_sigma(sigma)
    if not 0.0 < delta < 1.0:
        raise ConfigError("delta", f"must lie in (0, 1), got {delta}")
    if not sensitivity > 0 or not math.isfinite(sensitivity):
        raise ConfigError("sensitivity", f"must be a finite number > 0, got {sensitivity}")
    if bound not in BOUNDS:
        raise ConfigError("bound", f"must be one of {', '.join(BOUNDS)}, got {bound!r}")
    counts = _check_histogram(histogram)
    order_array = np.asarray(orders, dtype=float)
    ratio = sensitivity / sigma
    rho = 0.5 * ratio * ratio  # inf, never OverflowError, for a sensitivity far above σ
    queries = counts.shape[0]

    total = np.zeros_like(order_array)
    per_query = np.empty(queries)
    log_q = np.empty(queries)
    log_inv_delta = math.log(1.0 / delta)
    for start in range(0, queries, _CHUNK):
        block = counts[start : start + _CHUNK]
        if bound == "gnmax":
            block_log_q = gnmax_logq(block, sigma)
            rdp = gnmax_rdp(block_log_q, rho, order_array)
        else:
            block_log_q = lemma4_log_mismatch_probability(block, sigma)
            rdp = theorem5_rdp(block, sigma, sensitivity, order_array)
        log_q[start : start + _CHUNK] = block_log_q
        total += rdp.sum(axis=0)
        # Each query alone, classic conversion (a readable per-query figure).
        per_query[start : start + _CHUNK] = np.min(
            rdp + log_inv_delta / (order_array - 1.0), axis=1
        )

    dependent, order = rdp_privacy_accountant.compute_epsilon(order_array, total, delta)
    independent = epsilon_for(gaussian_release_event(sigma, sensitivity, queries), delta, accountant)
    return DataDependentResult(
        epsilon=float(min(dependent, independent)),
        epsilon_data_dependent=float(dependent),
        epsilon_data_independent=float(independent),
        delta=delta,
        bound=bound,
        sensitivity=sensitivity,
        sigma=sigma,
        queries=queries,
        order=float(order),
        margins=vote_margins(counts),
        log_q=log_q,
        per_query_epsilon=per_query,
    )


# --- Confident-GNMax (Papernot et al. 2018, Algorithm 1): threshold check, then GNMax ---------

CONFIDENT_LABEL = "data-dependent (not itself private): Confident-GNMax, only labels and pass bits released"


def threshold_log_probabilities(
    histogram: np.ndarray, threshold: float, sigma: float
) -> tuple[np.ndarray, np.ndarray]:
    """(log Pr[pass], log Pr[fail]) of the threshold check max_j (n_j + Z_j) ≥ T, Z ~ N(0, σ²I), each (Q,).

    fedvote's agents noise their votes before the aggregator sees them (DESIGN.md,
    "Distributed noise"), so the check reads the noisy sums n + Z of its own noise draw;
    it fails only when every coordinate stays below T: log Pr[fail] = Σ_j log Φ((T − n_j)/σ)
    (``log_ndtr``, exact in log space) and log Pr[pass] = log(1 − Pr[fail]). With one class
    this is Papernot et al.'s Pr[max n + N(0, σ²) ≥ T] (their ``compute_logpr_answered``).
    """
    _check_sigma(sigma)
    counts = _check_histogram(histogram)
    if not math.isfinite(threshold):
        raise ConfigError("threshold", f"must be a finite number, got {threshold}")
    log_fail = np.sum(special.log_ndtr((threshold - counts) / sigma), axis=1)  # (Q,)
    log_pass = _log1mexp(np.minimum(log_fail, -1e-300))  # p ≥ 1e-300·…: rounding only raises q
    return np.asarray(log_pass), np.asarray(log_fail)


def threshold_logpr(histogram: np.ndarray, threshold: float, sigma: float) -> np.ndarray:
    """Log Pr[the threshold check passes] per query, (Q,); see :func:`threshold_log_probabilities`."""
    return threshold_log_probabilities(histogram, threshold, sigma)[0]


def threshold_rdp(log_pr_answered: np.ndarray, rho: float, orders: np.ndarray) -> np.ndarray:
    """Data-dependent RDP of the threshold check (queries × orders): Theorem 6 on one bit.

    The check releases one bit; its less likely outcome has probability q = min(p, 1 − p),
    p = Pr[pass], so Theorem 6 of Papernot et al. (2018) applies with that q and the check's
    data-independent slope ``rho`` (the check is post-processing of a Gaussian release of
    the vote sums, (λ, ρλ)-RDP with ρ = s²/(2σ₁²)) — the paper's threshold analysis (its
    code: ``compute_rdp_threshold``, there with ρ = 1/(2σ₁²) for the scalar max count).
    Capped at ρλ like :func:`gnmax_rdp`.
    """
    log_p = np.atleast_1d(np.asarray(log_pr_answered, dtype=float))
    if np.any(log_p > 0):
        raise ValueError("log Pr[answered] must be <= 0")
    log_q = np.minimum(log_p, _log1mexp(np.minimum(log_p, -1e-300)))
    return gnmax_rdp(log_q, rho, orders)


def confident_gnmax_independent_epsilon(
    threshold_sigma: np.ndarray, sigma: np.ndarray, sensitivity: float, delta: float, accountant: str
) -> float:
    """Data-independent ε of Confident-GNMax, charging every query for both steps.

    Query k is two Gaussian releases of the vote sums (check: σ₁ₖ, argmax: σ₂ₖ, both of L2
    sensitivity ``sensitivity``); whether the argmax runs is data-dependent, so the
    data-independent figure charges it on every query (as ``confident_gnmax_events`` plans).
    """
    both = np.concatenate([np.atleast_1d(threshold_sigma), np.atleast_1d(sigma)]).astype(float)  # (2K,)
    stds, counts = np.unique(both, return_counts=True)
    parts = [
        gaussian_release_event(float(std), sensitivity, int(n)) for std, n in zip(stds, counts, strict=True)
    ]
    return epsilon_for(compose_events(parts), delta, accountant)


@dataclass(frozen=True)
class ConfidentGNMaxResult:
    """Data-dependent ε of a Confident-GNMax run — **not itself private**; see :data:`CONFIDENT_LABEL`."""

    epsilon: float
    epsilon_data_dependent: float
    epsilon_data_independent: float
    delta: float
    sensitivity: float
    threshold: float
    queries_checked: int
    queries_answered: int
    order: float
    label: str = CONFIDENT_LABEL

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict of the scalars."""
        return asdict(self)


def confident_gnmax_rdp(
    histogram: np.ndarray,
    answered: np.ndarray,
    *,
    threshold: float,
    threshold_sigma: float,
    sigma: float,
    sensitivity: float,
    orders: np.ndarray,
) -> np.ndarray:
    """Total data-dependent RDP (orders,) of Confident-GNMax over the rows of ``histogram``.

    Every checked query pays the threshold check (:func:`threshold_rdp`, with ``threshold_sigma``
    the std σ₁ of the check's noise actually added); the answered ones (``answered``, (K,)
    bool) also pay GNMax with the std σ₂ = ``sigma`` actually added (:func:`gnmax_rdp`,
    Theorem 6 with Proposition 7's q). Composition as in Papernot et al. (2018), §4: the
    argmax runs only when the released bit says so, so an unanswered query costs the check
    alone.
    """
    counts = _check_histogram(histogram)
    mask = np.asarray(answered, dtype=bool).reshape(-1)
    if mask.shape[0] != counts.shape[0]:
        raise ConfigError("answered", f"needs one bit per query ({counts.shape[0]}), got {mask.shape[0]}")
    _check_sigma(threshold_sigma)
    _check_sigma(sigma)
    total = np.zeros_like(orders, dtype=float)
    rho_check = 0.5 * (sensitivity / threshold_sigma) * (sensitivity / threshold_sigma)
    rho_argmax = 0.5 * (sensitivity / sigma) * (sensitivity / sigma)
    for start in range(0, counts.shape[0], _CHUNK):
        block = counts[start : start + _CHUNK]
        log_pass, log_fail = threshold_log_probabilities(block, threshold, threshold_sigma)
        # threshold_rdp with q = min(p, 1 − p) from the exact log Pr[fail] (no rounding of 1 − p)
        total += gnmax_rdp(np.minimum(log_pass, log_fail), rho_check, orders).sum(axis=0)
        picked = block[mask[start : start + _CHUNK]]
        if picked.shape[0]:
            total += gnmax_rdp(gnmax_logq(picked, sigma), rho_argmax, orders).sum(axis=0)
    return total


def confident_gnmax_epsilon(
    histogram: np.ndarray,
    answered: np.ndarray,
    *,
    threshold: float,
    threshold_sigma: np.ndarray | float,
    sigma: np.ndarray | float,
    delta: float,
    sensitivity: float = 1.0,
    accountant: str = "exact",
    orders: tuple[float, ...] = DATA_DEPENDENT_ORDERS,
) -> ConfidentGNMaxResult:
    """Data-dependent ε at ``delta`` of a Confident-GNMax run, from its clean vote sums.

    ``histogram`` (K, C): the clean sums of every *checked* query; ``answered`` (K,): the
    released pass bits; ``threshold_sigma`` and ``sigma``: the std of the noise actually
    added to each query's check and argmax (scalars, or (K,) when responders varied —
    with distributed noise, σ·√(r/t) for r responders). RDP from
    :func:`confident_gnmax_rdp` summed over groups of equal noise, converted with
    dp-accounting's RDP → DP conversion, and capped by the data-independent ε of the same
    releases (:func:`confident_gnmax_independent_epsilon`).
    """
    if not 0.0 < delta < 1.0:
        raise ConfigError("delta", f"must lie in (0, 1), got {delta}")
    if not sensitivity > 0 or not math.isfinite(sensitivity):
        raise ConfigError("sensitivity", f"must be a finite number > 0, got {sensitivity}")
    counts = _check_histogram(histogram)
    mask = np.asarray(answered, dtype=bool).reshape(-1)
    if mask.shape[0] != counts.shape[0]:
        raise ConfigError("answered", f"needs one bit per query ({counts.shape[0]}), got {mask.shape[0]}")
    check_std = np.broadcast_to(np.asarray(threshold_sigma, dtype=float), mask.shape)  # (K,)
    argmax_std = np.broadcast_to(np.asarray(sigma, dtype=float), mask.shape)  # (K,)
    order_array = np.asarray(orders, dtype=float)
    total = np.zeros_like(order_array)
    pairs = np.unique(np.stack([check_std, argmax_std], axis=1), axis=0)  # usually one pair
    for s1, s2 in pairs:
        group = (check_std == s1) & (argmax_std == s2)
        total += confident_gnmax_rdp(
            counts[group], mask[group], threshold=threshold, threshold_sigma=float(s1), sigma=float(s2),
            sensitivity=sensitivity, orders=order_array,
        )
    dependent, order = rdp_privacy_accountant.compute_epsilon(order_array, total, delta)
    independent = confident_gnmax_independent_epsilon(check_std, argmax_std, sensitivity, delta, accountant)
    return ConfidentGNMaxResult(
        epsilon=float(min(dependent, independent)),
        epsilon_data_dependent=float(dependent),
        epsilon_data_independent=float(independent),
        delta=delta,
        sensitivity=sensitivity,
        threshold=float(threshold),
        queries_checked=int(mask.shape[0]),
        queries_answered=int(mask.sum()),
        order=float(order),
    )
