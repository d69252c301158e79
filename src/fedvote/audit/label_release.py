"""Auditing PATE-FL's label release (``--release labels``, Confident-GNMax).

What the server sees of one query is one outcome: "not answered" (the noisy check
max_j(n_j + N(0, σ₁²)) < T failed) or the noisy-argmax label of a second, independent copy
with N(0, σ²) (Papernot et al. 2018, Algorithm 1). The audit draws both copies through the
agents' own exit, exactly as :meth:`fedvote.transport.local.LocalTransport.confident_labels`
does (each agent releases its votes twice, with shares σ₁/√t and σ/√t), and runs the
aggregator's own :func:`~fedvote.aggregation.voting.confident_gnmax_step` on the sums.

Canary: the vote canary of :func:`fedvote.audit.canaries.vote_canary` (agent level: it
votes the others' runner-up class, zero-out removes it; instance level: its vote moves
from the favourite to the runner-up) — where the others' top two are close it flips the
label, and it moves the pass bit where the others sit near T.

Test: the outcomes of the Q queries are independent given the federation, so the most
powerful test thresholds Σ_q log(P_D[o_q] / P_D'[o_q]) (Neyman–Pearson). Those per-query
outcome probabilities have no closed form (a max and an argmax of Gaussians), so they are
estimated from *pilot* releases on D and D' (add-½ smoothing) that are drawn apart from,
and before, the releases that are scored: the score is then a fixed function of one
release, and :func:`fedvote.audit.bounds.audit_scores` applies as to any other test. A
misestimated ratio only costs power, never soundness.

The data-independent claim charges both Gaussians on every query, so the audit is far from
tight: the labels reveal much less than the sums.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from fedvote.aggregation import voting as aggregation_voting
from fedvote.aggregation.voting import confident_gnmax_step
from fedvote.audit.vote_release import VoteRelease

UNANSWERED = -1  # the outcome of a query whose check failed


@dataclass(frozen=True, eq=False)
class LabelRelease:
    """Confident-GNMax on a canary federation: the sums' :class:`VoteRelease` at each copy's share std.

    ``check`` and ``argmax`` are the same federation and canary with the shares σ₁/√t and
    σ/√t; ``threshold`` is T in votes.
    """

    check: VoteRelease
    argmax: VoteRelease
    threshold: float

    @classmethod
    def of(
        cls, sums: VoteRelease, *, threshold: float, threshold_sigma: float, sigma: float, min_responders: int
    ) -> LabelRelease:
        """The label release built on ``sums`` (its agents and canary), with the method's σ₁, σ, t and T."""
        check = dataclasses.replace(
            sums, noise_std=aggregation_voting.noise_share_std(threshold_sigma, min_responders)
        )
        argmax_std = aggregation_voting.noise_share_std(sigma, min_responders)
        argmax = dataclasses.replace(sums, noise_std=argmax_std)
        return cls(check=check, argmax=argmax, threshold=float(threshold))

    @property
    def num_classes(self) -> int:
        """C: a label is in 0..C−1."""
        return int(self.check.clean.shape[2])

    def outcomes(self, canary_in: bool, trials: int) -> np.ndarray:
        """The server's view of ``trials`` releases on D or D': (T, Q) labels, −1 where not answered."""
        check = self.check.received(canary_in, trials)  # (T, Q, C)
        argmax = self.argmax.received(canary_in, trials)  # (T, Q, C), independent of the check's copy
        shape = check.shape
        answered, labels = confident_gnmax_step(
            check.reshape(-1, shape[2]), argmax.reshape(-1, shape[2]), self.threshold
        )
        outcomes = np.full(shape[0] * shape[1], UNANSWERED, dtype=np.int64)
        outcomes[answered] = labels
        return outcomes.reshape(shape[0], shape[1])


def outcome_log_ratios(pilot_in: np.ndarray, pilot_out: np.ndarray, num_classes: int) -> np.ndarray:
    """log(P̂_D[o]/P̂_D'[o]) per query and outcome, (Q, C + 1), from pilot outcomes (T, Q) of each side.

    Column 0 is "not answered", column c + 1 label c; frequencies with add-½ smoothing.
    """
    def frequencies(outcomes: np.ndarray) -> np.ndarray:
        counts = np.stack([np.sum(outcomes == o, axis=0) for o in range(UNANSWERED, num_classes)], axis=1)
        return (counts + 0.5) / (outcomes.shape[0] + 0.5 * (num_classes + 1))  # (Q, C + 1)

    return np.log(frequencies(pilot_in)) - np.log(frequencies(pilot_out))


def outcome_scores(outcomes: np.ndarray, log_ratios: np.ndarray) -> np.ndarray:
    """Σ_q log-ratio[q, o_q] for each trial: ``outcomes`` (T, Q), ``log_ratios`` (Q, C + 1) → (T,)."""
    columns = outcomes - UNANSWERED  # −1 → 0, label c → c + 1
    return np.take_along_axis(log_ratios[None, :, :], columns[:, :, None], axis=2)[:, :, 0].sum(axis=1)
