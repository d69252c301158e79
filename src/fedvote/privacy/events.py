"""Releases described as ``dp_accounting`` events, at agent and at instance level.

Convention (see ``docs/privacy.md``): every event uses dp_accounting's default
ADD_OR_REMOVE_ONE relation with unit sensitivity, and a mechanism's own L2
sensitivity ``s`` is folded into the noise multiplier (σ/s); each level states its
adjacency and its ``s`` explicitly here. Sampled mechanisms under replace-one (DP-SGD,
DP-FedAvg's instance level, PriFedSync) are the exception: their pair depends on the
relation, and they are wrapped in :func:`replace_one` (dp-accounting's REPLACE_ONE,
composed with the rest by :mod:`fedvote.privacy.accountant`).

* agent level — zero-out adjacency: one agent's vote is replaced by zeros while it
  still adds its noise share. A one-hot vote moves by at most 1 in L2.
* instance level — replace-one: one record of one agent changes, which can flip that
  agent's one-hot vote from one class to another: L2 distance √2.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass

import attr
import numpy as np
from dp_accounting import DpEventBuilder, dp_event

from fedvote.aggregation.voting import integer_weight
from fedvote.errors import ConfigError
from fedvote.privacy.config import KNN_BOUNDS, LEVELS
from fedvote.privacy.discrete import DiscreteGaussianDpEvent

# Per-query L2 sensitivity of a one-hot vote (PATE-FL), Theorem 3 of the voting paper.
PATE_FL_AGENT_SENSITIVITY = 1.0
PATE_FL_INSTANCE_SENSITIVITY = math.sqrt(2.0)


@dataclass(frozen=True)
class LevelEvents:
    """One release described at both privacy levels, with the sensitivities used."""

    agent: dp_event.DpEvent
    instance: dp_event.DpEvent
    agent_sensitivity: float
    instance_sensitivity: float

    def at(self, level: str) -> dp_event.DpEvent:
        """The event at ``level`` ("agent" or "instance")."""
        if level == "agent":
            return self.agent
        if level == "instance":
            return self.instance
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")

    def sensitivity(self, level: str) -> float:
        """The L2 sensitivity used at ``level``."""
        return self.agent_sensitivity if level == "agent" else self.instance_sensitivity


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ReplaceOneDpEvent(dp_event.DpEvent):
    """``event`` accounted under dp-accounting's REPLACE_ONE relation, inside any composition.

    The rest of fedvote's events follow the ADD_OR_REMOVE_ONE convention with the
    sensitivity folded into the noise multiplier; a pair of that kind does not depend on
    the relation. Sampled mechanisms do: a replace-one record under Poisson sampling is
    the pair (1−q)N(0, z²) + qN(−1, z²) vs (1−q)N(0, z²) + qN(1, z²) (dp-accounting's
    REPLACE_ONE), which no ADD_OR_REMOVE_ONE event describes. This wrapper lets the ledger
    compose such a release with the others: fedvote's accountants
    (:func:`fedvote.privacy.accountant.make_accountant`) build its privacy loss under
    REPLACE_ONE and compose it with the rest. Under REPLACE_ONE, dp-accounting reads
    ``GaussianDpEvent(z)`` as sensitivity 2 (the same pair as ADD_OR_REMOVE_ONE
    ``GaussianDpEvent(z / 2)``).
    """

    event: dp_event.DpEvent


def replace_one(event: dp_event.DpEvent) -> dp_event.DpEvent:
    """``event`` under dp-accounting's REPLACE_ONE relation (no-op and non-private pass through)."""
    if isinstance(event, dp_event.NoOpDpEvent | dp_event.NonPrivateDpEvent | ReplaceOneDpEvent):
        return event
    return ReplaceOneDpEvent(event)


def compose_events(events: Iterable[dp_event.DpEvent]) -> dp_event.DpEvent:
    """``events`` in sequence, composed by dp-accounting's ``DpEventBuilder``.

    The builder drops no-ops, unrolls self-compositions and merges consecutive equal
    events into one ``SelfComposedDpEvent(e, n)``; it returns ``NoOpDpEvent`` for nothing,
    the event itself for one, else a ``ComposedDpEvent``. A :class:`ReplaceOneDpEvent` is
    composed as one event (the builder never looks inside it).
    """
    builder = DpEventBuilder()
    for event in events:
        builder.compose(event)
    return builder.build()


def gaussian_release_event(sigma: float, sensitivity: float, count: int) -> dp_event.DpEvent:
    """``count`` releases of a Gaussian mechanism with noise std ``sigma`` and L2 ``sensitivity``.

    Returns ``SelfComposedDpEvent(GaussianDpEvent(sigma / sensitivity), count)``; a
    zero ``sigma`` is a non-private release, and ``count == 0`` releases nothing.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if sensitivity <= 0:
        raise ValueError(f"sensitivity must be > 0, got {sensitivity}")
    if count == 0:
        return dp_event.NoOpDpEvent()
    if sigma <= 0:
        return dp_event.NonPrivateDpEvent()
    return dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(sigma / sensitivity), int(count))


def pate_fl_events(sigma: float, queries: int) -> LevelEvents:
    """PATE-FL answering ``queries`` queries with aggregate noise std ``sigma`` (Theorem 3).

    Agent level: s = 1, RDP α/(2σ²) per query; instance level: s = √2, RDP α/σ².
    """
    return LevelEvents(
        agent=gaussian_release_event(sigma, PATE_FL_AGENT_SENSITIVITY, queries),
        instance=gaussian_release_event(sigma, PATE_FL_INSTANCE_SENSITIVITY, queries),
        agent_sensitivity=PATE_FL_AGENT_SENSITIVITY,
        instance_sensitivity=PATE_FL_INSTANCE_SENSITIVITY,
    )


def discrete_coordinate_events(sigma: float, shares: int, coordinates: int) -> dp_event.DpEvent:
    """``coordinates`` integer coordinates each moved by 1, noised by ``shares`` discrete Gaussian shares.

    ``SelfComposedDpEvent(DiscreteGaussianDpEvent(sigma, shares, 1), coordinates)``: the
    coordinates' noises are independent, so the release is their composition
    (:mod:`fedvote.privacy.discrete`); σ 0 is non-private, no coordinate releases nothing.
    """
    if coordinates < 0:
        raise ValueError(f"coordinates must be >= 0, got {coordinates}")
    return _discrete_events(sigma, shares, 1, 1, coordinates)


def pate_fl_discrete_events(sigma: float, shares: int, queries: int) -> LevelEvents:
    """PATE-FL with ``--secure-noise``: integer vote sums plus ``shares`` shares of N_Z(0, σ²/t) a coordinate.

    Agent level (zero-out): one agent's one-hot vote moves one coordinate of each query's
    sum by 1 — ``queries`` one-coordinate events. Instance level (replace-one): the vote
    moves from e_a to e_b, two coordinates by 1 each — 2·``queries`` events. The L2
    sensitivities are 1 and √2, as for the Gaussian release (Theorem 3 of the voting paper).
    """
    return LevelEvents(
        agent=discrete_coordinate_events(sigma, shares, queries),
        instance=discrete_coordinate_events(sigma, shares, 2 * queries),
        agent_sensitivity=PATE_FL_AGENT_SENSITIVITY,
        instance_sensitivity=PATE_FL_INSTANCE_SENSITIVITY,
    )


def majority_vote_events(queries: int) -> LevelEvents:
    """Plain majority vote (non-private PATE): the clean one-hot vote sums of ``queries`` queries.

    PATE-FL's release with σ = 0: the vote sums move by s = 1 (agent, zero-out) and s = √2
    (instance, replace-one), but nothing masks them, so each level is a
    ``NonPrivateDpEvent`` (ε = ∞, reported as None); no queries release nothing (no-op).
    """
    return pate_fl_events(0.0, queries)


def confident_gnmax_events(sigma: float, threshold_sigma: float, queries: int) -> LevelEvents:
    """PATE-FL with label release: Confident-GNMax (Papernot et al. 2018, Algorithm 1) on ``queries``.

    Per query, the aggregator checks max_j(n_j + N(0, σ₁²)) ≥ T on one noisy copy of the
    vote sums (``threshold_sigma`` = σ₁) and, if it passes, releases the argmax of a
    second, independent copy (``sigma`` = σ₂). Both copies are Gaussian releases of the
    one-hot vote sums, s = 1 (agent, zero-out) and √2 (instance, replace-one); the check
    and the argmax are post-processing. Whether the argmax runs depends on the data, so
    every query is charged for both: Gaussian(σ₁/s) ∘ Gaussian(σ₂/s), which composes to
    μ = s·√(Q·(1/σ₁² + 1/σ₂²)) (the bound against the aggregator itself too).
    """
    if threshold_sigma < 0:
        raise ConfigError("threshold_sigma", f"must be >= 0, got {threshold_sigma}")

    def level(sensitivity: float) -> dp_event.DpEvent:
        check = gaussian_release_event(threshold_sigma, sensitivity, queries)
        argmax = gaussian_release_event(sigma, sensitivity, queries)
        if queries == 0:
            return dp_event.NoOpDpEvent()
        # Two parts even when σ₁ = σ₂: compose_events would merge them, and PLD computes
        # the merged self-composition differently (ε moves in the 9th digit).
        return dp_event.ComposedDpEvent([check, argmax])

    return LevelEvents(
        agent=level(PATE_FL_AGENT_SENSITIVITY),
        instance=level(PATE_FL_INSTANCE_SENSITIVITY),
        agent_sensitivity=PATE_FL_AGENT_SENSITIVITY,
        instance_sensitivity=PATE_FL_INSTANCE_SENSITIVITY,
    )


# --- Private-kNN-FL (its bounds, KNN_BOUNDS, are named in fedvote.privacy.config) -----------


def private_knn_fl_sensitivity(k: int, level: str, bound: str = "tight") -> float:
    """Per-query L2 sensitivity of a Private-kNN-FL vote (the mean of ``k`` neighbour labels).

    * agent level (zero-out): the vote is a probability vector, ‖v‖₂ ≤ ‖v‖₁ = 1, so s = 1.
    * instance level (replace-one): ``bound="tight"`` gives s = √2/k — replacing one record
      swaps at most one of the k neighbours, so one label 1/k moves from one class to
      another (proof in ``docs/privacy.md``); ``bound="paper"`` gives the voting
      paper's √(2/k) (appendix, proof of Theorem 11), which is looser for every k ≥ 2.

    The vote must divide by k (every agent holds at least k records, or the vote keeps
    dividing by k when it has fewer).
    """
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ConfigError("k", f"must be an integer >= 1, got {k!r}")
    if bound not in KNN_BOUNDS:
        raise ConfigError("bound", f"must be one of {', '.join(KNN_BOUNDS)}, got {bound!r}")
    if level == "agent":
        return 1.0
    if level == "instance":
        return math.sqrt(2.0) / k if bound == "tight" else math.sqrt(2.0 / k)
    raise ConfigError("level", f"must be one of {', '.join(LEVELS)}, got {level!r}")


def private_knn_fl_events(sigma: float, queries: int, k: int, bound: str = "tight") -> LevelEvents:
    """Private-kNN-FL answering ``queries`` queries with aggregate noise std ``sigma``.

    Theorem 3 of the voting paper: agent level (α, Qα/(2σ²))-RDP (s = 1); instance level
    with s = √2/k (``bound="tight"``, RDP Qα/(k²σ²)) or the paper's s = √(2/k)
    (``bound="paper"``, RDP Qα/(kσ²)).
    """
    agent_s = private_knn_fl_sensitivity(k, "agent", bound)
    instance_s = private_knn_fl_sensitivity(k, "instance", bound)
    return LevelEvents(
        agent=gaussian_release_event(sigma, agent_s, queries),
        instance=gaussian_release_event(sigma, instance_s, queries),
        agent_sensitivity=agent_s,
        instance_sensitivity=instance_s,
    )


def private_knn_fl_discrete_events(
    sigma: float, shares: int, queries: int, k_min: int, scale: int, bound: str = "tight"
) -> LevelEvents:
    """Private-kNN-FL with ``--secure-noise``: integer neighbour counts, noise N_Z(0, (Kσ)²/t) a share.

    Each agent releases the counts c ∈ ℤ^C of its k_i neighbours' labels (k_i·its mean
    vote, Σ c = k_i ≤ K = ``scale``, the largest k of the run, public), and every one of
    ``shares`` agents adds N_Z(0, (Kσ)²/t) to each coordinate; the server divides the
    integer sum by K (post-processing). In count units (``docs/privacy.md``, "Secure
    noise for kNN and weighted votes"):

    * agent level (zero-out): c moves to 0, ‖c‖₂ ≤ ‖c‖₁ = k_i ≤ K on at most min(K, C) ≤ K
      coordinates: one K-dimensional event of Δ₂ = K a query (ratio Δ₂/σ_count = 1/σ,
      as for the mean vote);
    * instance level (replace-one): one neighbour changes, so one count moves by 1 from
      one class to another: two one-coordinate events of Δ = 1 a query (Δ₂/σ_count =
      √2/(Kσ) ≤ √2/(k_min σ), the tight mean-unit bound); with ``bound="paper"`` the
      paper's √(2/k_min) in mean units, K·√(2/k_min) ≥ √2 in counts, on those two
      coordinates (looser, as without secure noise).

    ``k_min`` is the smallest k (the paper bound's); ``scale`` K the largest.
    """
    if isinstance(scale, bool) or not isinstance(scale, int | np.integer) or scale < 1:
        raise ConfigError("k", f"the count scale must be an integer >= 1, got {scale!r}")
    private_knn_fl_sensitivity(k_min, "instance", bound)  # validates k_min and bound
    if k_min > scale:
        raise ValueError(f"k_min {k_min} exceeds the count scale {scale}")
    count_sigma = float(sigma) * int(scale)
    if bound == "tight":
        instance = discrete_coordinate_events(count_sigma, shares, 2 * queries)
    else:
        paper = int(scale) * math.sqrt(2.0 / k_min)  # in counts
        instance = _discrete_events(count_sigma, shares, paper, 2, queries)
    # Reported in mean-vote units (counts / K), comparable with private_knn_fl_events'.
    return LevelEvents(
        agent=_discrete_events(count_sigma, shares, float(scale), int(scale), queries),
        instance=instance,
        agent_sensitivity=1.0,
        instance_sensitivity=math.sqrt(2.0) / int(scale) if bound == "tight" else math.sqrt(2.0 / k_min),
    )


def _discrete_events(
    sigma: float, shares: int, sensitivity: float, dimension: int, count: int
) -> dp_event.DpEvent:
    """``count`` releases of ``dimension`` integer coordinates moved by L2 ≤ ``sensitivity`` together.

    σ 0 is non-private; ``count`` 0 releases nothing.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if shares < 1:
        raise ValueError(f"shares must be >= 1, got {shares}")
    if count == 0:
        return dp_event.NoOpDpEvent()
    if sigma <= 0:
        return dp_event.NonPrivateDpEvent()
    event = DiscreteGaussianDpEvent(float(sigma), int(shares), sensitivity, int(dimension))
    return dp_event.SelfComposedDpEvent(event, int(count))


# --- Weighted (reputation) voting and multi-label votes --------------------------------------


def weighted_voting_events(sigma: float, queries: int, max_weight: float) -> LevelEvents:
    """Weighted voting, each agent's one-hot vote scaled by a weight w ∈ [w_min, w_max].

    Agent level (zero-out): ‖w·e_y‖₂ ≤ w_max. Instance level (replace-one): the record can
    change both the vote and the agent's weight, ‖w·e_a − w'·e_b‖₂ ≤ √(w² + w'²) ≤ √2·w_max
    (and |w − w'| ≤ w_max when a = b). Weights must be clipped to w_max *before* voting.
    """
    if not max_weight > 0 or not math.isfinite(max_weight):
        raise ConfigError("max_weight", f"must be a finite number > 0, got {max_weight}")
    agent_s = float(max_weight)
    instance_s = math.sqrt(2.0) * float(max_weight)
    return LevelEvents(
        agent=gaussian_release_event(sigma, agent_s, queries),
        instance=gaussian_release_event(sigma, instance_s, queries),
        agent_sensitivity=agent_s,
        instance_sensitivity=instance_s,
    )


def weighted_voting_discrete_events(
    sigma: float, shares: int, queries: int, max_weight: float, scale: int
) -> LevelEvents:
    """Weighted voting with ``--secure-noise``: integer weights W = round(K·w), noise N_Z(0, (Kσ)²/t) a share.

    Each agent releases W_i·e_y with W_i = round(K·w_i) ∈ [0, W_max], W_max = round(K·w_max)
    (K = ``scale``, public), plus its share of N_Z(0, (Kσ)²/t) on every coordinate; the
    server divides the sum by K. Agent level (zero-out): one coordinate moves by
    W_i ≤ W_max — one event of Δ = W_max a query. Instance level (replace-one): the vote
    and the weight may change, W·e_a − W'·e_b, two coordinates by at most W_max each (one by
    |W − W'| ≤ W_max when a = b) — two events of Δ = W_max a query. A smaller shift is never
    worse (:mod:`fedvote.privacy.discrete`). The sensitivities reported are in weight units
    (W_max/K and √2·W_max/K), comparable with :func:`weighted_voting_events`'.
    """
    if isinstance(scale, bool) or not isinstance(scale, int | np.integer) or scale < 1:
        raise ConfigError("weight_scale", f"must be an integer >= 1, got {scale!r}")
    if not max_weight > 0 or not math.isfinite(max_weight):
        raise ConfigError("max_weight", f"must be a finite number > 0, got {max_weight}")
    top = integer_weight(max_weight, scale)
    if top < 1:
        raise ConfigError("weight_scale", f"K = {scale} rounds w_max = {max_weight} to 0; take a larger K")
    count_sigma = float(sigma) * int(scale)
    return LevelEvents(
        agent=_discrete_events(count_sigma, shares, top, 1, queries),
        instance=_discrete_events(count_sigma, shares, top, 1, 2 * queries),
        agent_sensitivity=top / scale,
        instance_sensitivity=math.sqrt(2.0) * top / scale,
    )


def accuracy_summary_discrete_events(sigma: float, shares: int) -> LevelEvents:
    """The accuracy summary with ``--secure-noise``: a one-hot bin, ``shares`` shares of N_Z(0, σ²/t).

    As :func:`pate_fl_discrete_events` for one query: one coordinate moves by 1 (zero-out)
    or two by 1 each (replace-one).
    """
    return pate_fl_discrete_events(sigma, shares, 1)


# Sensitivity of one agent's one-hot accuracy bin (the summary the relative weighting
# schemes release once): zero-out removes a one-hot vector (1), replace-one moves it (√2).
ACCURACY_SUMMARY_AGENT_SENSITIVITY = 1.0
ACCURACY_SUMMARY_INSTANCE_SENSITIVITY = math.sqrt(2.0)


def accuracy_summary_events(sigma: float) -> LevelEvents:
    """One release of the noisy histogram of the agents' validation accuracies (B bins).

    Each agent adds the one-hot bin of its accuracy (a function of its private teacher)
    plus its noise share; the sum is a Gaussian mechanism with s = 1 (agent, zero-out) and
    s = √2 (instance: one record can move the agent's accuracy into another bin).
    """
    return LevelEvents(
        agent=gaussian_release_event(sigma, ACCURACY_SUMMARY_AGENT_SENSITIVITY, 1),
        instance=gaussian_release_event(sigma, ACCURACY_SUMMARY_INSTANCE_SENSITIVITY, 1),
        agent_sensitivity=ACCURACY_SUMMARY_AGENT_SENSITIVITY,
        instance_sensitivity=ACCURACY_SUMMARY_INSTANCE_SENSITIVITY,
    )


def weighted_pate_events(
    sigma: float, queries: int, max_weight: float, summary_sigma: float | None = None
) -> LevelEvents:
    """Every release of a reputation-weighted PATE run: the accuracy summary, then the votes.

    ``summary_sigma`` None: no summary (one-model-one-vote, accuracy weights); else the
    summary (:func:`accuracy_summary_events`) composed with ``queries`` weighted votes
    (:func:`weighted_voting_events`). Sequential composition is adaptive: the weights
    depend on the released summary, and each agent's weight on its own data only, so the
    votes keep sensitivity w_max / √2·w_max given the summary (``docs/privacy.md``). The
    sensitivities reported are the votes'.
    """
    votes = weighted_voting_events(sigma, queries, max_weight)
    if summary_sigma is None:
        return votes
    summary = accuracy_summary_events(summary_sigma)
    # Two parts, as in confident_gnmax_events (compose_events would merge equal noise).
    return LevelEvents(
        agent=dp_event.ComposedDpEvent([summary.agent, votes.agent]),
        instance=dp_event.ComposedDpEvent([summary.instance, votes.instance]),
        agent_sensitivity=votes.agent_sensitivity,
        instance_sensitivity=votes.instance_sensitivity,
    )


def weighted_pate_discrete_events(
    sigma: float, shares: int, queries: int, max_weight: float, scale: int, summary_sigma: float | None = None
) -> LevelEvents:
    """:func:`weighted_pate_events` with ``--secure-noise``: the discrete summary, then the integer votes."""
    votes = weighted_voting_discrete_events(sigma, shares, queries, max_weight, scale)
    if summary_sigma is None:
        return votes
    summary = accuracy_summary_discrete_events(summary_sigma, shares)
    return LevelEvents(
        agent=dp_event.ComposedDpEvent([summary.agent, votes.agent]),
        instance=dp_event.ComposedDpEvent([summary.instance, votes.instance]),
        agent_sensitivity=votes.agent_sensitivity,
        instance_sensitivity=votes.instance_sensitivity,
    )


def multilabel_events(sigma: float, queries: int, tau: int) -> LevelEvents:
    """Multi-label votes in {0, 1}^C clipped to at most ``tau`` positive labels per agent.

    Agent level: ‖v‖₂ ≤ √τ. Instance level: two such votes differ in at most 2τ
    coordinates by at most 1, ‖v − v'‖₂ ≤ √(2τ). The voting paper uses τ = 4 on CelebA
    (appendix F, clipping after Zhu et al. 2020).
    """
    if isinstance(tau, bool) or not isinstance(tau, int | np.integer) or tau < 1:
        raise ConfigError("tau", f"must be an integer >= 1, got {tau!r}")
    agent_s = math.sqrt(tau)
    instance_s = math.sqrt(2.0 * tau)
    return LevelEvents(
        agent=gaussian_release_event(sigma, agent_s, queries),
        instance=gaussian_release_event(sigma, instance_s, queries),
        agent_sensitivity=agent_s,
        instance_sensitivity=instance_s,
    )


# --- Gradient-based baselines ---------------------------------------------------------------


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(name, f"must lie in [0, 1], got {value}")


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ConfigError(name, f"must be an integer >= 0, got {value!r}")


def _check_multiplier(name: str, value: float) -> None:
    if not value >= 0 or math.isnan(value):
        raise ConfigError(name, f"must be >= 0, got {value}")


def poisson_sampled(sampling_rate: float, inner: dp_event.DpEvent) -> dp_event.DpEvent:
    """``inner`` under Poisson sampling at ``sampling_rate`` in (0, 1] (itself at rate 1).

    A subnormal rate (below 2.2e-308) is rounded up to the smallest normal float, where
    dp-accounting's arithmetic still holds: ε grows with the rate, so this is sound.
    """
    if sampling_rate >= 1.0:
        return inner
    return dp_event.PoissonSampledDpEvent(max(sampling_rate, sys.float_info.min), inner)


def poisson_gaussian_event(sampling_rate: float, noise_multiplier: float, steps: int) -> dp_event.DpEvent:
    """``steps`` rounds of the Poisson-subsampled Gaussian mechanism (add/remove-one).

    ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), steps)``: each unit
    is included with probability ``q``, its contribution clipped to norm S and the sum
    noised with N(0, z²S²). A zero multiplier is non-private; zero steps or q = 0 release
    nothing about any unit.
    """
    _check_probability("sampling_rate", sampling_rate)
    _check_multiplier("noise_multiplier", noise_multiplier)
    _check_count("steps", steps)
    if steps == 0 or sampling_rate == 0:
        return dp_event.NoOpDpEvent()
    if noise_multiplier == 0:
        return dp_event.NonPrivateDpEvent()
    inner = poisson_sampled(sampling_rate, dp_event.GaussianDpEvent(noise_multiplier))
    return dp_event.SelfComposedDpEvent(inner, int(steps))


def dp_sgd_event(sampling_rate: float, noise_multiplier: float, steps: int) -> dp_event.DpEvent:
    """DP-SGD (Abadi et al. 2016): Poisson sampling rate B/n, noise multiplier z, ``steps``.

    The guarantee is for add/remove-one *record* (the adjacency DP-SGD, Opacus and the
    papers use). For replace-one see :func:`fedvote.privacy.fdp.replace_one_dp_sgd_epsilon`.
    """
    return poisson_gaussian_event(sampling_rate, noise_multiplier, steps)


def dp_fedsgd_events(sampling_rate: float, noise_multiplier: float, steps: int) -> LevelEvents:
    """DP-FedSGD: every agent runs DP-SGD on its own records (voting paper, appendix F).

    Instance level, replace-one record like every instance level here: the DP-SGD event
    of the agent holding the record under dp-accounting's REPLACE_ONE relation,
    ``replace_one(SelfComposed(PoissonSampled(q_b, Gaussian(z)), steps))`` — the record's
    clipped gradient g (‖g‖ ≤ C) becomes another g′, each step's pair is
    (1−q_b)N(0, z²) + q_b·N(∓1, z²) in units of C (``docs/privacy.md``). Each record lives
    in exactly one agent, so the other agents add nothing.
    Agent level: per-record clipping bounds nothing about a whole agent's data (a Poisson
    batch is unbounded), so the agent-level event is non-private (ε = ∞).
    """
    instance = dp_sgd_event(sampling_rate, noise_multiplier, steps)
    if isinstance(instance, dp_event.SelfComposedDpEvent):  # a private release (not no-op / non-private)
        instance = replace_one(instance)
    return LevelEvents(
        agent=dp_event.NonPrivateDpEvent(),
        instance=instance,
        agent_sensitivity=math.inf,
        instance_sensitivity=1.0,
    )


def dp_fedavg_events(
    sampling_rate: float, noise_multiplier: float, rounds: int, *, visible_to_server: int | None = None
) -> LevelEvents:
    """DP-FedAvg (Algorithms 3 and 5 of the voting paper's appendix; Geyer et al. 2017).

    Each round samples agents with probability q, clips each update to norm S, and the
    sum carries N(0, σ²S²); σ is the noise multiplier. Units of S throughout.

    ``visible_to_server`` None — the sample is hidden from whoever the ε is stated
    against (secure aggregation of every agent's share, or Algorithm 3 stated for
    observers of the models):

    * agent level: ``T`` rounds of PoissonSampled(q, Gaussian(σ)). Zero-out of an agent
      and add/remove of an agent give the same pair of mixtures here.
    * instance level (replace-one record): the record moves one sampled agent's clipped
      update from a to b, ‖a‖, ‖b‖ ≤ S: ``replace_one(SelfComposed(PoissonSampled(q,
      Gaussian(σ)), T))``, dp-accounting's REPLACE_ONE pair (1−q)N(0, σ²) + qN(∓1, σ²)
      per round (q = 0.05, σ = 1, T = 200, δ = 1e-3: ε ≈ 5.14).

    ``visible_to_server`` = N — Algorithm 5 without secure aggregation, stated against the
    server, which sees agent i's update with its share N(0, σ²S²/m_t), m_t ≤ N, and who was
    sampled: no sampling credit; each round is Gaussian(σ/√N) at the agent level (the
    update moves by ≤ S) and Gaussian(σ/(2√N)) at the instance level (≤ 2S).
    """
    _check_probability("sampling_rate", sampling_rate)
    _check_multiplier("noise_multiplier", noise_multiplier)
    _check_count("rounds", rounds)
    if visible_to_server is not None:
        _check_count("visible_to_server", visible_to_server)
        seen = noise_multiplier / math.sqrt(max(visible_to_server, 1))
        if rounds == 0 or sampling_rate == 0:
            seen_event: dp_event.DpEvent = dp_event.NoOpDpEvent()
            return LevelEvents(seen_event, seen_event, agent_sensitivity=1.0, instance_sensitivity=2.0)
        return LevelEvents(
            agent=gaussian_release_event(seen, 1.0, rounds),
            instance=gaussian_release_event(seen, 2.0, rounds),
            agent_sensitivity=1.0,
            instance_sensitivity=2.0,
        )
    agent = poisson_gaussian_event(sampling_rate, noise_multiplier, rounds)
    instance = replace_one(agent) if isinstance(agent, dp_event.SelfComposedDpEvent) else agent
    return LevelEvents(agent=agent, instance=instance, agent_sensitivity=1.0, instance_sensitivity=2.0)


def dp_fedavg_discrete_events(
    sampling_rate: float, share_variance: int, shares: int, bound: float, dimension: int, rounds: int
) -> LevelEvents:
    """DP-FedAvg with ``--secure-noise``: quantised updates and distributed discrete Gaussian shares.

    Each round a Poisson sample (rate q) of agents sends integer vectors of L2 norm ≤ ``bound``
    B (conditional randomized rounding) in ``dimension`` d, and each of t = ``shares`` agents adds
    N_Z(0, σ_l²), σ_l² = ``share_variance`` (:mod:`fedvote.privacy.discrete_sum`). Agent level
    (zero-out): ``SelfComposed(PoissonSampled(q, DDG(√(tσ_l²), t, B, d)), T)``, accounted by KLS21's
    RDP and Zhu & Wang's bound for the sampling. Instance level (replace-one record): the sampled
    agent's vector moves by ≤ 2B, with no credit for sampling: ``SelfComposed(DDG(·, t, 2B, d), T)``.
    """
    _check_probability("sampling_rate", sampling_rate)
    _check_count("rounds", rounds)
    sigma = math.sqrt(shares * share_variance)
    if rounds == 0:
        none: dp_event.DpEvent = dp_event.NoOpDpEvent()
        return LevelEvents(none, none, agent_sensitivity=bound, instance_sensitivity=2 * bound)
    if share_variance == 0:
        public: dp_event.DpEvent = dp_event.NonPrivateDpEvent()
        return LevelEvents(public, public, agent_sensitivity=bound, instance_sensitivity=2 * bound)
    agent = DiscreteGaussianDpEvent(sigma, int(shares), float(bound), int(dimension))
    instance = DiscreteGaussianDpEvent(sigma, int(shares), 2.0 * float(bound), int(dimension))
    sampled = dp_event.PoissonSampledDpEvent(sampling_rate, agent) if sampling_rate < 1 else agent
    return LevelEvents(
        agent=dp_event.SelfComposedDpEvent(sampled, int(rounds)),
        instance=dp_event.SelfComposedDpEvent(instance, int(rounds)),
        agent_sensitivity=float(bound),
        instance_sensitivity=2.0 * float(bound),
    )


def dp_ftrl_events(noise_multiplier: float, gaussians: int) -> LevelEvents:
    """DP-FTRL with tree aggregation (Kairouz et al., ICML 2021): ``gaussians`` node Gaussians.

    Each released node of the trees carries N(0, z²C²); an agent lies in at most ``gaussians``
    of them, Σ_e (⌊log₂ k_e⌋ + 1) over the epochs' trees of k_e leaves, one leaf per tree
    (:func:`fedvote.privacy.tree_aggregation.gaussian_count`); no sampling, so no amplification.
    Agent level (zero-out): its clipped update leaves its leaf, each of those nodes moves by ≤ C:
    ``SelfComposed(Gaussian(z), gaussians)`` — one Gaussian of sensitivity C·√gaussians, the
    paper's ρ = gaussians/(2z²) zCDP. Instance level (replace-one record): the update moves
    between two points of the C-ball, ≤ 2C: ``SelfComposed(Gaussian(z/2), gaussians)``.
    """
    _check_multiplier("noise_multiplier", noise_multiplier)
    _check_count("gaussians", gaussians)
    return LevelEvents(
        agent=gaussian_release_event(noise_multiplier, 1.0, gaussians),
        instance=gaussian_release_event(noise_multiplier, 2.0, gaussians),
        agent_sensitivity=1.0,
        instance_sensitivity=2.0,
    )


# --- FedAUXfdp: output-perturbed logistic heads (fedaux-fdp.txt) ------------------------------


def perturbed_head_events(
    noise_stds: list[float] | None,
    instance_sensitivities: list[float],
    agent_sensitivity: float | None,
) -> LevelEvents:
    """One head released once by every agent: agent i adds N(0, σᵢ²) to its head.

    ``instance_sensitivities[i]`` is Δᵢ, the replace-one sensitivity of agent i's head
    (class head: 2√2/(λ·nᵢ), or Theorem 1 of ``fedaux-fdp.txt``'s 2√C/(λ·nᵢ) with
    ``--head-sensitivity paper``; binary: 2/(λ·(nᵢ + |D⁻|))) and ``noise_stds[i]`` the σᵢ
    agent i actually adds — both read from the same ``HeadRequest`` by the caller — and
    ``agent_sensitivity`` R bounds every head's norm (zero-out; None: unbounded). The
    agents' records are disjoint, so a replaced record — or a zeroed agent — changes one
    agent's head only (parallel composition): each level's event is the worst agent's,
    Gaussian(min σᵢ/Δᵢ) and Gaussian(min σᵢ/R). ``noise_stds`` None: released without
    noise (ε = ∞ at both levels).
    """
    if not instance_sensitivities or any(not s > 0 for s in instance_sensitivities):
        raise ConfigError("instance_sensitivities", f"need one value > 0 per agent: {instance_sensitivities}")
    if noise_stds is None:
        return LevelEvents(
            agent=dp_event.NonPrivateDpEvent(),
            instance=dp_event.NonPrivateDpEvent(),
            agent_sensitivity=math.inf if agent_sensitivity is None else agent_sensitivity,
            instance_sensitivity=max(instance_sensitivities),
        )
    if len(noise_stds) != len(instance_sensitivities) or any(not s > 0 for s in noise_stds):
        raise ConfigError("noise_stds", "need one noise std > 0 per agent, as many as sensitivities")
    ratio = min(s / d for s, d in zip(noise_stds, instance_sensitivities, strict=True))
    agent: dp_event.DpEvent = dp_event.NonPrivateDpEvent()
    if agent_sensitivity is not None:
        agent = dp_event.GaussianDpEvent(min(noise_stds) / agent_sensitivity)
    return LevelEvents(
        agent=agent,
        instance=dp_event.GaussianDpEvent(ratio),
        agent_sensitivity=math.inf if agent_sensitivity is None else agent_sensitivity,
        instance_sensitivity=max(instance_sensitivities),
    )


# --- PriFedSync (federated-f-dp-prifedsync.txt) ------------------------------------------------


def prifedsync_events(sigma: float, sampling_rate: float, local_steps: int, rounds: int) -> LevelEvents:
    """PriFedSync's ``rounds`` rounds of ``local_steps`` DP-SGD steps with Poisson batches.

    Instance level (replace-one record of one client, PriFedSync's S'ʲ):
    ``replace_one(SelfComposed(PoissonSampled(q, Gaussian(σ)), K·R))``. A step draws each
    record with probability q = B/n_j and adds N(0, σ²C²) to the sum of per-sample
    gradients clipped to C; replacing a record moves that sum, when the record is drawn,
    from g to g' with ‖g‖, ‖g'‖ ≤ C — dp-accounting's REPLACE_ONE pair
    (1−q)·N(0, σ²) + q·N(∓1, σ²) in units of C. Exact for the batches drawn
    (:mod:`fedvote.models.batched_dp_sgd`) and a proven upper bound, not Theorem 2's CLT.
    ``sampling_rate`` is that of the client with the fewest records (the largest q); every
    client is charged K steps in every round, sampled or not (an upper bound). Records are
    disjoint across clients, so the worst client bounds every record (parallel composition);
    the releases to other clients are post-processing of its K·R noisy steps.

    Agent level: a client's whole data is not protected (per-record clipping bounds no
    client's total influence; user-level DP is not PriFedSync's notion): non-private.
    """
    _check_count("rounds", rounds)
    _check_count("local_steps", local_steps)
    if not 0.0 < sampling_rate <= 1.0:
        raise ConfigError("sampling_rate", f"the batch rate B/n must lie in (0, 1], got {sampling_rate}")
    if not sigma >= 0:
        raise ConfigError("sigma", f"must be >= 0, got {sigma}")
    steps = int(local_steps * rounds)  # a Python int: DpEventBuilder refuses NumPy counts
    step = poisson_sampled(sampling_rate, dp_event.GaussianDpEvent(sigma))
    if steps == 0:
        instance: dp_event.DpEvent = dp_event.NoOpDpEvent()
    elif sigma == 0:
        instance = dp_event.NonPrivateDpEvent()
    else:
        instance = replace_one(dp_event.SelfComposedDpEvent(step, steps))
    return LevelEvents(
        agent=dp_event.NonPrivateDpEvent(),
        instance=instance,
        agent_sensitivity=math.inf,
        instance_sensitivity=2.0,  # replace-one moves a drawn record's clipped gradient by ≤ 2C
    )
