"""``--student-targets vote-sums`` for Private-kNN-FL and majority vote (issue 43).

PATE-FL's regression student (``tests/methods/test_pate_fl_vote_sums.py``) is shared by every
method whose server receives vote sums; the contract suite checks that each plans it from the
example shape. Here, end to end on digits with the targets forced: the student is fitted to
exactly the sums the run released (post-processing: the ε equals the label student's at the
same σ and Q), every released query teaches it, and the released labels are those sums'
argmaxes. Majority vote's sums are its clean one-hot votes: integer counts summing to N.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedvote.runner import run
from fedvote.settings import build_config

QUERIES = 40
AGENTS = 8


@pytest.mark.parametrize(
    ("method", "settings"),
    [
        ("private-knn-fl", {"sigma": 3.0, "feature_dim": 8}),
        ("majority-vote", {"teacher_model": "logistic", "epochs": 3}),
    ],
)
def test_the_student_fits_the_released_sums(
    regressed_sums: dict[str, np.ndarray], method: str, settings: dict[str, Any]
) -> None:
    seen = regressed_sums
    common = {"agents": AGENTS, "queries": QUERIES, "seed": 2, **settings}
    regressed = run(build_config(method, student_targets="vote-sums", **common))
    assert seen["sums"].shape == (QUERIES, 10)
    assert seen["features"].shape[0] == QUERIES
    assert regressed.details["student_queries"] == QUERIES  # every released query, whatever its margin
    assert regressed.details["student_targets"] == "vote-sums"
    np.testing.assert_array_equal(regressed.analysis.pseudo_labels, seen["sums"].argmax(axis=1))
    labelled = run(build_config(method, student_targets="labels", student_epochs=2, **common))
    assert labelled.details["student_targets"] == "labels"
    for level in ("agent", "instance"):
        got, want = getattr(regressed.privacy, level).epsilon, getattr(labelled.privacy, level).epsilon
        assert got == pytest.approx(want, rel=1e-12) if want is not None else got is None
    if method == "majority-vote":  # clean one-hot votes: counts of the N agents
        np.testing.assert_array_equal(seen["sums"], np.round(seen["sums"]))
        np.testing.assert_array_equal(seen["sums"].sum(axis=1), np.full(QUERIES, AGENTS))


def test_a_bad_value_is_refused_by_name() -> None:
    from fedvote.errors import ConfigError

    for method in ("private-knn-fl", "majority-vote", "weighted-pate"):
        with pytest.raises(ConfigError, match="student_targets"):
            build_config(method, student_targets="sums")


def _gaussian_epsilon(mu: float, delta: float) -> float:
    """ε of μ-GDP at ``delta`` from the closed form (Dong, Roth & Su 2022, Cor. 2.13), by root finding."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    def excess(epsilon: float) -> float:
        return norm.cdf(-epsilon / mu + mu / 2) - np.exp(epsilon) * norm.cdf(-epsilon / mu - mu / 2) - delta

    return float(brentq(excess, 0.0, 100.0, xtol=1e-12))


def test_private_knn_fl_instance_level_does_not_grow_with_the_whole_pool() -> None:
    """At agent ε 4, asking the whole pool (vote sums, Q = 3,000) leaves the instance ε where Q = 200 had it.

    Both levels are Gaussian compositions of the same Q releases, sensitivities 1 and √2/k_min
    (docs/privacy.md): the instance μ is √2/k_min times the agent μ, which calibration fixes.
    Each planned instance ε is checked against the closed form at that μ.
    """
    from fedvote.data.federation import PublicMetadata
    from fedvote.privacy.accountant import epsilon_for
    from fedvote.runner import plan

    delta, k_min = 1e-3, 25  # 5 % of each agent's 500 records
    wide = PublicMetadata(
        pool_size=3_000, num_agents=100, num_classes=10, example_shape=(1_600,), agent_records=(500,) * 100
    )
    epsilons = {}
    for targets, queries in (("vote-sums", 3_000), ("labels", 200)):
        planned = plan(build_config("private-knn-fl", epsilon=4.0, delta=delta, student_targets=targets), wide)
        assert planned.queries == queries
        mu = np.sqrt(2.0) / k_min * np.sqrt(planned.queries) / planned.sigma
        epsilons[targets] = epsilon_for(planned.planned_events().at("instance"), delta, "pld")
        assert epsilons[targets] == pytest.approx(_gaussian_epsilon(mu, delta), rel=1e-3)
    assert epsilons["vote-sums"] == pytest.approx(epsilons["labels"], rel=1e-3)
