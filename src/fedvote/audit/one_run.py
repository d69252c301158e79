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

**What runs.** DP-FedSGD and PriFedSync: the method's own run, its trainer and its noise, on
record canaries (:mod:`fedvote.audit.trainer_canaries`). DP-FedAvg: crafted updates through
the agents' exit (:meth:`Agent.release` with :meth:`DpFedAvg.noise_share`) in a loop written
here — an accounting check only: the round's training and the transport's secure sum are not
run (:data:`ACCOUNTING_CHECK`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedvote.agents.agent import Agent, ArrayOutput
from fedvote.audit.canaries import UpdateCanaries, draw_update_canaries
from fedvote.audit.distinguishers import subsampled_gaussian_scores, visible_gaussian_scores
from fedvote.audit.result import AuditResult, AuditRun
from fedvote.audit.trainer_canaries import TRAINER, trainer_audit_scores
from fedvote.data.federation import Federation, LabeledData
from fedvote.errors import ConfigError
from fedvote.methods.dp_fedavg import DpFedAvg
from fedvote.methods.dp_fedsgd import DpFedSgd
from fedvote.methods.gradient import privacy_generator
from fedvote.methods.prifedsync import PriFedSync
from fedvote.models.local_training import LocalUpdates
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.transport.base import agent_noise_seeds

# The guesses tried: r = fraction·m (half "in" from the top, half "out" from the bottom).
GUESS_FRACTIONS: tuple[float, ...] = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0)

ONE_RUN_METHODS: tuple[type, ...] = (DpFedAvg, DpFedSgd, PriFedSync)

# What each one-run audit executes (result ``details.code_under_audit``, the audit table's column).
# DP-FedAvg's releases its crafted updates through the agents' own exit (Agent.release with
# DpFedAvg.noise_share) but not through a training round or the transport's secure sum.
ACCOUNTING_CHECK = "accounting check only (crafted updates through Agent.release; no training round)"


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


def _canary_agents(count: int, noise_seed: int | None) -> list[Agent]:
    """``count`` agents holding no records (a canary's update is crafted), each with its own noise stream."""
    import secrets

    entropy = noise_seed if noise_seed is not None else secrets.randbits(128)
    empty = LabeledData(np.zeros((0, 1), dtype=np.float32), np.zeros(0, dtype=np.int64))
    return [
        Agent(
            agent_id=j,
            data=empty,
            public_features=np.zeros((0, 1), dtype=np.float32),
            num_classes=2,
            noise_rng=np.random.default_rng(agent_noise_seeds(entropy, j)),
            seed=j,
        )
        for j in range(count)
    ]


def dp_fedavg_releases(
    method: DpFedAvg, canaries: UpdateCanaries, noise_seed: int | None, progress: Progress = NO_PROGRESS
) -> np.ndarray:
    """T rounds of DP-FedAvg's secure update sum over a federation of m canary agents, (T, m).

    Round t: each agent's own coin (probability q, drawn as the method draws it) says whether
    it takes part; one that does releases its crafted update (±S·e_j, or zeros) through
    :meth:`Agent.release` (validated against the clip norm S) with the method's share
    :meth:`DpFedAvg.noise_share` (σS/√m), any other its noise share alone
    (:meth:`Agent.noise_share`); the server receives the sum. The update lives on the
    canaries' m coordinates (the model's other coordinates carry independent noise only).
    ``noise="server"``: the sampled agents' shares are 0 and the sum is what the method's
    own :meth:`DpFedAvg.aggregate` releases (θ + (Σ + N(0, σ²S²))/(qN), its noise from a
    privacy generator), times qN — what every observer of the models can compute.
    """
    if method.noise == "server":
        return _server_noise_releases(method, canaries, noise_seed, progress)
    if method.noise != "distributed":
        raise ConfigError("noise", f"use unmasked_releases for {method.noise!r}")
    m = canaries.count
    if method.responders(m) > m:  # shares σS/√t from fewer than t agents would carry less than σS
        raise ConfigError("trials", f"{m} canary agents are fewer than t = {method.min_responders}")
    agents = _canary_agents(m, noise_seed)
    coins = privacy_generator(noise_seed, 0xA0D1)
    expected = ArrayOutput("update", (m,), norm_bound=method.clip_norm)
    received = np.zeros((method.rounds, m))
    with progress.step("one run of DP-FedAvg with canary agents", total=method.rounds) as bar:
        for t in range(method.rounds):
            chosen = coins.random(m) < method.sampling_rate  # Poisson sampling, the agents' coins
            share = method.noise_share(int(chosen.sum()), m)
            for j, agent in enumerate(agents):
                if chosen[j]:
                    received[t] += agent.release(canaries.contribution(j), share, expected)
                else:
                    received[t] += agent.noise_share((m,), share)
            bar.advance()
    return received


def _server_noise_releases(
    method: DpFedAvg, canaries: UpdateCanaries, noise_seed: int | None, progress: Progress
) -> np.ndarray:
    """:func:`dp_fedavg_releases` for ``noise="server"`` (Algorithm 3, trusted server), (T, m)."""
    m = canaries.count
    agents = _canary_agents(m, noise_seed)
    coins = privacy_generator(noise_seed, 0xA0D1)
    server_rng = privacy_generator(noise_seed, 0x5E7E)
    expected = ArrayOutput("update", (m,), norm_bound=method.clip_norm)
    denominator = method.sampling_rate * m
    received = np.zeros((method.rounds, m))
    with progress.step("one run of DP-FedAvg (server noise) with canary agents", total=method.rounds) as bar:
        for t in range(method.rounds):
            chosen = np.flatnonzero(coins.random(m) < method.sampling_rate)  # the agents' coins
            share = method.noise_share(int(chosen.size), m)  # 0: the server adds the noise
            rows = [agents[j].release(canaries.contribution(int(j)), share, expected) for j in chosen]
            updates = np.stack(rows) if rows else np.zeros((0, m))  # (m_t, m)
            ones = np.ones(chosen.size, dtype=np.int64)
            sent = LocalUpdates(agent_ids=chosen, updates=updates, records=ones)
            released = method.aggregate(np.zeros(m), sent, server_rng, m)  # θ_{t+1} − θ_t, θ_t = 0
            received[t] = released * denominator
            bar.advance()
    return received


def unmasked_releases(
    method: DpFedAvg, canaries: UpdateCanaries, noise_seed: int | None, progress: Progress = NO_PROGRESS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """T rounds of ``noise="distributed-unmasked"`` (Algorithm 5 as written) over m canary agents.

    The server sees every sampled agent's noisy update (its release through
    :meth:`Agent.release` with the share σS/√m_t of :meth:`DpFedAvg.noise_share`) and who
    was sampled. Returns canary j's coordinate of its own update per round (R, m), the
    sample (R, m) and each round's share std (R,). The accounting assumes m_t ≤ N (the
    planned number of agents): a round with more sampled canaries is refused.
    """
    if method.num_agents is None:
        raise ConfigError("noise", "distributed-unmasked needs the number of agents N for its ε")
    m = canaries.count
    agents = _canary_agents(m, noise_seed)
    coins = privacy_generator(noise_seed, 0xA0D1)
    expected = ArrayOutput("update", (m,), norm_bound=method.clip_norm)
    received = np.zeros((method.rounds, m))
    sampled = np.zeros((method.rounds, m), dtype=bool)
    stds = np.zeros(method.rounds)
    with progress.step("one run of DP-FedAvg (unmasked) with canary agents", total=method.rounds) as bar:
        for t in range(method.rounds):
            chosen = coins.random(m) < method.sampling_rate
            count = int(chosen.sum())
            if count > method.num_agents:
                problem = f"{count} canaries sampled in one round exceed N = {method.num_agents}"
                raise ConfigError("trials", problem)
            stds[t] = method.noise_share(count, method.num_agents)
            sampled[t] = chosen
            for j in np.flatnonzero(chosen):
                received[t, j] = agents[j].release(canaries.contribution(int(j)), stds[t], expected)[j]
            bar.advance()
    return received, sampled, stds


def one_run_audit(run: AuditRun, method: Any, federation: Federation, progress: Progress) -> AuditResult:
    """The one-run audit of a gradient method (see the module docstring), ``run.trials`` canaries."""
    config, level, canaries = run.config, run.level, run.trials
    if canaries < 2:
        raise ConfigError("trials", f"a one-run audit needs at least 2 canaries, got {canaries}")
    noise_seed = config.privacy.noise_seed
    coin_rng = privacy_generator(noise_seed, 0xCA7A)
    if isinstance(method, DpFedAvg) and method.noise == "distributed-unmasked":
        drawn = draw_update_canaries(level, canaries, method.clip_norm, coin_rng)
        included, description = drawn.included, drawn.description()
        own, sampled, stds = unmasked_releases(method, drawn, noise_seed, progress)  # (T, m), (T, m), (T,)
        scores = visible_gaussian_scores(
            own, sampled, stds, shift=method.clip_norm, antipodal=level == "instance"
        )
        mechanism = {
            "rounds": int(method.rounds),
            "sampling_rate": float(method.sampling_rate),
            "clip_norm": float(method.clip_norm),
            "noise": method.noise,
            "test_kind": "Gaussian LR of the canary's own noisy updates in the rounds it was seen sampled",
            "code_under_audit": ACCOUNTING_CHECK,
        }
    elif isinstance(method, DpFedAvg):
        drawn = draw_update_canaries(level, canaries, method.clip_norm, coin_rng)
        included, description = drawn.included, drawn.description()
        received = dp_fedavg_releases(method, drawn, noise_seed, progress)  # (T, m)
        scores = subsampled_gaussian_scores(
            received,
            shift=method.clip_norm,
            noise_std=method.sigma * method.clip_norm,
            rate=method.sampling_rate,
            antipodal=level == "instance",
        )
        mechanism = {
            "rounds": int(method.rounds),
            "sampling_rate": float(method.sampling_rate),
            "clip_norm": float(method.clip_norm),
            "noise": method.noise,
            "code_under_audit": ACCOUNTING_CHECK,
        }
    else:  # DP-FedSGD, PriFedSync: the method's own run, its trainer, on record canaries
        if level != "instance":  # record canaries are replace-one neighbours
            raise ConfigError("level", f"{method.name}'s trainer is audited at the instance level only")
        record_canaries = trainer_audit_scores(
            method, federation, canaries, seed=config.seed, noise_seed=noise_seed, progress=progress
        )
        scores, included = record_canaries.scores, record_canaries.canaries.included
        description = record_canaries.description
        mechanism = record_canaries.details
    outcome = audit_guesses(scores, included, delta=config.privacy.delta, confidence=run.confidence)
    score = (
        "the change of W[y+, k] - W[y-, k] on the canary's coordinate over the rounds the server received "
        "its client's update"
        if mechanism.get("code_under_audit") == TRAINER
        else "the canary's log-likelihood ratio of the subsampled-Gaussian rounds it was observed in"
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
