"""The audit can fail: a broken mechanism is caught, the sound one is not (issue 19, item 3).

The break is injected through a test-only hook, never a flag: the tests monkeypatch the
noise code every voting run executes — the agents' one exit (``Agent.release``) or the
noise-share rule (``noise_share_std``) — so the audit catches the bug where a real run
would have it.
"""

from __future__ import annotations

import pytest

from fedvote.aggregation import voting
from fedvote.audit import audit

TRIALS = 10_000


def test_the_sound_release_stays_below_its_claim_and_gets_close(small_audit) -> None:
    result = audit("pate-fl", "agent", TRIALS, **small_audit)
    assert result.claimed_epsilon == pytest.approx(2.0, abs=1e-3)
    assert 0.5 * result.claimed_epsilon <= result.epsilon_lower_bound <= result.claimed_epsilon
    assert not result.violated


def test_halved_noise_at_the_agents_exit_is_caught(small_audit, cut_agent_noise) -> None:
    cut_agent_noise(2)
    result = audit("pate-fl", "agent", TRIALS, **small_audit)
    assert result.violated and result.epsilon_lower_bound > result.claimed_epsilon


def test_a_noise_share_rule_that_forgets_the_threshold_is_caught(
    monkeypatch: pytest.MonkeyPatch, small_audit
) -> None:
    # Each agent adds σ/t instead of σ/√t: the sum's noise is σ/√t, a factor √10 too small.
    monkeypatch.setattr(voting, "noise_share_std", lambda sigma, min_responders: sigma / min_responders)
    result = audit("pate-fl", "instance", TRIALS, **small_audit)
    assert result.epsilon_lower_bound > result.claimed_epsilon
