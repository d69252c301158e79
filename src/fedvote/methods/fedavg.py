"""FedAvg (McMahan et al. 2017): the non-private upper bound of the gradient baselines.

Each round every agent takes part with probability q (Poisson sampling); the sampled
agents run E local SGD iterations from the global θ (Algorithm 4 of the voting paper's
appendix) and send their updates; the server moves θ by the data-size weighted mean
Σ n_i Δ_i / Σ n_i of the updates it received. The local step size decays across rounds.
Nothing is clipped or noised: every release is charged as non-private (ε = ∞, reported
as null; the run is ``private: false``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from dp_accounting import dp_event

from fedvote.methods.gradient import GradientMethod, weighted_mean_update
from fedvote.methods.options.gradient import FedAvgOptions
from fedvote.models.local_training import LocalTraining, LocalUpdates
from fedvote.privacy.events import LevelEvents
from fedvote.transport import capabilities

if TYPE_CHECKING:
    pass


def non_private_events(rounds: int) -> LevelEvents:
    """``rounds`` releases of an un-noised model update, at both levels (ε = ∞)."""
    event: dp_event.DpEvent = dp_event.NonPrivateDpEvent() if rounds > 0 else dp_event.NoOpDpEvent()
    return LevelEvents(
        agent=event, instance=event, agent_sensitivity=float("inf"), instance_sensitivity=float("inf")
    )


@dataclass(frozen=True)
class FedAvg(GradientMethod):
    """FedAvg; defaults: T = 100 rounds, q = 0.05, E = 20, η = 0.1 decaying ×0.99 per round.

    q = 0.05 and E = 20 are the voting paper's DP-FedAvg settings (appendix F), so that
    FedAvg is DP-FedAvg without clipping and noise. ``sigma`` is ignored (always 0).
    """

    name = "fedavg"
    requires: ClassVar[tuple[type, ...]] = (capabilities.LocalUpdates,)
    calibration_level: ClassVar[str | None] = None  # nothing to calibrate: not private
    options_type: ClassVar[type | None] = FedAvgOptions

    def planned_events(self) -> LevelEvents:
        """T non-private releases."""
        return non_private_events(self.rounds)

    def round_events(self) -> LevelEvents:
        """One non-private release (the round's updates)."""
        return non_private_events(1)

    def round_training(
        self, round_index: int, learning_rate: float, sampled: int, num_agents: int
    ) -> LocalTraining:
        """E plain SGD iterations, nothing clipped or noised."""
        return LocalTraining(
            model=self.model,
            steps=self.local_steps,
            learning_rate=learning_rate,
            batch_size=self.batch_size,
            round_index=round_index,
        )

    def aggregate(
        self, theta: np.ndarray, received: LocalUpdates, rng: np.random.Generator, num_agents: int
    ) -> np.ndarray:
        """θ + Σ n_i Δ_i / Σ n_i (unchanged when nobody was sampled)."""
        return theta + weighted_mean_update(received)
