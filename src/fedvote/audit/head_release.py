"""The FedAUX family's perturbed heads (FedAUXfdp, FedD+P, FedAVG+P), released many times by a canary agent.

Each agent fits its heads and releases them through its one exit,
:meth:`~fedvote.agents.agent.Agent.release` (validated against the head's norm ball), with
the noise std σᵢ the method's :class:`~fedvote.models.logistic_heads.HeadRequest` gives it
(:func:`fedvote.methods.fedaux_fdp.released_heads`: the one place both the agent and the
ledger read σᵢ from). The audit builds that request from the planned method, takes the
agent the accounting finds worst (instance level: the smallest nᵢ; agent level: the largest
nᵢ, whose σᵢ is smallest against the fixed ball), and releases crafted heads from it:

* agent level (zero-out): a head of norm R = √(2 log K/λ) (the ball's radius, the
  agent-level sensitivity) in D, zeros in D' — the noise share is added in both;
* instance level (replace-one): ±Δᵢ/2 along one axis (‖Δ‖ = Δᵢ, the proven sensitivity).

Each head is released with :data:`HEAD_COORDINATES` coordinates: a Gaussian release's
privacy loss depends on ‖Δ‖/σ alone, not on the head's width. The releases are whitened
(divided by σᵢ) and concatenated, so the projection test is the likelihood-ratio test of
the composed release. What this audits is the noise and its accounting at the proven
sensitivity, not the sensitivity proof itself (the logistic optimum's stability).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np

from fedvote.agents.agent import Agent, ArrayOutput
from fedvote.data.federation import Federation
from fedvote.methods.fedaux_fdp import FedAuxFdp, released_heads
from fedvote.models.logistic_heads import head_norm_bound
from fedvote.transport.base import agent_noise_seeds

# Coordinates of each released head in the audit (the privacy loss depends on ‖Δ‖/σ only).
HEAD_COORDINATES = 8


@dataclass(frozen=True, eq=False)
class HeadRelease:
    """The canary agent's heads: per head its σ, its D and D' values (HEAD_COORDINATES,) and ball radius."""

    agent: Agent
    stds: tuple[float, ...]
    present: tuple[np.ndarray, ...]
    absent: tuple[np.ndarray, ...]
    bounds: tuple[float, ...]
    description: str

    @property
    def baseline(self) -> np.ndarray:
        """The whitened release in D' without noise, (H·HEAD_COORDINATES,)."""
        return np.concatenate([value / std for value, std in zip(self.absent, self.stds, strict=True)])

    @property
    def difference(self) -> np.ndarray:
        """The whitened Δ of the composed release, (H·HEAD_COORDINATES,)."""
        return np.concatenate(
            [(a - b) / s for a, b, s in zip(self.present, self.absent, self.stds, strict=True)]
        )

    def received(self, canary_in: bool, trials: int) -> np.ndarray:
        """``trials`` independent releases of every head by the canary agent, whitened, (T, H·coords)."""
        heads = self.present if canary_in else self.absent
        parts = []
        for value, std, bound in zip(heads, self.stds, self.bounds, strict=True):
            expected = ArrayOutput("head", (HEAD_COORDINATES,), norm_bound=bound)
            released = np.stack([self.agent.release(value, std, expected) for _ in range(trials)])
            parts.append(released / std)  # (T, coords)
        return np.concatenate(parts, axis=1)


def build_head_release(
    method: FedAuxFdp, federation: Federation, level: str, *, noise_seed: int | None
) -> HeadRelease:
    """The canary agent of ``method`` (planned on ``federation``) at ``level``."""
    counts = [len(data) for data in federation.agents]
    negatives = method.split_pool(federation.public.features.shape[0])[1]
    request = method.head_request(federation.num_classes, negatives)
    lam = request.regularization
    stds, present, absent, bounds, names = [], [], [], [], []
    for head in released_heads(request):
        noise = head.noise_stds(counts)
        if noise is None:
            continue  # released without noise: the accounting charges ε = ∞, nothing to audit
        bound = head_norm_bound(head.outputs, lam)
        if level == "agent":  # the smallest σᵢ against the fixed radius R
            index = int(np.argmin(noise))
            norm = bound
            low = np.zeros(HEAD_COORDINATES)
        else:  # σᵢ/Δᵢ is the multiplier for every agent: the smallest nᵢ (largest Δᵢ) for definiteness
            index = int(np.argmin(counts))
            norm = head.sensitivity(counts[index])
            low = np.zeros(HEAD_COORDINATES)
            low[0] = -norm / 2
        high = np.zeros(HEAD_COORDINATES)
        high[0] = norm if level == "agent" else norm / 2
        stds.append(float(noise[index]))
        present.append(high)
        absent.append(low)
        bounds.append(bound)
        names.append(f"{head.outputs}-way head of agent {index} (nᵢ = {counts[index]}, ‖Δ‖ = {norm:.4g})")
    entropy = noise_seed if noise_seed is not None else secrets.randbits(128)
    canary = Agent(
        agent_id=0,
        data=federation.agents[0],
        public_features=federation.public.features,
        num_classes=federation.num_classes,
        noise_rng=np.random.default_rng(agent_noise_seeds(entropy, 0)),
        seed=0,
    )
    what = "head of norm R (the ball's radius) vs zeroed out" if level == "agent" else "head moved by Δᵢ"
    return HeadRelease(
        agent=canary,
        stds=tuple(stds),
        present=tuple(present),
        absent=tuple(absent),
        bounds=tuple(bounds),
        description=f"canary agent releasing crafted heads ({what}): " + "; ".join(names),
    )
