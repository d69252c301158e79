"""Individual privacy budgets: each agent its own agent-level ε (issue 45).

Individualized PATE (Boenisch et al., PETS 2023) lets data holders with looser budgets
contribute more. In fedvote's agent-level federated setting one agent is one teacher, so
its *weighting* mechanism is the natural one: agent i's one-hot vote counts with weight
w_i in the noisy sum, so its per-query sensitivity is w_i (agent level, zero-out) and
√2·w_i (instance level), and its ε is that of the Gaussian (or Poisson-subsampled
Gaussian) with noise σ/w_i (:func:`~fedvote.privacy.subsampled_votes.individual_vote_events`).
The weights are calibrated from public values only — the budgets, Q, δ, the sampling
rate — so that every group's ε is at most its budget and the group with the largest
budget (weight 1) spends it: σ_b is the smallest noise meeting budget b at weight 1
(:func:`~fedvote.privacy.calibrate.calibrate_sigma`), and w_b = σ_{b_max} / σ_b, so that
σ/w_b = σ_b once σ = σ_{b_max}. Agents are assigned to groups by a seeded draw (public).

* :func:`parse_budget_spec` — ``ε:fraction,…`` or ``file:PATH`` (one ε per agent id);
* :func:`assign_budgets` — each agent's budget, (N,);
* :func:`plan_budgets` — the groups and their weights (:class:`BudgetPlan`);
* :class:`GroupLedger` — a run's view of the ledger that also keeps each group's charges;
* :func:`group_privacy` — each group's ε, by the run's accountant, from its own events.

The ledger itself is charged with the release as the agent with the largest weight sees
it, so the run's headline agent-level ε is the maximum over agents (never less).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from dp_accounting import dp_event

from fedvote.errors import ConfigError
from fedvote.privacy.accountant import epsilon_bound
from fedvote.privacy.budget_spec import BudgetSpec, assign_budgets, parse_budget_spec
from fedvote.privacy.events import LevelEvents, compose_events
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.results import AgentGroup

if TYPE_CHECKING:
    from fedvote.config import PrivacyConfig

__all__ = [
    "AgentGroup",
    "BudgetPlan",
    "BudgetSpec",
    "GroupLedger",
    "IndividualRelease",
    "assign_budgets",
    "check_group_budgets",
    "individual_release",
    "group_privacy",
    "parse_budget_spec",
    "plan_budget_spec",
    "plan_budgets",
    "refuse_fixed_noise_with_budgets",
]

@dataclass(frozen=True)
class BudgetPlan:
    """The budget groups of a run: each agent's budget and each distinct budget's vote weight.

    ``budgets`` (N,) per agent; ``levels`` the distinct budgets, ascending; ``weights`` the
    vote weight of each level (the largest budget's is 1); ``unit_sigmas`` σ_b, the noise
    each level's calibration found at weight 1.
    """

    budgets: tuple[float, ...]
    levels: tuple[float, ...]
    weights: tuple[float, ...]
    unit_sigmas: tuple[float, ...]

    @property
    def max_budget(self) -> float:
        """The largest budget: the headline agent-level ε is calibrated to it."""
        return self.levels[-1]

    def agent_weights(self) -> np.ndarray:
        """Each agent's vote weight, (N,)."""
        weight_of = dict(zip(self.levels, self.weights, strict=True))
        return np.array([weight_of[budget] for budget in self.budgets], dtype=np.float64)

    def members(self, level: int) -> tuple[int, ...]:
        """The agent ids holding budget ``levels[level]``."""
        budget = self.levels[level]
        return tuple(i for i, b in enumerate(self.budgets) if b == budget)


def plan_budgets(budgets: Sequence[float] | np.ndarray, unit_sigma: Callable[[float], float]) -> BudgetPlan:
    """The groups of ``budgets`` (N,) with weights w_b = σ_{b_max} / σ_b, ``unit_sigma(b)`` = σ_b.

    ``unit_sigma`` returns the smallest σ at which an agent of weight 1 spends at most b over
    the run's planned releases; then at σ = σ_{b_max} an agent of budget b and weight w_b
    sees noise σ/w_b = σ_b, within its budget.
    """
    levels = tuple(sorted({float(b) for b in budgets}))
    sigmas = tuple(float(unit_sigma(b)) for b in levels)
    weights = tuple(sigmas[-1] / sigma for sigma in sigmas)
    return BudgetPlan(
        budgets=tuple(float(b) for b in budgets), levels=levels, weights=weights, unit_sigmas=sigmas
    )


def plan_budget_spec(
    spec: str, num_agents: int, seed: int, unit_sigma: Callable[[float], float]
) -> BudgetPlan:
    """``--agent-budgets``' plan: ``spec`` parsed, dealt to ``num_agents`` by ``seed``, then planned."""
    return plan_budgets(assign_budgets(parse_budget_spec(spec), num_agents, seed), unit_sigma)


def refuse_fixed_noise_with_budgets(privacy: PrivacyConfig) -> None:
    """Refuse, by name, what ``--agent-budgets`` decides: σ (from the largest budget) and the level."""
    if privacy.epsilon is not None or privacy.sigma is not None:
        raise ConfigError(
            "agent_budgets", "sets each agent's ε (σ follows from the largest): drop --epsilon/--sigma"
        )
    if privacy.calibrate_level == "instance":
        raise ConfigError("agent_budgets", "budgets are agent-level ε: drop --calibrate-level instance")


@dataclass(frozen=True)
class IndividualRelease(LevelEvents):
    """One release as the agent of largest weight sees it (the ledger's charge) and as each group does.

    ``groups`` follows :attr:`BudgetPlan.levels`.
    """

    groups: tuple[LevelEvents, ...] = ()


def individual_release(groups: Sequence[LevelEvents], weights: Sequence[float]) -> IndividualRelease:
    """One release as each group sees it (``groups``, one per weight), charged as the heaviest sees it."""
    if len(groups) != len(weights) or not groups:
        raise ValueError(f"{len(groups)} groups' events for {len(weights)} weights")
    top = groups[list(weights).index(max(weights))]
    return IndividualRelease(
        agent=top.agent,
        instance=top.instance,
        agent_sensitivity=top.agent_sensitivity,
        instance_sensitivity=top.instance_sensitivity,
        groups=tuple(groups),
    )


def check_group_budgets(
    plan: BudgetPlan, planned: Sequence[LevelEvents], delta: float, accountant: str, sigma: float
) -> None:
    """Refuse (``agent_budgets``) a plan in which a group's planned agent-level ε exceeds its budget.

    ``planned`` holds each level's events of the whole run at noise ``sigma`` (named in the error).
    """
    for budget, events in zip(plan.levels, planned, strict=True):
        spent = epsilon_bound(events.agent, delta, accountant)
        if not spent <= budget:
            raise ConfigError(
                "agent_budgets",
                f"at σ = {sigma:.4g} the agents of budget {budget:g} would spend ε {spent:.4g}",
            )


class GroupLedger(PrivacyLedger):
    """A run's view of ``parent`` that also keeps each budget group's charges.

    :meth:`charge` goes through to ``parent`` first (a persisted ledger checks its budget
    and may refuse, releasing nothing), then records the release here and, for an
    :class:`IndividualRelease`, each group's events; :meth:`void` voids all of them.
    """

    def __init__(self, parent: PrivacyLedger, groups: int) -> None:
        super().__init__()
        self.parent = parent
        self._parent_ids: dict[int, int] = {}
        self._groups: list[list[LevelEvents | None]] = [[] for _ in range(groups)]

    def charge(self, release: LevelEvents) -> int:
        """Charge ``release`` to the parent, then here and to each group."""
        if not isinstance(release, IndividualRelease) or len(release.groups) != len(self._groups):
            raise ValueError("a GroupLedger charges IndividualRelease events, one per group")
        parent_id = self.parent.charge(release)
        local_id = super().charge(release)
        self._parent_ids[local_id] = parent_id
        for entries, events in zip(self._groups, release.groups, strict=True):
            entries.append(events)
        return local_id

    def void(self, charge_id: int) -> None:
        """Void charge ``charge_id`` in the parent, here and in every group."""
        self.parent.void(self._parent_ids.pop(charge_id))
        super().void(charge_id)
        for entries in self._groups:
            entries[charge_id] = None

    def group_event(self, group: int, level: str) -> dp_event.DpEvent:
        """The composition of group ``group``'s charges in force at ``level``."""
        return compose_events(events.at(level) for events in self._groups[group] if events is not None)


def group_privacy(
    ledger: GroupLedger, plan: BudgetPlan, delta: float, accountant: str
) -> tuple[AgentGroup, ...]:
    """Each budget group's ε at both levels, from its own charged events, at ``delta``.

    Empty groups are left out. ε is :func:`~fedvote.privacy.accountant.epsilon_bound` of
    the group's composition (None where unbounded), the same accountant as the headline.
    """
    groups = []
    for index, budget in enumerate(plan.levels):
        members = plan.members(index)
        if not members:
            continue
        figures = []
        for level in ("agent", "instance"):
            epsilon = epsilon_bound(ledger.group_event(index, level), delta, accountant)
            figures.append(epsilon if math.isfinite(epsilon) else None)
        groups.append(
            AgentGroup(
                budget=budget,
                agents=len(members),
                epsilon=figures[0],
                instance_epsilon=figures[1],
                weight=plan.weights[index],
                agent_ids=members,
            )
        )
    return tuple(groups)

