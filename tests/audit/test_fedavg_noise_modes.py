"""One-run audits of DP-FedAvg's ``server`` and ``distributed-unmasked`` noise (both below their claims).

``server``: the trusted server's noise is drawn by the method's own ``aggregate``; the
audit observes what every observer of the models can compute, as for ``distributed``.
``distributed-unmasked``: the server sees each sampled canary's own noisy update and the
sample; its claim (no sampling credit, m_t ≤ N shares) is loose, so the one-run bound is
weak, but it must rise when the agents' shares are cut (a test-only monkeypatch).
"""

from __future__ import annotations

import dataclasses

import pytest

from fedvote.audit import audit
from fedvote.errors import ConfigError
from fedvote.methods.dp_fedavg import DpFedAvg

CANARIES = 200
SETTINGS = {"epsilon": 4.0, "noise_seed": 1, "sampling_rate": 0.05}  # as sized (the planned 0.2: see below)


@pytest.mark.parametrize("noise", ["server", "distributed-unmasked"])
@pytest.mark.parametrize("level", ["agent", "instance"])
def test_the_noise_modes_stay_below_their_claims(noise: str, level: str) -> None:
    result = audit("dp-fedavg", level, CANARIES, noise=noise, **SETTINGS)
    assert result.mode == "one-run" and result.details["noise"] == noise
    assert 0.0 <= result.epsilon_lower_bound <= result.claimed_epsilon
    assert not result.violated


def test_cut_shares_in_the_unmasked_mode_raise_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    sound = audit("dp-fedavg", "instance", CANARIES, noise="distributed-unmasked", **SETTINGS)
    share = DpFedAvg.noise_share
    monkeypatch.setattr(DpFedAvg, "noise_share", lambda self, sampled, n: share(self, sampled, n) / 10)
    broken = audit("dp-fedavg", "instance", CANARIES, noise="distributed-unmasked", **SETTINGS)
    assert broken.epsilon_lower_bound > sound.epsilon_lower_bound + 0.3


def test_cut_server_noise_raises_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    sound = audit("dp-fedavg", "instance", CANARIES, noise="server", **SETTINGS)
    aggregate = DpFedAvg.aggregate

    def broken(self, theta, received, rng, num_agents):  # noqa: ANN001
        return aggregate(dataclasses.replace(self, sigma=self.sigma / 10), theta, received, rng, num_agents)

    monkeypatch.setattr(DpFedAvg, "aggregate", broken)
    cut = audit("dp-fedavg", "instance", CANARIES, noise="server", **SETTINGS)
    assert cut.epsilon_lower_bound > sound.epsilon_lower_bound + 0.3


def test_canaries_that_could_outnumber_the_unmasked_n_are_refused_before_the_run(monkeypatch):
    """Unmasked, no sampling credit: the planned q is the cap, 1 (cohort.py); 200 canaries then outnumber N = 50."""
    monkeypatch.setattr(DpFedAvg, "run", lambda *args, **kwargs: pytest.fail("the run started"))
    with pytest.raises(ConfigError, match="trials: 200 canaries at q = 1 can sample more than the planned N = 50"):
        audit("dp-fedavg", "agent", CANARIES, noise="distributed-unmasked", epsilon=4.0, noise_seed=1)
