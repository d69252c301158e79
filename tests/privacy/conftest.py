"""Checks shared by the privacy tests."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from dp_accounting.pld import pld_pmf


def _assert_same_pmf(got: pld_pmf.PLDPmf, expected: pld_pmf.PLDPmf) -> None:
    """The same kind of PMF, the same losses and probabilities bit for bit, the same mass at infinity."""
    assert type(got) is type(expected)
    if isinstance(expected, pld_pmf.DensePLDPmf):
        assert got._lower_loss == expected._lower_loss  # noqa: SLF001
        np.testing.assert_array_equal(got._probs, expected._probs)  # noqa: SLF001
    else:
        assert got._loss_probs == expected._loss_probs  # noqa: SLF001
    assert got._infinity_mass == expected._infinity_mass  # noqa: SLF001


@pytest.fixture
def assert_same_pmf() -> Callable[[pld_pmf.PLDPmf, pld_pmf.PLDPmf], None]:
    """``assert_same_pmf(got, expected)``: the PMFs fedvote builds against dp-accounting's, to the bit."""
    return _assert_same_pmf
