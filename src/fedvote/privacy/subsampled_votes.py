"""Events of individually weighted, Poisson-subsampled vote sums (issue 45).

Pure functions, no state: what one agent's vote costs when it counts with weight ``w`` and
enters each query's sum with probability ``q`` (its own coin, hidden from the server: every
agent still sends its noise share on every query, so the sum's noise stays σ² and the
sample stays secret — ``docs/privacy.md``, "Individual budgets and subsampled voting").

* **agent level** (zero-out): agent i's contribution to one query's sum is w·b·v with
  b ~ Bernoulli(q) drawn by the agent, ‖v‖ ≤ 1, against 0. With the other agents' votes and
  every noise share independent of b, the pair is (1−q)N(0, σ²) + qN(w·v, σ²) vs N(0, σ²):
  dp-accounting's ``PoissonSampledDpEvent(q, GaussianDpEvent(σ/w))`` under ADD_OR_REMOVE_ONE
  (Private-kNN, Zhu et al. CVPR 2020, Sec. 4: amplification by subsampling of the voters).
  At q = 1 it is the Gaussian of Theorem 3 with sensitivity w (Individualized PATE's
  weighting, Boenisch et al. PETS 2023, Sec. 4.2).
* **instance level** (replace-one record): the record moves the agent's (weighted) vote
  from a to b, ‖a‖, ‖b‖ ≤ w. Two bounds hold for every σ:

  - sampled: dp-accounting's REPLACE_ONE pair (1−q)N(0, σ²) + qN(∓w, σ²) — the pair
    DP-FedAvg's instance level uses for clipped updates
    (:func:`~fedvote.privacy.events.dp_fedavg_events`);
  - unsampled: by joint convexity of the hockey-stick divergence the mixture with the same
    weights is no worse than the unmixed Gaussian with ‖a − b‖ ≤ √2·w (non-negative votes
    summing to at most w).

  The first is tighter for small q (its pair moves by about 2qw, the second by √2·w), so
  :func:`individual_vote_events` takes the sampled bound for q ≤ 1/√2 and the unsampled
  one above: a public, data-independent choice between two valid bounds.
"""

from __future__ import annotations

import math

from dp_accounting import dp_event

from fedvote.privacy.budget_spec import check_rate
from fedvote.privacy.events import (
    PATE_FL_AGENT_SENSITIVITY,
    PATE_FL_INSTANCE_SENSITIVITY,
    LevelEvents,
    gaussian_release_event,
    poisson_gaussian_event,
    private_knn_fl_sensitivity,
    replace_one,
)

# Above this sampling rate the instance level uses the unsampled √2·w Gaussian (see above).
SAMPLED_INSTANCE_BOUND_MAX_RATE = 1.0 / math.sqrt(2.0)


def individual_vote_events(
    sigma: float,
    count: int,
    *,
    weight: float = 1.0,
    sampling_rate: float = 1.0,
    sampled_instance: bool = True,
) -> LevelEvents:
    """``count`` queries answered by an agent with vote weight ``weight`` sampled at ``sampling_rate``.

    σ is the std of the noise on each query's sum. ``weight`` 1 and ``sampling_rate`` 1
    give exactly :func:`~fedvote.privacy.events.pate_fl_events`. A weight of 0 releases
    nothing about the agent (no-op). ``sampled_instance`` False keeps the instance level on
    the unsampled √2·w bound at every rate: only the PLD accountant computes the REPLACE_ONE
    pair of a sampled event (``docs/privacy.md``, "How releases become ε").
    """
    check_rate(sampling_rate)
    if not (math.isfinite(weight) and weight >= 0):
        raise ValueError(f"weight must be a finite number >= 0, got {weight}")
    agent_s = PATE_FL_AGENT_SENSITIVITY * weight
    instance_s = PATE_FL_INSTANCE_SENSITIVITY * weight
    if weight == 0 or count == 0:
        nothing = dp_event.NoOpDpEvent()
        return LevelEvents(nothing, nothing, agent_sensitivity=agent_s, instance_sensitivity=instance_s)
    if sampling_rate >= 1.0:
        return LevelEvents(
            agent=gaussian_release_event(sigma, agent_s, count),
            instance=gaussian_release_event(sigma, instance_s, count),
            agent_sensitivity=agent_s,
            instance_sensitivity=instance_s,
        )
    multiplier = sigma / weight  # noise in units of the vote's norm bound w
    agent = poisson_gaussian_event(sampling_rate, multiplier, count)
    if sampled_instance and sampling_rate <= SAMPLED_INSTANCE_BOUND_MAX_RATE:
        sampled = poisson_gaussian_event(sampling_rate, multiplier, count)
        instance = replace_one(sampled) if isinstance(sampled, dp_event.SelfComposedDpEvent) else sampled
        instance_used = 2.0 * weight  # the REPLACE_ONE pair ∓w
    else:
        instance = gaussian_release_event(sigma, instance_s, count)
        instance_used = instance_s
    return LevelEvents(
        agent=agent, instance=instance, agent_sensitivity=agent_s, instance_sensitivity=instance_used
    )


def individual_knn_events(
    sigma: float,
    count: int,
    k_min: int,
    *,
    bound: str = "tight",
    weight: float = 1.0,
    sampling_rate: float = 1.0,
) -> LevelEvents:
    """Private-kNN-FL's ``count`` weighted, subsampled vote sums (issue 45).

    Agent level as :func:`individual_vote_events` (the mean-label vote has norm ≤ 1, so the
    weighted one ≤ w). Instance level: one record moves the vote by ≤ w·√2/k_min (``"tight"``;
    the paper's √(2/k_min) with ``"paper"``) while the vote itself may be far from 0, so no
    sampling credit is taken: by joint convexity the sampled mixture is no worse than the
    unsampled Gaussian of that sensitivity.
    """
    agent = individual_vote_events(sigma, count, weight=weight, sampling_rate=sampling_rate)
    instance_s = weight * private_knn_fl_sensitivity(k_min, "instance", bound)
    if weight == 0 or count == 0:
        return LevelEvents(agent.agent, agent.instance, agent.agent_sensitivity, instance_s)
    return LevelEvents(
        agent=agent.agent,
        instance=gaussian_release_event(sigma, instance_s, count),
        agent_sensitivity=agent.agent_sensitivity,
        instance_sensitivity=instance_s,
    )
