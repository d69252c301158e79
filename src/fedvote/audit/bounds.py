"""Clopper–Pearson intervals and the conversion of a test's error counts into an ε lower bound.

An (ε, δ)-DP mechanism M limits every test that tells M(D) from M(D') (Kairouz, Oh &
Viswanath 2015; the auditing form of Jagielski, Ullman & Oprea 2020, §3, and Nasr et al.
2021, eq. (2)): for the test's rejection region R, with TPR = P[M(D) ∈ R] and
FPR = P[M(D') ∈ R],

    TPR ≤ e^ε·FPR + δ   and   1 − FPR ≤ e^ε·(1 − TPR) + δ,

so ε ≥ log((TPR − δ)/FPR) and ε ≥ log((TNR − δ)/FNR). The rates are estimated from
trials; a bound that holds with stated confidence puts a lower confidence bound on the
numerator's rate and an upper one on the denominator's. Both must hold at once: each is a
one-sided Clopper–Pearson bound at level α/2, so by the union bound the ε lower bound
holds with probability at least 1 − α (95 % by default). Those one-sided bounds are the
ends of the two-sided (1 − α) Clopper–Pearson interval.

**One threshold, chosen on other trials.** A test with many thresholds is many tests:
taking the best of them on the same counts would overstate the confidence. fedvote
chooses the threshold (and which of the two inequalities to use) on a *selection* split
of the trials and evaluates that one test, once, on the disjoint *evaluation* split
(:func:`audit_scores`); the stated confidence is then exact for the evaluation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# The confidence every audit states unless told otherwise.
DEFAULT_CONFIDENCE = 0.95


def clopper_pearson(
    successes: int, trials: int, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[float, float]:
    """The two-sided Clopper–Pearson interval (lower, upper) of a binomial rate at ``confidence``.

    Clopper & Pearson (1934): lower = Beta(α/2; k, n − k + 1), upper = Beta(1 − α/2; k + 1, n − k)
    quantiles, α = 1 − confidence; lower = 0 at k = 0 and upper = 1 at k = n. Each end is a
    one-sided bound at level α/2 (the exact inversion of the binomial tail).
    """
    from scipy.stats import beta

    if not (isinstance(trials, int | np.integer) and trials >= 1):
        raise ValueError(f"trials must be a positive integer, got {trials!r}")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must lie in [0, {trials}], got {successes}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    alpha = 1.0 - confidence
    k, n = int(successes), int(trials)
    lower = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    upper = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lower, upper


@dataclass(frozen=True)
class ErrorCounts:
    """The outcome of one test on ``positives`` trials of D and ``negatives`` trials of D'.

    ``true_positives`` of the D trials and ``false_positives`` of the D' trials fell in the
    rejection region ("the canary is in").
    """

    true_positives: int
    positives: int
    false_positives: int
    negatives: int

    def epsilon_lower_bound(self, delta: float, confidence: float = DEFAULT_CONFIDENCE) -> float:
        """max(log((TPR_lo − δ)/FPR_hi), log((TNR_lo − δ)/FNR_hi), 0) at joint ``confidence``.

        TPR_lo, TNR_lo are lower and FPR_hi, FNR_hi upper Clopper–Pearson bounds, each at
        one-sided level (1 − confidence)/2, so both ends of each ratio hold together with
        probability ≥ ``confidence`` (union bound). Of the two inequalities only the one
        chosen beforehand may be read at that confidence; :func:`audit_scores` picks it on a
        separate split.
        """
        return max(self.forward_bound(delta, confidence), self.backward_bound(delta, confidence), 0.0)

    def forward_bound(self, delta: float, confidence: float = DEFAULT_CONFIDENCE) -> float:
        """log((TPR_lo − δ)/FPR_hi) (−inf when the numerator is not positive)."""
        tpr_lo, _ = clopper_pearson(self.true_positives, self.positives, confidence)
        _, fpr_hi = clopper_pearson(self.false_positives, self.negatives, confidence)
        return _log_ratio(tpr_lo - delta, fpr_hi)

    def backward_bound(self, delta: float, confidence: float = DEFAULT_CONFIDENCE) -> float:
        """log((TNR_lo − δ)/FNR_hi) (−inf when the numerator is not positive)."""
        tnr_lo, _ = clopper_pearson(self.negatives - self.false_positives, self.negatives, confidence)
        _, fnr_hi = clopper_pearson(self.positives - self.true_positives, self.positives, confidence)
        return _log_ratio(tnr_lo - delta, fnr_hi)


def _log_ratio(numerator: float, denominator: float) -> float:
    if numerator <= 0.0:
        return -math.inf
    return math.log(numerator / denominator)


@dataclass(frozen=True)
class ThresholdAudit:
    """The test chosen on the selection split and its evaluation: the audit's ε lower bound.

    ``threshold``: scores ≥ it say "D" (the canary is in). ``direction``: ``"tpr/fpr"`` or
    ``"tnr/fnr"``, the inequality read. ``counts``: the evaluation split's counts.
    """

    threshold: float
    direction: str
    counts: ErrorCounts
    epsilon_lower_bound: float
    confidence: float


# Candidate thresholds tried on the selection split: its scores' quantiles on this grid.
_CANDIDATES = 400


def audit_scores(
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    *,
    delta: float,
    confidence: float = DEFAULT_CONFIDENCE,
    selection_fraction: float = 0.3,
) -> ThresholdAudit:
    """The ε lower bound of the threshold test on scores of D (``scores_in``) and D' (``scores_out``).

    Higher scores mean "D". The first ``selection_fraction`` of each array chooses the
    threshold and the inequality that maximise the bound there (at the same confidence); the
    rest, disjoint and independent, evaluates that single test (:meth:`ErrorCounts.epsilon_lower_bound`).
    The trials must be i.i.d. within each array (each is one release of the mechanism).
    """
    scores_in = np.asarray(scores_in, dtype=np.float64).reshape(-1)
    scores_out = np.asarray(scores_out, dtype=np.float64).reshape(-1)
    if not 0.0 < selection_fraction < 1.0:
        raise ValueError(f"selection_fraction must lie in (0, 1), got {selection_fraction}")
    cut_in = int(round(selection_fraction * scores_in.shape[0]))
    cut_out = int(round(selection_fraction * scores_out.shape[0]))
    if min(cut_in, cut_out, scores_in.shape[0] - cut_in, scores_out.shape[0] - cut_out) < 1:
        raise ValueError("need at least one selection and one evaluation trial on each side")
    threshold, direction = _select(scores_in[:cut_in], scores_out[:cut_out], delta, confidence)
    evaluation_in, evaluation_out = scores_in[cut_in:], scores_out[cut_out:]
    counts = ErrorCounts(
        true_positives=int(np.sum(evaluation_in >= threshold)),
        positives=int(evaluation_in.shape[0]),
        false_positives=int(np.sum(evaluation_out >= threshold)),
        negatives=int(evaluation_out.shape[0]),
    )
    bound = counts.forward_bound if direction == "tpr/fpr" else counts.backward_bound
    return ThresholdAudit(
        threshold=threshold,
        direction=direction,
        counts=counts,
        epsilon_lower_bound=max(bound(delta, confidence), 0.0),
        confidence=confidence,
    )


def _select(
    scores_in: np.ndarray, scores_out: np.ndarray, delta: float, confidence: float
) -> tuple[float, str]:
    """The (threshold, direction) that promises the largest bound, from the selection scores alone.

    Each side's scores are summarised by a normal fit (mean, std) — the likelihood-ratio
    statistic of a Gaussian release is exactly normal under both neighbours — and every
    candidate threshold is scored by the bound an evaluation split of the same size would give
    at the fitted rates. Choosing from fitted rates rather than raw tail counts avoids the
    winner's curse of picking a threshold whose few selection counts were lucky; any rule that
    reads only the selection split keeps the evaluation's confidence exact.
    """
    from scipy.stats import norm

    pooled = np.concatenate([scores_in, scores_out])
    candidates = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, _CANDIDATES)))
    spread = max(float(np.std(pooled)), np.finfo(float).tiny)
    fitted = [
        (float(np.mean(side)), max(float(np.std(side)), 1e-6 * spread)) for side in (scores_in, scores_out)
    ]
    rate_in = norm.sf(candidates, *fitted[0])  # (K,) fitted P[score >= threshold] under D
    rate_out = norm.sf(candidates, *fitted[1])  # under D'
    n_in, n_out = scores_in.shape[0], scores_out.shape[0]
    best = (-math.inf, float(np.median(pooled)), "tpr/fpr")
    for threshold, p_in, p_out in zip(candidates, rate_in, rate_out, strict=True):
        counts = ErrorCounts(int(round(p_in * n_in)), n_in, int(round(p_out * n_out)), n_out)
        for direction, value in (
            ("tpr/fpr", counts.forward_bound(delta, confidence)),
            ("tnr/fnr", counts.backward_bound(delta, confidence)),
        ):
            if value > best[0]:
                best = (value, float(threshold), direction)
    return best[1], best[2]
