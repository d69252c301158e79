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


def _bar(pool, pool_labels, test, test_labels, sigma, agents=5):
    """A stand-in BarFederation: what perfect_row and read_sums read of it."""
    from types import SimpleNamespace

    public = SimpleNamespace(labels=pool_labels)
    federation = SimpleNamespace(num_agents=agents, num_classes=3, public=public)
    return SimpleNamespace(federation=federation, pool=pool, test=test, test_labels=test_labels, sigma=sigma)


def test_perfect_teachers_vote_the_pools_true_labels_and_read_them_without_noise(variants):
    """Separable classes: the noiseless sums of perfect teachers teach every test point; σ huge spoils them."""
    rng = np.random.default_rng(0)
    centres = 4.0 * np.eye(3)
    pool_labels, test_labels = np.repeat(np.arange(3), 40), np.repeat(np.arange(3), 20)
    pool = centres[pool_labels] + rng.normal(0.0, 0.3, (120, 3))
    test = centres[test_labels] + rng.normal(0.0, 0.3, (60, 3))
    clean = variants.perfect_row(_bar(pool, pool_labels, test, test_labels, sigma=1e-9), 0.85)
    assert clean["clean"] == 1.0 and clean["noisy"] == [1.0] * len(clean["noisy"]) and clean["bar"] == 0.85
    drowned = variants.perfect_row(_bar(pool, pool_labels, test, test_labels, sigma=1e4), 0.85)
    assert drowned["clean"] == 1.0 and np.mean(drowned["noisy"]) < 0.85


@pytest.mark.parametrize(("noisy", "verdict"), [([0.58, 0.59], "below"), ([0.61, 0.62], "at or above")])
def test_the_perfect_line_says_whether_the_bar_is_within_reach(variants, noisy, verdict):
    (_, line) = variants.perfect_lines({"clean": 0.646, "noisy": noisy, "bar": 0.60})
    assert f"mean {np.mean(noisy):.3f} — {verdict} the Bar's 0.60" in line
    assert ("do not reach it" in line) == (verdict == "below")
    assert variants.perfect_lines(None) == []
