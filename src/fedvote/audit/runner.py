"""Running the audited release many times on each neighbour, in chunks, with progress."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from fedvote.audit.distinguishers import projection_scores
from fedvote.progress import NO_PROGRESS, Progress


class AuditedRelease(Protocol):
    """A release the multi-trial audit runs: the server's view on D or D', its noiseless D' view and Δ."""

    @property
    def baseline(self) -> np.ndarray:
        """What the server receives in D' without noise."""
        ...

    @property
    def difference(self) -> np.ndarray:
        """What the canary adds in D (whitened where the noise is not isotropic)."""
        ...

    def received(self, canary_in: bool, trials: int) -> np.ndarray:
        """``trials`` independent releases on D (``canary_in``) or D', (T, *shape)."""
        ...


# Rows (trials × queries) of one release call per agent: a few MB per agent's chunk.
CHUNK_ROWS = 50_000


def release_scores(
    release: AuditedRelease, trials: int, rows_per_trial: int, progress: Progress = NO_PROGRESS
) -> tuple[np.ndarray, np.ndarray]:
    """The test's scores (trials,) on D and on D': ``trials`` independent releases of each.

    The two neighbours are released alternately, chunk by chunk, so an interrupted or slowed
    run treats both alike.
    """
    chunk = max(1, CHUNK_ROWS // rows_per_trial)
    baseline, difference = release.baseline, release.difference

    def score(received: np.ndarray) -> np.ndarray:
        return projection_scores(received, baseline, difference)

    scores_in: list[np.ndarray] = []
    scores_out: list[np.ndarray] = []
    with progress.step("releasing on D and D'", total=2 * trials) as bar:
        for start in range(0, trials, chunk):
            count = min(chunk, trials - start)
            scores_in.append(score(release.received(True, count)))
            scores_out.append(score(release.received(False, count)))
            bar.advance(2 * count)
    return np.concatenate(scores_in), np.concatenate(scores_out)
