"""Agent-side FedAUXfdp (fedaux-fdp.txt): logistic heads on a frozen public h₀, output-perturbed.

The agent fits its heads on h̃(own records) and releases each through its one exit
(:meth:`fedvote.agents.agent.Agent.release`): checked to be finite, of the requested shape
and — for a regularised head — inside the ball it was projected into, then noised with
σᵢ = multiplier·Δᵢ (the std the ledger was charged for) from the agent's own generator.
"""

from __future__ import annotations

import numpy as np

from fedvote.agents.agent import Agent, ArrayOutput
from fedvote.models.logistic_heads import (
    HeadFeatures,
    HeadRequest,
    ReleasedHeads,
    fit_binary_head,
    fit_multinomial_head,
    fit_sgd_head,
    head_norm_bound,
    project_to_ball,
)


def private_heads(
    agent: Agent, features: HeadFeatures, request: HeadRequest, *, embedded: np.ndarray | None = None
) -> ReleasedHeads:
    """Fit the agent's heads on h̃(own records) and release them perturbed (steps 2 and 3).

    Scoring head (when ``request.negative_indices`` is given): binary logistic regression,
    own records (label 1) against the public negatives D⁻ (label 0), sensitivity
    2/(λ·(nᵢ + |D⁻|)) — only the nᵢ private records can be replaced. Class head: the
    C-class regularised optimum, sensitivity 2√2/(λ·nᵢ) (or Theorem 1's 2√C/(λ·nᵢ),
    ``request.class_bound``); or FedAUX+F's SGD head. A regularised head is projected
    into the ball ‖β‖ ≤ √(2 log K/λ), which its exact optimum satisfies anyway
    (:func:`head_norm_bound`), then noised with N(0, σᵢ²), σᵢ = multiplier·Δᵢ from the
    request (the std the ledger was charged for), from this agent's own generator. Only
    the perturbed heads leave. ``embedded`` is h₀(own records), (nᵢ, d), when a
    transport computed it in one pass.
    """
    data = agent.private_data
    n = agent.num_records
    own = features.transform(data.features) if embedded is None else features.from_embedding(embedded)
    lam = request.regularization
    classes = request.num_classes
    if request.class_head == "sgd":  # FedAUX+F: no sensitivity bound, never noised
        fitted = fit_sgd_head(
            own, data.labels, num_classes=classes, epochs=request.sgd_epochs, seed=agent.seed + request.seed
        )
        class_head = agent.release(fitted, 0.0, ArrayOutput("class head", (classes, features.dim)))
    else:
        bound = head_norm_bound(classes, lam)
        fitted = project_to_ball(
            fit_multinomial_head(own, data.labels, num_classes=classes, regularization=lam), bound
        )  # (C, d + 1)
        class_std = request.class_noise_std(n)  # multiplier·Δᵢ, the std the ledger charged
        expected = ArrayOutput("class head", (classes, features.dim), norm_bound=bound)
        class_head = agent.release(fitted, 0.0 if class_std is None else class_std, expected)
    score_head = None
    if request.negative_indices is not None:
        negatives = features.transform(agent.public_features[request.negative_indices])  # (|D⁻|, d + 1)
        x = np.vstack([own, negatives])
        y = np.concatenate([np.ones(n), np.zeros(negatives.shape[0])])
        bound = head_norm_bound(2, lam)
        fitted = project_to_ball(fit_binary_head(x, y, regularization=lam), bound)  # (d + 1,)
        score_std = request.score_noise_std(n)  # multiplier·2/(λ·(nᵢ + |D⁻|))
        expected = ArrayOutput("score head", (features.dim,), norm_bound=bound)
        score_head = agent.release(fitted, 0.0 if score_std is None else score_std, expected)
    return ReleasedHeads(class_head=class_head, score_head=score_head, num_records=n)
