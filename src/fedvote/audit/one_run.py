"""Auditing with one run (Steinke, Nasr & Jagielski 2023, "Privacy auditing with one (1) training run").

Many training runs are too slow for the gradient methods, so their audit runs the
mechanism *once* with m canaries, each included or not by an independent fair coin
S_j (their Algorithm 1). The auditor scores every canary from what the server received,
guesses "in" for the k₊ highest scores and "out" for the k₋ lowest, abstains on the rest,
and counts v correct guesses out of r = k₊ + k₋.

**The bound** (their Theorem 5.2, with the p-value computed as in their Algorithm 3 /
Appendix D): if the mechanism is (ε, δ)-DP with respect to flipping any one coin, then

    P[v correct guesses or more] ≤ β + α·2m·δ,
    β = P[Binomial(r, p_ε) ≥ v],  p_ε = e^ε/(1 + e^ε),
    α = max_{i=1..v} P[v − i ≤ Binomial(r, p_ε) < v] / i,

so ε is refuted at confidence 1 − p whenever that probability is below p; the lower
bound is the largest such ε (found by bisection, the p-value growing as ε grows). The
bound needs neither independence between canaries nor repeated runs; its price is that
it is never tight for ε much above log(m) and that weak signals give small bounds.

**Which guesses.** fedvote tries a fixed family of r values, k₊ = k₋ = r/2 for r in
:data:`GUESS_FRACTIONS` of m, and applies a Bonferroni correction: each r is tested at
p/|family|, so the best of them still holds at the stated confidence.

**The ceiling.** Even with every guess right the bound cannot exceed :func:`ceiling` (about
1.5 for m = 200 at δ = 10⁻³, where the 2mδ term dominates; 3.7 at δ = 10⁻⁵): a claim above it
cannot be refuted by one run of that size, whatever the mechanism. Each result states it.

**What runs.** The method's own run, on record canaries: DP-FedSGD and PriFedSync their
trainer and its noise (:mod:`fedvote.audit.trainer_canaries`); DP-FedAvg, every noise mode,
its client sampling, local training, the agents' noise shares and the secure update sum or
the server's noise (:mod:`fedvote.audit.fedavg_canaries`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedvote.audit.fedavg_canaries import fedavg_trainer_audit
from fedvote.audit.result import AuditResult, AuditRun
from fedvote.audit.trainer_canaries import TRAINER, trainer_audit_scores
from fedvote.data.federation import Federation
from fedvote.errors import ConfigError
from fedvote.progress import Progress

# The guesses tried: r = fraction·m (half "in" from the top, half "out" from the bottom).
GUESS_FRACTIONS: tuple[float, ...] = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0)

# The releases (Method.audit_release) audited by one run: DP-FedAvg's own run on canary
# clients; a DP-SGD trainer's (DP-FedSGD, PriFedSync) on record canaries.
ONE_RUN_RELEASES: dict[str, str] = {"fedavg-run": "run", "trainer-run": "trainer's run"}


def p_value(canaries: int, guesses: int, correct: int, epsilon: float, delta: float) -> float:
    """P[≥ ``correct`` right of ``guesses``] for an (ε, δ)-DP mechanism (Steinke et al. 2023, Thm 5.2).

    β + α·2mδ with β, α as in the module docstring (their Algorithm 3); at most 1.
    """
    from scipy.stats import binom

    if not 0 <= correct <= guesses <= canaries:
        raise ValueError(f"need 0 <= correct <= guesses <= canaries, got {correct}, {guesses}, {canaries}")
    if not (epsilon >= 0 and 0.0 <= delta <= 1.0):
        raise ValueError(f"need epsilon >= 0 and delta in [0, 1], got {epsilon}, {delta}")
    p = 1.0 / (1.0 + math.exp(-epsilon))  # accuracy of ε-DP randomized response
    beta = float(binom.sf(correct - 1, guesses, p))
    alpha = 0.0
    if correct > 0 and delta > 0:
        shifts = np.arange(1, correct + 1)  # i = 1..v
        below = binom.cdf(correct - 1, guesses, p)
        window = below - binom.cdf(correct - 1 - shifts, guesses, p)  # P[v − i ≤ B < v], (v,)
        alpha = float(np.max(window / shifts))
    return min(beta + alpha * 2 * canaries * delta, 1.0)


def epsilon_lower_bound(
    canaries: int, guesses: int, correct: int, delta: float, significance: float
) -> float:
    """The largest ε refuted at level ``significance`` by ``correct`` of ``guesses`` (0 if none).

    Bisection on ε: ``p_value`` increases with ε; the answer is within 1e-6 below the exact one.
    """
    if not 0.0 < significance < 1.0:
        raise ValueError(f"significance must lie in (0, 1), got {significance}")
    if p_value(canaries, guesses, correct, 0.0, delta) >= significance:
        return 0.0
    low, high = 0.0, 1.0
    while p_value(canaries, guesses, correct, high, delta) < significance:
        low, high = high, 2 * high
        if high > 1e3:
            return low
    while high - low > 1e-6:
        middle = (low + high) / 2
        if p_value(canaries, guesses, correct, middle, delta) < significance:
            low = middle
        else:
            high = middle
    return low


def ceiling(canaries: int, delta: float, confidence: float) -> float:
    """The largest bound :func:`audit_guesses` can give for ``canaries``: every guess right, at each r."""
    significance = (1.0 - confidence) / len(GUESS_FRACTIONS)
    best = 0.0
    for fraction in GUESS_FRACTIONS:
        guesses = 2 * min(max(1, int(fraction * canaries) // 2), canaries // 2)
        best = max(best, epsilon_lower_bound(canaries, guesses, guesses, delta, significance))
    return best


@dataclass(frozen=True)
class OneRunOutcome:
    """The best guess count of the family and its bound; ``guesses``/``correct`` behind it."""

    epsilon_lower_bound: float
    guesses: int
    correct: int
    canaries: int


def audit_guesses(
    scores: np.ndarray, included: np.ndarray, *, delta: float, confidence: float
) -> OneRunOutcome:
    """Guess from ``scores`` (m,) (higher: "in"), check against the coins ``included`` (m,), bound ε.

    Each r of :data:`GUESS_FRACTIONS` is tested at (1 − confidence)/|family| (Bonferroni).
    """
    scores = np.asarray(scores, dtype=np.float64)
    m = scores.shape[0]
    order = np.argsort(scores, kind="stable")  # ascending
    significance = (1.0 - confidence) / len(GUESS_FRACTIONS)
    best = OneRunOutcome(0.0, 0, 0, m)
    for fraction in GUESS_FRACTIONS:
        half = max(1, int(fraction * m) // 2)
        if 2 * half > m:
            half = m // 2
        guessed_in, guessed_out = order[m - half :], order[:half]
        correct = int(np.sum(included[guessed_in]) + np.sum(~included[guessed_out]))
        bound = epsilon_lower_bound(m, 2 * half, correct, delta, significance)
        if bound > best.epsilon_lower_bound:
            best = OneRunOutcome(bound, 2 * half, correct, m)
    return best


def one_run_audit(run: AuditRun, method: Any, federation: Federation, progress: Progress) -> AuditResult:
    """The one-run audit of a gradient method (see the module docstring), ``run.trials`` canaries."""
    config, level, canaries = run.config, run.level, run.trials
    if canaries < 2:
        raise ConfigError("trials", f"a one-run audit needs at least 2 canaries, got {canaries}")
    noise_seed = config.privacy.noise_seed
    if method.audit_release == "fedavg-run":  # every noise mode: the method's own run, on canary clients
        record_canaries = fedavg_trainer_audit(
            method, federation, level, canaries, seed=config.seed, noise_seed=noise_seed,
            secure_sum=config.privacy.secure_sum, secure_noise=config.privacy.secure_noise, progress=progress,
        )  # fmt: skip
    else:  # DP-FedSGD, PriFedSync: the method's own run, its trainer, on record canaries
        if level != "instance":  # record canaries are replace-one neighbours
            raise ConfigError("level", f"{method.name}'s trainer is audited at the instance level only")
        record_canaries = trainer_audit_scores(
            method, federation, canaries, seed=config.seed, noise_seed=noise_seed, progress=progress
        )
    scores, included = record_canaries.scores, record_canaries.canaries.included
    description, mechanism = record_canaries.description, record_canaries.details
    outcome = audit_guesses(scores, included, delta=config.privacy.delta, confidence=run.confidence)
    score = (
        "the change of W[y+, k] - W[y-, k] on the canary's coordinate over the rounds the server received "
        "its client's update"
        if mechanism.get("code_under_audit") == TRAINER
        else "the canary's log-likelihood ratio, over the rounds, of (v[y+, k] - v[y-, k])/sqrt(2) of what "
        "the claim's adversary saw (the secure sum, q·N·(θ' - θ), or unmasked its own updates)"
    )
    return run.result(
        outcome.epsilon_lower_bound,
        mode="one-run",
        canary=description,
        test=(
            f"one run (Steinke, Nasr & Jagielski 2023, Thm 5.2): score = {score}; guess 'in' for the "
            f"top r/2, 'out' for the bottom r/2, r from a fixed family ({len(GUESS_FRACTIONS)} values, "
            "Bonferroni)"
        ),
        details={
            "canaries": outcome.canaries,
            "guesses": outcome.guesses,
            "correct": outcome.correct,
            "ceiling": ceiling(outcome.canaries, config.privacy.delta, run.confidence),
            **mechanism,
        },
    )
