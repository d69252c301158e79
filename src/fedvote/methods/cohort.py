"""How many agents a gradient baseline's round takes when the user does not say (issue 46).

Planned from public quantities only (N, T, the target ε and δ), never from the agents' data:

* **DP-FedAvg's q.** The noise on the averaged update is z(q)·S/(qN) per coordinate, where the
  multiplier z(q) calibrated to the target ε over T Poisson-sampled rounds depends on q, T, ε
  and δ but not on N. Amplification by sampling lets z grow more slowly than q only while z is
  small: at T = 100, ε = 4, δ = 1e-3, z(q)/q is 15.3 at the paper's q = 0.05, 11.0 at 0.1, 9.2 at
  0.2 and 8.2 at q = 1. The paper's q = 0.05 with N = 50 (2.5 agents a round) pays 1.9 times the
  noise full participation would; on digits and MNIST the same ε then bought 0.78 and 0.74
  against 0.89 and 0.86 at q = 0.2 (docs/defaults.md). :func:`planned_sampling_rate` takes the
  smallest q of :data:`SAMPLING_RATE_GRID` whose z(q)/q is within :data:`NOISE_PLATEAU` of z(1)
  (more agents a round would cost their training for little less noise), never more than
  :data:`MAX_EXPECTED_COHORT` agents expected a round and never below the paper's 0.05.
* **DP-FTRL's K.** Without sampling there is no amplification: the noise on the averaged update
  of a round of N/K agents only grows with K, so :func:`planned_epoch_rounds` takes the fewest
  groups that keep a round to :data:`MAX_EXPECTED_COHORT` agents, ⌈N/100⌉ (K = 1 for N ≤ 100:
  every agent in every round, each epoch's tree a single leaf).
"""

from __future__ import annotations

import math
from collections.abc import Callable

# The rates DP-FedAvg's planner tries, ascending; the paper's 0.05 first.
SAMPLING_RATE_GRID: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
# The voting paper's DP-FedAvg rate (appendix F): the least the planner takes.
PAPER_SAMPLING_RATE = 0.05
# A planned q is the first whose z(q)/q is at most this many times full participation's z(1).
NOISE_PLATEAU = 1.25
# The most agents a planned round expects: the cohort of Andrew et al.'s operating point (qN = 100).
MAX_EXPECTED_COHORT = 100


def planned_sampling_rate(num_agents: int, multiplier: Callable[[float], float]) -> float:
    """DP-FedAvg's q when ``--sampling-rate`` is not given, from N and the calibration ``multiplier``.

    ``multiplier(q)`` is the noise multiplier z that meets the run's target ε at rate q (the
    planner's calibration). The smallest grid q with z(q)/q ≤ :data:`NOISE_PLATEAU`·z(1), capped at
    :data:`MAX_EXPECTED_COHORT`/N and floored at :data:`PAPER_SAMPLING_RATE`; where the cap is the
    floor (N ≥ 2,000) nothing is calibrated.
    """
    if num_agents < 1:
        raise ValueError(f"num_agents must be at least 1, got {num_agents}")
    cap = max(PAPER_SAMPLING_RATE, min(1.0, MAX_EXPECTED_COHORT / num_agents))
    if cap == PAPER_SAMPLING_RATE:
        return cap
    full = multiplier(1.0)
    for rate in SAMPLING_RATE_GRID:
        if rate >= cap:
            return cap
        if multiplier(rate) / rate <= NOISE_PLATEAU * full:
            return rate
    return cap


def planned_epoch_rounds(num_agents: int) -> int:
    """DP-FTRL's K when ``--epoch-rounds`` is not given: ⌈N/100⌉ groups, at most 100 agents a round."""
    if num_agents < 1:
        raise ValueError(f"num_agents must be at least 1, got {num_agents}")
    return math.ceil(num_agents / MAX_EXPECTED_COHORT)
