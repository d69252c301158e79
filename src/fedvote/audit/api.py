"""``fedvote.audit.audit``: an empirical ε lower bound for a method at one level.

The audit plans the method exactly as ``fedvote run`` would (the same settings, the same
calibration of σ to ``--epsilon``), takes the ε the run would claim at that level from the
method's own events and accountant, builds the neighbouring federations of the level's
adjacency around a worst-case canary (:mod:`fedvote.audit.canaries`), releases through the
run's own code many times (or, for the gradient methods, once with many canaries:
:mod:`fedvote.audit.one_run`), and turns the distinguishing test's outcome into a lower
bound that holds with the stated confidence (:mod:`fedvote.audit.bounds`). A lower bound
above the claimed ε means the claim is wrong: the mechanism leaks more than it says.
"""

from __future__ import annotations

import math
import time
from typing import Any

from fedvote.audit.bounds import DEFAULT_CONFIDENCE, audit_scores
from fedvote.audit.canaries import LEVELS
from fedvote.audit.result import AuditResult, AuditRun
from fedvote.config import RunConfig
from fedvote.errors import ConfigError
from fedvote.progress import NO_PROGRESS, Progress

# Selection split of the multi-trial audit (the threshold is chosen on it): 30 %; a normal fit
# of the selection scores needs few trials, and the rest evaluate (bounds._select).
SELECTION_FRACTION = 0.3

# The releases (Method.audit_release) audited by many releases on each neighbour: the vote
# sums (fedvote.audit.vote_release) and FedAUX's heads (fedvote.audit.head_release).
MULTI_TRIAL_RELEASES: dict[str, str] = {
    "teacher-votes": "vote sums",
    "knn-votes": "kNN vote sums",
    "weighted-votes": "weighted vote sums",
    "heads": "heads",
}


def audit(
    method: str = "pate-fl",
    level: str = "agent",
    trials: int = 20_000,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    progress: Progress = NO_PROGRESS,
    **settings: Any,
) -> AuditResult:
    """Audit ``method`` at ``level`` with ``trials`` releases per neighbour (or canaries, one-run).

    ``settings`` are :func:`fedvote.run`'s keywords (``epsilon``, ``delta``, ``seed``,
    ``noise_seed``, ``agents``, the method's options, ...), validated the same way; σ is
    calibrated to ``epsilon`` as a run calibrates it.
    """
    from fedvote.runner import build_config

    config = build_config(method=method, **settings)
    return audit_config(config, level, trials, confidence=confidence, progress=progress)


def audit_config(
    config: RunConfig,
    level: str,
    trials: int,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    progress: Progress = NO_PROGRESS,
) -> AuditResult:
    """:func:`audit` of an already validated run config."""
    from fedvote.audit.one_run import ONE_RUN_RELEASES, one_run_audit
    from fedvote.methods import check_method
    from fedvote.privacy.accountant import epsilon_bound
    from fedvote.runner import make_federation, plan, prepare_public
    from fedvote.transport.capabilities import LabelRelease

    _check_arguments(level, trials, confidence)
    check_method(config)
    started = time.perf_counter()
    federation = prepare_public(config, make_federation(config))
    method = plan(config, federation.public_metadata())
    delta = config.privacy.delta
    events = method.planned_events()
    # each level's ε as the run reports it: RDP's bound (or ∞) where its PLD cannot be built
    claimed = {name: epsilon_bound(events.at(name), delta, config.privacy.accountant) for name in LEVELS}
    if not any(math.isfinite(value) for value in claimed.values()):
        raise ConfigError("method", f"{method.name} is not private at any level; nothing to audit")
    if not math.isfinite(claimed[level]):
        raise ConfigError("level", f"{method.name} claims no finite ε at the {level} level; nothing to audit")
    if config.privacy.secure_noise and not method.audit_secure_noise:  # Method.audit_secure_noise
        raise ConfigError("secure_noise", f"is audited for {secure_noise_audits()} only, not {method.name}")
    run = AuditRun(
        config, method.name, float(method.sigma), level, claimed[level], confidence, trials, started
    )
    if LabelRelease in method.requirements():  # --release labels: what leaves is labels, not sums
        return _label_audit(run, method, federation, progress)
    if method.audit_release in MULTI_TRIAL_RELEASES:  # Method.audit_release
        return _multi_trial_audit(run, method, federation, progress)
    if method.audit_release in ONE_RUN_RELEASES:
        return one_run_audit(run, method, federation, progress)
    raise ConfigError("method", f"no audit is defined for {method.name}")


def audit_releases() -> dict[str, str]:
    """Every release the audit reproduces (a method's :attr:`~fedvote.methods.base.Method.audit_release`).

    Each named with what it tests: the vote sums or heads, multi-trial; a run, one-run.
    """
    from fedvote.audit.one_run import ONE_RUN_RELEASES

    return {**MULTI_TRIAL_RELEASES, **ONE_RUN_RELEASES}


def secure_noise_audits() -> str:
    """What is audited on the secure-noise path: each such method's name and its release, in one phrase."""
    from fedvote.methods import METHODS

    releases = audit_releases()
    audited = [
        f"{name}'s {releases[method.audit_release]}"
        for name, method in sorted(METHODS.items())
        if method.audit_secure_noise and method.audit_release is not None
    ]
    return " and ".join(audited)


def _check_arguments(level: str, trials: int, confidence: float) -> None:
    if level not in LEVELS:
        raise ConfigError("level", f"must be one of {', '.join(LEVELS)}, got {level!r}")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 10:
        raise ConfigError("trials", f"must be an integer >= 10, got {trials!r}")
    if not 0.0 < confidence < 1.0:
        raise ConfigError("confidence", f"must lie in (0, 1), got {confidence}")


def _multi_trial_audit(run: AuditRun, method: Any, federation: Any, progress: Progress) -> AuditResult:
    """Release ``trials`` times on each neighbour, test, bound: the voting methods and the FedAUX heads."""
    import numpy as np

    from fedvote.audit.head_release import build_head_release
    from fedvote.audit.runner import release_scores
    from fedvote.audit.vote_release import VoteRelease, build_vote_release

    config, level, trials = run.config, run.level, run.trials
    release: VoteRelease | Any
    if method.audit_release == "heads":
        release = build_head_release(method, federation, level, noise_seed=config.privacy.noise_seed)
        rows, description = 1, release.description
        details: dict[str, Any] = {"noise_stds": list(release.stds)}
    else:
        release = build_vote_release(
            method,
            federation,
            level,
            seed=config.seed,
            noise_seed=config.privacy.noise_seed,
            progress=progress,
            secure_noise=config.privacy.secure_noise,
        )
        rows, description = int(release.clean.shape[1]), release.canary.description
        details = {
            "queries": rows,
            "agents": int(release.clean.shape[0]),
            "noise_share_std": release.noise_std,
            "noise_source": "csprng-discrete-gaussian" if config.privacy.secure_noise else "pcg64",
            "canary_sensitivity_per_query": float(np.max(np.linalg.norm(release.canary.difference, axis=1))),
        }
    scores_in, scores_out = release_scores(release, trials, rows, progress)
    return _threshold_result(
        run,
        scores_in,
        scores_out,
        canary=description,
        test="likelihood-ratio (Neyman-Pearson) test: <received - known baseline, canary difference> >= "
        "threshold, the threshold and the inequality ({direction}) chosen on a separate "
        f"{SELECTION_FRACTION:.0%} of the trials, Clopper-Pearson on the rest",
        details=details,
    )


def _threshold_result(
    run: AuditRun,
    scores_in: Any,
    scores_out: Any,
    *,
    canary: str,
    test: str,
    details: dict[str, Any],
) -> AuditResult:
    """The threshold test on the scores of D and D' (:func:`audit_scores`) as an :class:`AuditResult`.

    ``test`` describes it; ``{direction}`` in it becomes the inequality chosen.
    """
    outcome = audit_scores(
        scores_in,
        scores_out,
        delta=run.config.privacy.delta,
        confidence=run.confidence,
        selection_fraction=SELECTION_FRACTION,
    )
    counts = outcome.counts
    return run.result(
        outcome.epsilon_lower_bound,
        mode="multi-trial",
        canary=canary,
        test=test.replace("{direction}", outcome.direction),
        details={
            **details,
            "threshold": outcome.threshold,
            "direction": outcome.direction,
            "true_positives": counts.true_positives,
            "positives": counts.positives,
            "false_positives": counts.false_positives,
            "negatives": counts.negatives,
        },
    )


def _label_audit(run: AuditRun, method: Any, federation: Any, progress: Progress) -> AuditResult:
    """PATE-FL's label release (Confident-GNMax), tested by per-query likelihood ratios.

    Pilot releases fix the ratios; fresh releases are scored (:mod:`fedvote.audit.label_release`).
    """
    import numpy as np

    from fedvote.audit.label_release import LabelRelease, outcome_log_ratios, outcome_scores
    from fedvote.audit.runner import CHUNK_ROWS
    from fedvote.audit.vote_release import build_vote_release

    config, trials = run.config, run.trials
    sums = build_vote_release(
        method, federation, run.level, seed=config.seed, noise_seed=config.privacy.noise_seed,
        progress=progress,
    )
    num_agents, queries = int(sums.clean.shape[0]), int(sums.clean.shape[1])
    release = LabelRelease.of(
        sums,
        threshold=method.threshold_for(num_agents),
        threshold_sigma=method.threshold_sigma,
        sigma=method.sigma,
        min_responders=method.min_responders,
    )
    chunk = max(1, CHUNK_ROWS // queries)

    def outcomes(canary_in: bool, count: int) -> np.ndarray:  # (count, Q), chunk by chunk
        parts = [release.outcomes(canary_in, min(chunk, count - s)) for s in range(0, count, chunk)]
        return np.concatenate(parts)

    pilot = max(1_000, trials // 2)
    with progress.step("pilot releases (likelihood ratios)", total=2) as bar:
        pilot_in, pilot_out = outcomes(True, pilot), outcomes(False, pilot)
        bar.advance(2)
    ratios = outcome_log_ratios(pilot_in, pilot_out, release.num_classes)  # (Q, C + 1), fixed from here on
    with progress.step("releasing on D and D'", total=2) as bar:
        received_in, received_out = outcomes(True, trials), outcomes(False, trials)
        bar.advance(2)
    return _threshold_result(
        run,
        outcome_scores(received_in, ratios),
        outcome_scores(received_out, ratios),
        canary=sums.canary.description + "; released as Confident-GNMax pass bits and labels",
        test="likelihood-ratio test on the released outcomes (not answered, or the label) of the Q "
        f"queries: sum of per-query log P_D/P_D' estimated from {pilot} separate pilot releases "
        "of each neighbour; threshold and inequality ({direction}) chosen on a separate "
        f"{SELECTION_FRACTION:.0%} of the scored trials, Clopper-Pearson on the rest",
        details={
            "release": "labels",
            "queries": queries,
            "agents": num_agents,
            "threshold_votes": release.threshold,
            "threshold_sigma": float(method.threshold_sigma),
            "pilot_trials": pilot,
            "answered_fraction_in": float(np.mean(received_in != -1)),
            "answered_fraction_out": float(np.mean(received_out != -1)),
        },
    )
