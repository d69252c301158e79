"""The one-run bound of Steinke, Nasr & Jagielski (2023), against direct binomial computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from fedvote.audit.one_run import GUESS_FRACTIONS, audit_guesses, epsilon_lower_bound, p_value


def test_without_delta_the_p_value_is_the_binomial_tail_of_randomized_response() -> None:
    # Pure eps-DP (their Theorem 3.1): P[W >= v] <= P[Bin(r, e^eps/(1+e^eps)) >= v].
    p = math.exp(1.0) / (1 + math.exp(1.0))
    assert p_value(1000, 100, 80, 1.0, 0.0) == pytest.approx(binom.sf(79, 100, p))


def test_the_delta_term_is_alpha_times_two_m_delta() -> None:
    m, r, v, eps, delta = 500, 60, 50, 1.0, 1e-6
    p = 1 / (1 + math.exp(-eps))
    alpha = max((binom.cdf(v - 1, r, p) - binom.cdf(v - 1 - i, r, p)) / i for i in range(1, v + 1))
    assert p_value(m, r, v, eps, delta) == pytest.approx(binom.sf(v - 1, r, p) + alpha * 2 * m * delta)


def test_the_bound_is_the_largest_refuted_epsilon() -> None:
    bound = epsilon_lower_bound(1000, 200, 190, 1e-5, 0.05)
    assert bound > 1.5
    assert p_value(1000, 200, 190, bound, 1e-5) < 0.05 <= p_value(1000, 200, 190, bound + 1e-5, 1e-5)
    assert epsilon_lower_bound(1000, 200, 100, 1e-5, 0.05) == 0.0  # chance level refutes nothing


def test_guessing_counts_the_right_guesses_and_corrects_for_the_family() -> None:
    included = np.array([True, False] * 500)
    scores = np.where(included, 1.0, -1.0) + np.linspace(0, 0.5, 1000)  # perfectly separated
    outcome = audit_guesses(scores, included, delta=1e-5, confidence=0.95)
    assert outcome.correct == outcome.guesses  # every guess right
    significance = 0.05 / len(GUESS_FRACTIONS)
    expected = epsilon_lower_bound(1000, outcome.guesses, outcome.guesses, 1e-5, significance)
    assert outcome.epsilon_lower_bound == pytest.approx(expected)
    noise = np.random.default_rng(1).normal(size=1000)
    assert audit_guesses(noise, included, delta=1e-5, confidence=0.95).epsilon_lower_bound < 0.5


def test_the_audit_modules_import_no_circle() -> None:
    """Issue 44: ``audit/api.py`` ↔ ``audit/one_run.py`` was a circle (lazy imports included here)."""
    import ast
    from pathlib import Path

    import fedvote.audit

    package = Path(fedvote.audit.__file__).parent
    graph: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        if path.stem == "__init__":
            continue
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fedvote.audit."):
                imported.add(node.module.rsplit(".", 1)[1])
        graph[path.stem] = imported

    def reaches(start: str, target: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == target or (nxt not in seen and reaches(nxt, target, seen | {nxt})):
                return True
        return False

    circles = [name for name in graph if reaches(name, name, {name})]
    assert not circles, circles


def test_dp_fedavg_shares_honour_t_in_the_audit_and_fewer_canaries_than_t_are_refused() -> None:
    import pytest

    from fedvote.audit import audit
    from fedvote.errors import ConfigError

    result = audit("dp-fedavg", "agent", 20, agents=20, min_responders=10, rounds=5, noise_seed=1, epsilon=4.0)
    assert 0.0 <= result.epsilon_lower_bound <= result.claimed_epsilon
    with pytest.raises(ConfigError, match="fewer than t"):
        audit("dp-fedavg", "agent", 10, agents=20, min_responders=15, rounds=5, noise_seed=1, epsilon=4.0)
