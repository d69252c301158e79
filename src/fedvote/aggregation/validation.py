"""Validation of a vote where it leaves the agent: malformed votes are refused, never summed.

A vote's L2 sensitivity (``docs/privacy.md``) holds only if every vote is what the
accounting assumes: a (Q, C) array of finite, non-negative entries whose rows each
total at most the vote's bound (1 for a one-hot or a kNN mean vote; w_max for a
weighted vote), with exactly one non-zero entry per row for one-hot kinds. For
non-negative rows ‖v‖₂ ≤ ‖v‖₁ ≤ bound, and two such rows differ by at most √2·bound.
"""

from __future__ import annotations

import math

import numpy as np

from fedvote.errors import VoteRejected

# Rows may exceed their bound by this much (relative) from float rounding: a kNN mean
# vote of k labels sums k terms of 1/k.
BOUND_TOLERANCE = 1e-9


def validate_vote(
    votes: np.ndarray,
    *,
    agent_id: int,
    num_classes: int,
    num_queries: int | None = None,
    bound: float = 1.0,
    one_hot: bool = False,
) -> np.ndarray:
    """``votes`` as a new float64 (Q, C) array, or :class:`VoteRejected` naming the agent and the fault.

    Parameters
    ----------
    votes : np.ndarray
        The agent's clean votes, (Q, C), before its noise share is added.
    agent_id : int
        Named in the error.
    num_classes : int
        C.
    num_queries : int or None
        Q when the caller knows it (None: any number of rows).
    bound : float
        Largest total weight of one row (default 1; 0 admits only all-zero rows).
    one_hot : bool
        Require exactly one non-zero entry per row (a one-hot or weighted one-hot vote).

    """
    if not (math.isfinite(bound) and bound >= 0):
        raise ValueError(f"bound must be a finite number >= 0, got {bound}")
    array = np.asarray(votes)
    rows = "Q" if num_queries is None else str(num_queries)
    if (
        array.ndim != 2
        or array.shape[1] != num_classes
        or (num_queries is not None and array.shape[0] != num_queries)
    ):
        raise VoteRejected(agent_id, f"vote has shape {tuple(array.shape)}, expected ({rows}, {num_classes})")
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.number) or np.iscomplexobj(array):
        raise VoteRejected(agent_id, f"vote has dtype {array.dtype}, expected real numbers")
    checked = np.array(array, dtype=np.float64)  # (Q, C), a copy
    bad = np.argwhere(~np.isfinite(checked))
    if bad.size:
        row, column = (int(i) for i in bad[0])
        raise VoteRejected(agent_id, f"vote row {row} holds {checked[row, column]} (class {column})")
    bad = np.argwhere(checked < 0)
    if bad.size:
        row, column = (int(i) for i in bad[0])
        value = checked[row, column]
        raise VoteRejected(agent_id, f"vote row {row} has negative weight {value:g} (class {column})")
    totals = checked.sum(axis=1)  # (Q,)
    over = np.flatnonzero(totals > bound * (1.0 + BOUND_TOLERANCE))
    if over.size:
        row = int(over[0])
        raise VoteRejected(agent_id, f"vote row {row} sums to {totals[row]:g} > bound {bound:g}")
    if one_hot:
        counts = np.count_nonzero(checked, axis=1)  # (Q,)
        wrong = np.flatnonzero(counts != 1)
        if wrong.size:
            row = int(wrong[0])
            raise VoteRejected(
                agent_id, f"vote row {row} has {counts[row]} non-zero entries; a one-hot vote has exactly 1"
            )
    return checked
