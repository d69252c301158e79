"""The numbers behind the report's plots, computed from a run's result and analysis arrays.

All ε here come from :mod:`fedvote.privacy` (the run's accountant and the data-dependent
analysis); nothing is accounted by hand.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from dp_accounting.dp_event import DpEvent

from fedvote.analysis import gaussian_accountant
from fedvote.config import RunConfig
from fedvote.errors import ConfigError
from fedvote.methods import METHODS
from fedvote.privacy.accountant import bounded_epsilon, epsilon_bound, gaussian_mu
from fedvote.privacy.data_dependent import vote_margins
from fedvote.privacy.events import confident_gnmax_events, gaussian_release_event
from fedvote.report.loaders import RunData

LEVELS: tuple[str, ...] = ("agent", "instance")
# Points along the ε-vs-queries curve: enough for a smooth line, few enough for PLD.
CURVE_POINTS = 24


@dataclass(frozen=True, eq=False)
class EpsilonCurve:
    """ε after each number of releases ``steps`` (S,), per level; data-dependent where known.

    ``unit`` is what a step is ("queries answered" or "rounds"); ``dependent`` maps a
    level to its data-dependent curve, or is empty when no clean histograms exist.
    ``accountant`` computed the curve; ``run_accountant`` computed the run's own ε
    (result.json's), which may differ (a PLD run's curve is drawn by the exact closed form,
    PLD's limit), and ``run_epsilon`` holds that ε per level, marked at the last step.
    """

    unit: str
    steps: np.ndarray
    independent: dict[str, np.ndarray]
    dependent: dict[str, np.ndarray]
    accountant: str
    delta: float
    run_accountant: str | None = None
    run_epsilon: dict[str, float] = dataclasses.field(default_factory=dict)
    # level → the accountant of the steps whose PLD could not be built ("rdp": its upper bound
    # of the same events; "none": ∞), where any could not (privacy.accountant.bounded_epsilon)
    fallbacks: dict[str, str] = dataclasses.field(default_factory=dict)

    def accountant_label(self, level: str | None = None) -> str:
        """The accountant that drew the curve (at ``level``), and the run's where that was another one."""
        label = self.accountant
        if self.run_accountant is not None and self.run_accountant != self.accountant:
            label = f"{self.accountant} closed form; the run's ε: {self.run_accountant}"
        if level is not None and level in self.fallbacks:
            label += f"; {self.fallbacks[level]} upper bound where the PLD could not be built"
        return label


def curve_steps(total: int, points: int = CURVE_POINTS) -> np.ndarray:
    """About ``points`` integers from 1 to ``total``, always including both ends, (S,)."""
    if total < 1:
        raise ConfigError("queries", f"a curve needs at least one release, got {total}")
    return np.unique(np.round(np.linspace(1, total, min(total, points))).astype(np.int64))


def voting_epsilon_curve(run: RunData, points: int = CURVE_POINTS) -> EpsilonCurve | None:
    """ε vs queries of a voting run, both levels; None for a run without votes or noise.

    Data-independent, by the run's accountant (:func:`~fedvote.analysis.gaussian_accountant`:
    ``exact`` for ``pld``, its limit): the run's Gaussian vote releases (σ, the sensitivity
    charged at each level) composed q times; for label release (Confident-GNMax) every
    *checked* query pays the threshold check (σ₁) and the argmax (σ)
    (:func:`~fedvote.privacy.events.confident_gnmax_events`), against queries checked.
    No data-dependent curve: a run that releases the noisy sums has none (the
    argmax-only bound does not apply), and a label-release run's figure is the single
    value in result.json (its checked queries' clean sums are not in analysis.npz).
    """
    result = run.result
    privacy = result["privacy"]
    sigma = float(result["sigma"])
    confident = result.get("confident_gnmax") if result.get("release") == "labels" else None
    queries = int((confident or {}).get("queries_checked") or result.get("queries") or 0)
    if queries < 1 or not sigma > 0 or not privacy.get("private"):
        return None
    delta = float(privacy["delta"])
    accountant = gaussian_accountant(str(privacy["accountant"]))
    steps = curve_steps(queries, points)
    independent: dict[str, np.ndarray] = {}
    for level in LEVELS:
        sensitivity = privacy[level].get("sensitivity")
        if sensitivity is None or privacy[level].get("epsilon") is None:
            continue
        if confident is not None:
            events = [confident_gnmax_events(sigma, float(confident["threshold_sigma"]), int(q)).at(level)
                      for q in steps]
        else:
            events = [gaussian_release_event(sigma, sensitivity, int(q)) for q in steps]
        independent[level] = np.array([epsilon_bound(event, delta, accountant) for event in events])
    if not independent:
        return None
    unit = "queries checked" if confident is not None else "queries answered"
    return EpsilonCurve(
        unit, steps, independent, {}, accountant, delta, str(privacy["accountant"]), _run_epsilon(privacy)
    )


def _run_epsilon(privacy: dict[str, Any]) -> dict[str, float]:
    """result.json's ε per level, where finite."""
    levels = [level for level in LEVELS if privacy[level].get("epsilon") is not None]
    return {level: float(privacy[level]["epsilon"]) for level in levels}


def gradient_epsilon_curve(run: RunData, points: int = 10) -> EpsilonCurve | None:
    """ε vs rounds of a gradient run, both levels, from the method's own planned events.

    The method is rebuilt from the recorded config and σ with ``rounds`` set to each step.
    None when the run is not private or its config no longer builds.
    """
    result = run.result
    privacy = result["privacy"]
    if not privacy.get("private"):
        return None
    try:
        config = RunConfig.from_dict(result["config"])
        method = METHODS[config.method].from_config(
            config, sigma=float(result["sigma"]), queries=1, min_responders=1
        )
    except (ConfigError, KeyError, TypeError, ValueError):
        return None
    rounds = getattr(method, "rounds", None)
    if not isinstance(rounds, int) or rounds < 1:
        return None
    delta = float(privacy["delta"])
    accountant = str(privacy["accountant"])
    steps = curve_steps(rounds, points)
    independent: dict[str, np.ndarray] = {}
    fallbacks: dict[str, str] = {}
    for level in LEVELS:
        if privacy[level].get("epsilon") is None:
            continue
        events = [
            dataclasses.replace(method, rounds=int(t)).planned_events().at(level)  # type: ignore[type-var]
            for t in steps
        ]
        bounded = [bounded_epsilon(event, delta, _accountant_for(event, accountant)) for event in events]
        values = [b.epsilon for b in bounded]
        independent[level] = np.array([v if math.isfinite(v) else np.nan for v in values])
        fell_back = sorted({b.accountant for b in bounded if b.fallback is not None})
        if fell_back:  # the PLD could not be built at some steps: RDP's upper bound (or ∞) there
            fallbacks[level] = "/".join(fell_back)
    if not independent:
        return None
    run_epsilon = _run_epsilon(privacy)
    return EpsilonCurve(
        "rounds", steps, independent, {}, accountant, delta, accountant, run_epsilon, fallbacks
    )


def _accountant_for(event: DpEvent, accountant: str) -> str:
    """``accountant``, or its exact limit for a pure Gaussian composition (see gaussian_accountant)."""
    try:
        gaussian_mu(event)
    except ValueError:
        return accountant
    return gaussian_accountant(accountant)


@dataclass(frozen=True, eq=False)
class MarginData:
    """Vote margins γ(x) (R,) of the released queries and what the labels did.

    ``correct``: the pseudo-label equals the true label; ``matches_clean``: it equals the
    noiseless majority vote (Lemma 4's event). ``threshold`` is Lemma 4's margin above
    which the noisy label matches the clean one with probability ≥ 1 − δ.
    """

    margins: np.ndarray
    correct: np.ndarray
    matches_clean: np.ndarray
    threshold: float
    agents: int
    classes: int
    sigma: float
    delta: float


def lemma4_threshold(sigma: float, agents: int, classes: int, delta: float) -> float:
    """γ above which the noisy argmax matches the clean one w.p. ≥ 1 − δ (Lemma 4).

    C·exp(−N²γ²/(8σ²)) ≤ δ ⇔ γ ≥ 2σ·√(2 log(C/δ))/N, with σ the std of the noise on the
    vote *sum* (σ/N on the mean ``(1/N)Σ fᵢ``); the paper prints 2√(2 log(C/δ))/N, σ = 1.
    """
    return 2.0 * sigma * math.sqrt(2.0 * math.log(classes / delta)) / agents


def margin_data(run: RunData) -> MarginData | None:
    """Margins of the released queries from the clean histograms; None without them."""
    analysis = run.analysis
    if analysis is None or analysis.vote_histograms is None or analysis.pseudo_labels is None:
        return None
    histograms = analysis.vote_histograms  # (R, C)
    if histograms.shape[0] == 0:
        return None
    agents = int(run.result["agents"])
    sigma = float(run.result["sigma"])
    delta = float(run.result["privacy"]["delta"])
    classes = int(histograms.shape[1])
    pseudo = analysis.pseudo_labels
    truth = analysis.true_labels if analysis.true_labels is not None else np.full_like(pseudo, -1)
    return MarginData(
        margins=vote_margins(histograms) / agents,  # γ(x): on the mean vote (1/N) Σ fᵢ(x)
        correct=pseudo == truth,
        matches_clean=pseudo == np.argmax(histograms, axis=1),
        threshold=lemma4_threshold(sigma, agents, classes, delta) if sigma > 0 else 0.0,
        agents=agents,
        classes=classes,
        sigma=sigma,
        delta=delta,
    )
