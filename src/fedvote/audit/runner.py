"""Running the audited release many times on each neighbour, in chunks, with progress."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fedvote.audit.distinguishers import projection_scores
from fedvote.audit.vote_release import VoteRelease
from fedvote.progress import NO_PROGRESS, Progress

# Rows (trials × queries) of one release call per agent: a few MB per agent's chunk.
CHUNK_ROWS = 50_000


def vote_scores(
    release: VoteRelease, trials: int, progress: Progress = NO_PROGRESS
) -> tuple[np.ndarray, np.ndarray]:
    """The test's scores (trials,) on D and on D': ``trials`` independent releases of each.

    The two neighbours are released alternately, chunk by chunk, so an interrupted or slowed
    run treats both alike.
    """
    queries = release.clean.shape[1]
    chunk = max(1, CHUNK_ROWS // queries)
    score: Callable[[np.ndarray], np.ndarray] = lambda received: projection_scores(  # noqa: E731
        received, release.baseline, release.canary.difference
    )
    scores_in: list[np.ndarray] = []
    scores_out: list[np.ndarray] = []
    with progress.step("releasing votes on D and D'", total=2 * trials) as bar:
        for start in range(0, trials, chunk):
            count = min(chunk, trials - start)
            scores_in.append(score(release.received(True, count)))
            scores_out.append(score(release.received(False, count)))
            bar.advance(2 * count)
    return np.concatenate(scores_in), np.concatenate(scores_out)
