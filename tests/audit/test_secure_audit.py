"""``fedvote audit --secure-noise``: PATE-FL's discrete Gaussian release, audited against its discrete claim.

The agents are built as a ``--secure-noise`` run builds them (OpenDP's exact sampler on
the CSPRNG), so the sampler and the KLS21 accounting are what the audit tests. The
sampler costs ~15 µs a value on the shared cores, so the federation is small (5 agents,
10 queries) and the trials few; the bound is loose but must stay below the claim, and a
share of a quarter of the std (a test-only monkeypatch of the agents' exit) must be caught
(at 2,000 trials a halved share measured 1.95 against a claim of 2.00: too close to call
at this sample size; the halved-noise power test of the Gaussian path is test_power.py's).
"""

from __future__ import annotations

import pytest

from fedvote.audit import audit
from fedvote.errors import ConfigError

SMALL = {
    "agents": 5,
    "queries": 10,
    "teacher_model": "logistic",
    "epochs": 2,
    "epsilon": 2.0,
    "seed": 0,
    "secure_noise": True,
}
TRIALS = 2_000


@pytest.mark.slow  # OpenDP's exact sampler at ~15 µs a draw: over 30 s each; make test-slow (CI)
def test_the_secure_release_stays_below_its_discrete_claim() -> None:
    result = audit("pate-fl", "agent", TRIALS, **SMALL)
    assert result.details["noise_source"] == "csprng-discrete-gaussian"
    assert result.claimed_epsilon == pytest.approx(2.0, abs=1e-3)  # calibrated on the discrete events
    assert 0.0 < result.epsilon_lower_bound <= result.claimed_epsilon
    assert not result.violated


@pytest.mark.slow  # OpenDP's exact sampler at ~15 µs a draw: over 30 s each; make test-slow (CI)
def test_a_quartered_discrete_share_is_caught(cut_agent_noise) -> None:
    cut_agent_noise(4)
    result = audit("pate-fl", "agent", TRIALS, **SMALL)
    assert result.violated and result.epsilon_lower_bound > result.claimed_epsilon


def test_secure_noise_is_refused_for_the_methods_whose_secure_release_is_not_audited() -> None:
    with pytest.raises(ConfigError, match="pate-fl"):
        audit("dp-fedsgd", "instance", 10, agents=5, rounds=1, sigma=1.0, secure_noise=True)
