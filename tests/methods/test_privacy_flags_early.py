"""A privacy flag a method cannot take is refused before any data is loaded (no feature work wasted).

``fedvote run --method fedavg --epsilon 4 --dataset cifar10`` used to compute CIFAR-10's patch
features (minutes) and only then refuse ``--epsilon`` at planning; FedAUXfdp's ``--epsilon`` /
``--sigma`` likewise. :func:`fedvote.methods.check_method` now asks the method first.
"""

from __future__ import annotations

import pytest

import fedvote.runner as runner
from fedvote.errors import ConfigError
from fedvote.runner import build_config


@pytest.fixture
def no_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the run gets as far as loading data."""

    def loaded(*args, **kwargs):  # noqa: ANN002, ANN003
        raise AssertionError("data was loaded before the flags were checked")

    monkeypatch.setattr(runner, "make_federation", loaded)


@pytest.mark.parametrize(
    ("method", "settings", "flag", "says"),
    [
        ("fedavg", {"epsilon": 4.0}, "epsilon", "fedavg is not private"),
        ("fedaux-fdp", {"epsilon": 4.0}, "epsilon", "budget per head"),
        ("fedaux-fdp", {"sigma": 1.0}, "sigma", "derives σ"),
        ("fedavg-p", {"epsilon": 4.0}, "epsilon", "budget per head"),
    ],
)
def test_refused_before_the_data(no_data: None, method: str, settings: dict, flag: str, says: str) -> None:
    config = build_config(method, agents=5, **settings)
    with pytest.raises(ConfigError, match=says) as refused:
        runner.run(config)
    assert refused.value.argument == flag


def test_a_private_method_keeps_its_epsilon(no_data: None) -> None:
    with pytest.raises(AssertionError, match="data was loaded"):  # got past the flags, to the data
        runner.run(build_config("dp-fedavg", agents=5, epsilon=4.0))
