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
import torch

from fedvote.methods import voting
from fedvote.runner import run
from fedvote.settings import build_config

QUERIES = 40
AGENTS = 8


def _spy(monkeypatch: pytest.MonkeyPatch) -> dict[str, np.ndarray]:
    seen: dict[str, np.ndarray] = {}
    fit_sums = voting.vote_regression_student

    def spy(features: np.ndarray, sums: np.ndarray) -> torch.nn.Module:
        seen["features"], seen["sums"] = features, sums
        return fit_sums(features, sums)

    monkeypatch.setattr(voting, "vote_regression_student", spy)
    return seen


@pytest.mark.parametrize(
    ("method", "settings"),
    [
        ("private-knn-fl", {"sigma": 3.0, "feature_dim": 8}),
        ("majority-vote", {"teacher_model": "logistic", "epochs": 3}),
    ],
)
def test_the_student_fits_the_released_sums(
    monkeypatch: pytest.MonkeyPatch, method: str, settings: dict[str, Any]
) -> None:
    seen = _spy(monkeypatch)
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
