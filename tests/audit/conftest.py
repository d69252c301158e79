"""Shared pieces of the audit tests: a small federation's settings and a test-only noise cut."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fedvote.agents.agent import Agent


@pytest.fixture
def small_audit() -> dict[str, Any]:
    """A federation that audits in seconds: 10 agents, 20 queries, logistic teachers, ε 2, seeded noise."""
    return {
        "agents": 10,
        "queries": 20,
        "teacher_model": "logistic",
        "epochs": 2,
        "epsilon": 2.0,
        "seed": 0,
        "noise_seed": 7,
    }


@pytest.fixture
def cut_agent_noise(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """Break the agents' one exit: ``cut(f)`` makes every ``Agent.release`` add noise of std/f (test only)."""
    release = Agent.release

    def cut(factor: float) -> None:
        def broken(self: Agent, values, noise_std, expected):  # noqa: ANN001
            return release(self, values, noise_std / factor, expected)

        monkeypatch.setattr(Agent, "release", broken)

    return cut
