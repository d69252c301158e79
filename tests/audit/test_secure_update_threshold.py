"""DP-FedAvg's in-process secure update sum unmasks with max(t, ⌊N/2⌋ + 1) agents, as docs/privacy.md says.

Before: the threshold was ⌊N/2⌋ + 1 whatever ``--min-responders`` t was (6 of 10 agents
with t = 8), so fewer agents than the t whose shares carry σS could have unmasked the sum.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedvote.methods.dp_fedavg import DpFedAvg
from fedvote.transport.local import LocalTransport
from fedvote.transport.local import updates as local


@pytest.fixture(scope="module")
def federation() -> Any:
    from fedvote.runner import build_config, make_federation

    return make_federation(build_config(method="dp-fedavg", agents=10))


@pytest.mark.parametrize(("t", "expected"), [(8, 8), (3, 6), (None, 10)])
def test_the_secure_update_sum_threshold_is_the_larger_of_t_and_a_majority(
    federation: Any, monkeypatch: pytest.MonkeyPatch, t: int | None, expected: int
) -> None:
    thresholds: list[int] = []
    summed = local.secure_sum

    def spy(releases, *, threshold, codec):  # noqa: ANN001
        thresholds.append(threshold)
        return summed(releases, threshold=threshold, codec=codec)

    monkeypatch.setattr(local, "secure_sum", spy)
    method = DpFedAvg(sigma=1.0, model="logistic", local_steps=2).with_min_responders(t)
    n = federation.num_agents
    training = method.round_training(0, 0.1, 2, n)
    transport = LocalTransport(federation, seed=0, noise_seed=3, secure_sum=True)
    total = transport.secure_update_sum(np.zeros(650, np.float32), np.array([1, 4]), training)
    assert thresholds == [expected] and total.shape == (650,)
