"""Canaries: the one contribution in which two neighbouring federations differ, chosen near worst case.

An audit compares a federation D holding the canary with its neighbour D' under the
adjacency of the level audited (``docs/privacy.md``, "Adjacency"):

* **agent level, zero-out** — in D the canary agent contributes its vote; in D' it
  contributes zeros and *still adds its noise share* (fedvote's zero-out adjacency), so
  the number of noise shares, and σ, are the same in both;
* **instance level, replace-one** — one record of the canary agent is replaced. The
  canary is the record whose replacement moves the agent's release the most the proof
  allows: the agent's vote moves from the class the other agents favour to their
  runner-up on every query (a mislabelled outlier that flips a teacher everywhere; for a
  kNN vote, one of the k neighbours relabelled).

For a Gaussian release of vote sums every canary whose two votes differ by the
sensitivity s in L2 is a worst case: the privacy loss depends on ‖Δ‖₂/σ alone. Voting
the runner-up where the others split also makes the canary worst case for what the
noisy argmax reveals (the label flips most easily there). The canaries are *vote-level*
(the adversary of Nasr et al. 2021, §4, who chooses the contribution directly): they test
the noise and the accounting of the release as run, not whether a real record can move a
teacher that far (the sensitivity proofs in ``docs/privacy.md`` cover that).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedvote.aggregation.voting import one_hot_votes

LEVELS: tuple[str, ...] = ("agent", "instance")


@dataclass(frozen=True, eq=False)
class VoteCanary:
    """The canary agent's clean vote in D (``present``) and in D' (``absent``), (Q, C) each.

    ``absent`` None is zero-out: in D' the agent sends its noise share alone.
    ``description`` says what the canary is, for the audit's report.
    """

    level: str
    present: np.ndarray
    absent: np.ndarray | None
    description: str

    @property
    def baseline(self) -> np.ndarray:
        """What the canary contributes in D', (Q, C): ``absent``, or zeros (zero-out)."""
        return np.zeros_like(self.present) if self.absent is None else self.absent

    @property
    def difference(self) -> np.ndarray:
        """Δ = present − baseline, (Q, C); ‖Δ‖₂ per query is the sensitivity the canary reaches."""
        return self.present - self.baseline


def split_classes(others: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The other agents' favourite and runner-up class per query, (Q,) each, from their clean sums (Q, C).

    Ties go to the lower class index (a stable sort), so the choice is a function of the sums.
    """
    order = np.argsort(-np.asarray(others, dtype=np.float64), axis=1, kind="stable")  # (Q, C)
    return order[:, 0].astype(np.int64), order[:, 1].astype(np.int64)


def vote_canary(level: str, others: np.ndarray, *, weight: float = 1.0, k: int | None = None) -> VoteCanary:
    """The worst-case canary vote for a vote release at ``level`` given the others' clean sums (Q, C).

    ``weight``: the canary's vote weight (weighted voting: w_max, the largest the accounting
    allows). ``k``: a kNN vote (the mean label of k neighbours; None: a one-hot teacher vote).

    agent level: the canary votes the others' runner-up class with its whole weight, and
    zero-out removes it: ‖Δ‖₂ = w (kNN: all k neighbours labelled the runner-up, ‖Δ‖₂ = 1).
    instance level: its vote moves from the favourite class to the runner-up,
    ‖Δ‖₂ = √2·w (kNN: one of the k neighbours relabelled, ‖Δ‖₂ = √2/k).
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if not weight > 0:
        raise ValueError(f"weight must be > 0, got {weight}")
    if k is not None and k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    favourite, runner_up = split_classes(others)
    num_classes = others.shape[1]
    toward = weight * one_hot_votes(runner_up, num_classes)  # (Q, C)
    kind = "one-hot" if k is None else f"kNN (k = {k})"
    if level == "agent":
        return VoteCanary(
            level=level,
            present=toward,
            absent=None,
            description=f"canary agent voting the others' runner-up class ({kind}, weight {weight:g}) "
            "on every query vs the same agent zeroed out (noise share only)",
        )
    away = weight * one_hot_votes(favourite, num_classes)
    if k is not None:  # one of the k neighbours relabelled from the favourite to the runner-up
        away = toward * (k - 1) / k + away / k
    return VoteCanary(
        level=level,
        present=toward,
        absent=away,
        description=f"canary record that moves its agent's vote ({kind}, weight {weight:g}) from the "
        "others' favourite class to their runner-up on every query",
    )
