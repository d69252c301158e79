"""Multi-label votes: the τ-clipped vote's sensitivity by brute force, the run's ε against dp-accounting.

The bound (docs/privacy.md, "Multi-label votes"): a vote is the indicator of at most τ
attributes, so zeroing an agent moves a query's sum by ‖v‖₂ ≤ √τ, and changing one record
(any change of the agent's teacher) moves it by ‖v − v'‖₂ ≤ √(2τ). The vote function probed is
the shipped one, through the agent's exit (fedvote.agents.multilabel_votes).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from dp_accounting import dp_event, pld
from scipy import optimize, stats
from torch import nn

from fedvote.agents.agent import Agent
from fedvote.agents.multilabel_votes import clipped_votes, noisy_multilabel_votes
from fedvote.config import RunConfig
from fedvote.data.attributes import AttributeTask
from fedvote.data.federation import LabeledData
from fedvote.models.multilabel import AttributeHead
from fedvote.runner import run


class _TableTeacher(nn.Module):
    """A teacher whose logits on pool point i (its feature is i) are row i of ``table``."""

    def __init__(self, table: np.ndarray) -> None:
        super().__init__()
        self.table = torch.as_tensor(table, dtype=torch.float32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.table[x[:, 0].long()]


def _shipped_votes(logits: np.ndarray, tau: int) -> np.ndarray:
    """The clean votes (Q, A) an agent whose teacher outputs ``logits`` (Q, A) sends through its exit."""
    q, a = logits.shape
    agent = Agent(
        agent_id=0,
        data=LabeledData(np.zeros((1, 1), np.float32), np.zeros(1, np.int64)),
        public_features=np.arange(q, dtype=np.float32)[:, None],
        num_classes=2**a,
        noise_rng=np.random.default_rng(0),
        seed=0,
    )
    agent.install_teacher(AttributeHead(_TableTeacher(logits), AttributeTask(tuple(map(str, range(a))), "bitmask")))
    return noisy_multilabel_votes(agent, np.arange(q), tau, 0.0, a)


def _random_logits(rng: np.random.Generator, q: int, a: int) -> np.ndarray:
    """Logits with ties, exact zeros (p = 1/2) and every mix of confident and unsure attributes."""
    logits = rng.normal(0.0, 3.0, size=(q, a))
    logits[rng.random((q, a)) < 0.2] = 0.0  # p = 1/2 exactly: not a vote
    ties = rng.random(q) < 0.3
    logits[ties, : a // 2] = 1.5  # equal probabilities above 1/2
    return logits


@pytest.mark.parametrize("tau", [1, 2, 3, 4, 6])
def test_zeroing_an_agent_moves_each_query_sum_by_at_most_sqrt_tau(tau):
    rng = np.random.default_rng(tau)
    for _ in range(40):
        votes = _shipped_votes(_random_logits(rng, 64, 6), tau)  # (Q, A)
        assert np.isin(votes, (0.0, 1.0)).all()
        norms = np.linalg.norm(votes - 0.0, axis=1)  # the zeroed agent's sum contribution is 0
        assert norms.max() <= math.sqrt(tau) + 1e-12


@pytest.mark.parametrize("tau", [1, 2, 3, 4])
def test_changing_the_teacher_moves_each_query_sum_by_at_most_sqrt_2tau(tau):
    """Random pairs of teachers, and every pair of reachable votes on A = 6 attributes."""
    rng = np.random.default_rng(10 + tau)
    for _ in range(40):
        first = _shipped_votes(_random_logits(rng, 64, 6), tau)
        second = _shipped_votes(_random_logits(rng, 64, 6), tau)
        assert np.linalg.norm(first - second, axis=1).max() <= math.sqrt(2 * tau) + 1e-12
    # Every subset S of the 6 attributes as the set a teacher is sure of (p > 1/2), in every
    # order of confidence: the votes reachable are exactly the sets of at most τ attributes.
    reachable = set()
    for size in range(7):
        for chosen in itertools.combinations(range(6), size):
            logits = np.full((1, 6), -2.0)
            logits[0, list(chosen)] = rng.permutation(np.linspace(0.5, 3.0, size)) if size else []
            reachable.add(tuple(_shipped_votes(logits, tau)[0].astype(int)))
    assert reachable == {v for v in itertools.product((0, 1), repeat=6) if sum(v) <= tau}
    distances = [np.linalg.norm(np.subtract(u, v)) for u in reachable for v in reachable]
    assert max(distances) == pytest.approx(math.sqrt(min(2 * tau, 6)))  # tight where 2τ ≤ A
    assert max(np.linalg.norm(v) for v in reachable) == pytest.approx(math.sqrt(tau))  # tight


def test_votes_are_the_top_tau_among_the_attributes_above_one_half():
    p = np.array([[0.9, 0.8, 0.7, 0.6, 0.4], [0.2, 0.1, 0.55, 0.3, 0.99], [0.7, 0.7, 0.7, 0.7, 0.7]])
    np.testing.assert_array_equal(
        clipped_votes(p, 2), [[1, 1, 0, 0, 0], [0, 0, 1, 0, 1], [1, 1, 0, 0, 0]]
    )
    np.testing.assert_array_equal(clipped_votes(p, 5)[0], [1, 1, 1, 1, 0])  # 0.4 never votes


def _independent_pld_epsilon(sigma: float, queries: int, sensitivity: float, delta: float) -> float:
    """dp-accounting's PLD of Q Gaussian releases of std σ at L2 sensitivity s: noise multiplier σ/s."""
    accountant = pld.PLDAccountant()
    accountant.compose(dp_event.GaussianDpEvent(sigma / sensitivity), queries)
    return accountant.get_epsilon(delta)


def _balle_wang_epsilon(mu: float, delta: float) -> float:
    """ε of a μ-GDP Gaussian at δ: the root of Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) = δ (Balle & Wang 2018)."""

    def excess(eps: float) -> float:
        return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2) - delta

    return optimize.brentq(excess, 0.0, 500.0, xtol=1e-12)


@pytest.mark.parametrize(("options", "privacy"), [({"tau": 4}, {"sigma": 30.0}), ({"tau": 3}, {"epsilon": 6.0})])
def test_the_runs_epsilon_at_both_levels_is_the_pld_of_its_sigma_q_and_sensitivity(options, privacy):
    delta = 1e-3
    config = RunConfig.from_dict({
        "method": "pate-fl-multilabel",
        "federation": {"dataset": "multidigit", "agents": 10},
        "teacher": {"model": "logistic", "epochs": 1},
        "student": {"model": "logistic", "epochs": 1},
        "queries": 60,
        "options": options,
        "privacy": {**privacy, "delta": delta, "noise_seed": 0},
    })
    result = run(config)
    tau = options["tau"]
    sigma = result.sigma
    assert result.details["tau"] == tau and result.queries == 60
    for level, sensitivity in (("agent", math.sqrt(tau)), ("instance", math.sqrt(2 * tau))):
        entry = getattr(result.privacy, level)
        assert entry.sensitivity == pytest.approx(sensitivity)
        independent = _independent_pld_epsilon(sigma, 60, sensitivity, delta)
        assert entry.epsilon == pytest.approx(independent, rel=0.01), level
        # and the Gaussian's exact (ε, δ) (Balle & Wang 2018), μ = s√Q/σ: the PLD's tight reference
        exact = _balle_wang_epsilon(sensitivity * math.sqrt(60) / sigma, delta)
        assert entry.epsilon == pytest.approx(exact, rel=0.01), level
    if "epsilon" in privacy:
        assert result.privacy.agent.epsilon == pytest.approx(privacy["epsilon"], rel=0.01)


def test_tau_is_capped_at_the_number_of_attributes():
    config = RunConfig.from_dict({
        "method": "pate-fl-multilabel",
        "federation": {"dataset": "multidigit", "agents": 5},
        "teacher": {"model": "logistic", "epochs": 1},
        "student": {"model": "logistic", "epochs": 1},
        "queries": 20,
        "options": {"tau": 50},
        "privacy": {"sigma": 20.0, "noise_seed": 0},
    })
    result = run(config)
    assert result.details["tau"] == 10 and result.details["tau_requested"] == 50
    assert result.privacy.agent.sensitivity == pytest.approx(math.sqrt(10))
