"""Releases described as ``dp_accounting`` events, at agent and at instance level.

Convention (see ``docs/privacy.md``): every event uses dp_accounting's default
ADD_OR_REMOVE_ONE relation with unit sensitivity, and a mechanism's own L2
sensitivity ``s`` is folded into the noise multiplier (σ/s). dp-accounting's RDP and
PLD accountants read REPLACE_ONE differently (a factor 2 in sensitivity), so we never
use it: each level states its adjacency and its ``s`` explicitly here.

* agent level — zero-out adjacency: one agent's vote is replaced by zeros while it
  still adds its noise share. A one-hot vote moves by at most 1 in L2.
* instance level — replace-one: one record of one agent changes, which can flip that
  agent's one-hot vote from one class to another: L2 distance √2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dp_accounting import dp_event

LEVELS: tuple[str, ...] = ("agent", "instance")

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
    return dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(sigma / sensitivity), count)


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
