"""experiments/teacher_variants.py (issue 43): the balanced and abstaining teachers' votes."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def variants(load_experiment):
    return load_experiment("teacher_variants")


def test_balanced_logits_subtract_each_agents_own_smoothed_log_shares(variants):
    logits = np.zeros((2, 3, 3))  # two agents, three queries, three classes; equal logits
    counts = np.array([[8, 1, 0], [0, 0, 9]])
    adjusted = variants.balanced_logits(logits, counts)
    for agent in range(2):  # brute force: (n_k + 1) / (n + C), per agent
        shares = [(counts[agent, k] + 1) / (counts[agent].sum() + 3) for k in range(3)]
        np.testing.assert_allclose(adjusted[agent], np.tile(-np.log(shares), (3, 1)), rtol=1e-12)
    # an agent holding mostly class 0 now votes for a class it holds few of, on an undecided query
    assert adjusted[0, 0].argmax() == 2 and adjusted[1, 0].argmax() in (0, 1)


def test_abstaining_votes_are_one_hot_where_confident_and_zero_elsewhere(variants):
    logits = np.array([[[5.0, 0.0, 0.0], [0.1, 0.0, 0.0]]])  # one agent: a confident query, an undecided one
    votes = variants.abstaining_votes(logits, threshold=0.7)
    np.testing.assert_array_equal(votes, [[[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    assert np.all(np.linalg.norm(votes, axis=-1) <= 1.0)  # the release's norm bound holds for every row
    np.testing.assert_allclose(variants.softmax(logits).sum(axis=-1), 1.0, rtol=1e-12)
