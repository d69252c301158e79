"""Auditing PATE-FL's ``--release labels`` (Confident-GNMax): below its claim, and able to rise.

The outcomes the server sees are pass bits and labels; the test is the likelihood ratio
of the per-query outcomes estimated on separate pilot releases (:mod:`fedvote.audit.label_release`).
The data-independent claim charges both Gaussians on every query, so the bound is far from
tight; a broken release (each agent's shares at half their std, a test-only monkeypatch of
the agents' exit) must raise it.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedvote.audit import audit
from fedvote.audit.label_release import UNANSWERED, outcome_log_ratios, outcome_scores

TRIALS = 10_000


def test_outcome_ratios_and_scores_by_hand() -> None:
    # one query, two classes: D answers label 1 three times in four, D' never answers
    pilot_in = np.array([[1], [1], [1], [UNANSWERED]])
    pilot_out = np.array([[UNANSWERED]] * 4)
    ratios = outcome_log_ratios(pilot_in, pilot_out, 2)  # (1, 3): unanswered, 0, 1
    denominator = 4 + 0.5 * 3
    expected = np.log(np.array([1.5, 0.5, 3.5]) / denominator) - np.log(np.array([4.5, 0.5, 0.5]) / denominator)
    np.testing.assert_allclose(ratios[0], expected)
    scores = outcome_scores(np.array([[1], [UNANSWERED], [0]]), ratios)
    np.testing.assert_allclose(scores, [expected[2], expected[0], expected[1]])


def test_the_label_release_is_audited_below_its_claim_and_a_broken_one_rises(
    small_audit, cut_agent_noise
) -> None:
    settings = {**small_audit, "release": "labels"}
    sound = audit("pate-fl", "agent", TRIALS, **settings)
    assert sound.details["release"] == "labels"
    assert sound.claimed_epsilon == pytest.approx(2.0, abs=1e-3)
    assert 0.0 <= sound.epsilon_lower_bound <= sound.claimed_epsilon and not sound.violated

    cut_agent_noise(2)
    halved = audit("pate-fl", "agent", TRIALS, **settings)
    assert halved.epsilon_lower_bound > sound.epsilon_lower_bound + 0.5
