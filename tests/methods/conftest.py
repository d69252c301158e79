"""Fixtures shared by the method tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedvote.methods import voting


@pytest.fixture
def regressed_sums(monkeypatch: pytest.MonkeyPatch) -> dict[str, np.ndarray]:
    """What the vote-sum student is fitted to: its ``features`` and ``sums``, recorded on each fit."""
    seen: dict[str, np.ndarray] = {}
    fit_sums = voting.vote_regression_student

    def spy(features: np.ndarray, sums: np.ndarray, **kwargs: object) -> torch.nn.Module:
        seen["features"], seen["sums"] = features, sums
        return fit_sums(features, sums, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(voting, "vote_regression_student", spy)
    return seen
