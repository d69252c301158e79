"""Sweeps: one method (or several) over a grid of ε, σ, Q or δ, reusing what does not change.

A privacy–accuracy curve needs many runs that differ only in the noise and the number of
queries. Everything upstream of the noise — the federation, the teachers (or kNN indices)
and the *clean* vote sums — is the same at every grid point, so a sweep builds them once
per (method, seed) and then, per point, redraws only the noise, the noisy argmax, the
student and the accounting (:class:`ReusedVotesTransport`): PATE-FL, Private-kNN-FL and
reputation-weighted PATE (:data:`~fedvote.sweep.points.REUSES_VOTES`). Every other method
— gradient methods, PriFedSync, FedAUXfdp and its baselines, and any method added later —
has no clean part the reused transport knows how to keep (its training *is* the noisy
release) and runs afresh at each point, on a fresh in-process transport seeded with the
point's own noise seed. Either way the transport holds the federation as the method
prepared it (:func:`fedvote.runner.prepare_public`: weighted-pate's and PriFedSync's
labelled validation slice), so its public pool is the method's.

**A non-private method is a reference.** A method with nothing to calibrate whose every
planned release is non-private at both levels (FedAvg, majority-vote:
:func:`~fedvote.sweep.points.is_reference`) is the same run at every ε, σ or δ: it runs
once per seed (and per value of the axes that still change it, ``queries``) and its row
says ``reference: true``, without the axes that do not apply. Reports draw it as a dashed
horizontal line.

Under ``--noise-seed S`` every run of the sweep — each method, seed and grid point —
draws its own noise: its config carries :func:`fedvote.privacy.noise_seeds.run_noise_seed`
(S, method, k), k being the run's index among that method's runs (seed-major, then grid
point), and the reused transport is reseeded with it before the run. Two rows never
share a noise stream, and a row is reproduced by rerunning the sweep.

**Every point is a release.** Each grid point's run is charged, before it releases
anything, to one ledger per federation (the config's ``--ledger``, else in memory; a
:class:`~fedvote.privacy.ledger.LedgerSession` per point, so each row reports its own ε).
Before the first point, the planned events of *all* points on a federation are summed
and checked against its stored budget: a sweep that would overrun it releases nothing.
``sweep.json`` states the total ε of all points' charges.

The output (:func:`write_sweep`) is ``sweep.json`` — the grid, the base config, the
machine, and one row per (method, seed, point) — and ``sweep.csv`` with the same rows.

**A completed point is never lost.** With an output directory (:class:`SweepStore`,
``fedvote sweep --out D``), each point's row is written to ``D/points/<n>.json`` (atomically,
with the charges it made) as soon as the point is done, ``n`` being its place in run order
(from 1, as the progress lines count); ``D/points/plan.json``, written before the first
point, names the sweep (each method's config, the grid, the seeds) and its points. An
interrupted or failed sweep still rewrites ``sweep.json`` and ``sweep.csv`` with the rows
done (``"complete": false``). ``fedvote sweep ... --resume`` reads the rows back, refuses a
directory of another sweep (other settings, grid or seeds) in one line, and runs only the
remaining points: the completed ones are neither rerun nor charged again (the ledger
already holds their charges), and the budget check before the first point covers only the
remaining ones. A point's noise seed depends on its place in the sweep, not on what ran
before it, so a resumed sweep under ``--noise-seed`` gives the rows an uninterrupted one
would. Every charge is also appended to ``D/points/charges.jsonl`` before the ledger
records it (:mod:`~fedvote.sweep.journal`): a point stopped after its release, whose row
was never written, is run and charged again on resume, and the sweep's total composes
both charges, as the ledger does.

**One sweep per directory.** A fresh sweep refuses a non-empty ``D`` (``--out``, one line)
unless ``--overwrite``; and the sweep writing ``D`` holds an exclusive lock on ``D/.lock``
for its life (:mod:`~fedvote.sweep.lock`), so a second sweep into ``D`` is refused, before
anything is charged, instead of replacing the first one's grid.

The package, one job a module: :mod:`~fedvote.sweep.grid` (the axes and a config at a
point), :mod:`~fedvote.sweep.points` (each method's runs, in run order),
:mod:`~fedvote.sweep.ledgers` (the charges, the budget check, the total ε),
:mod:`~fedvote.sweep.execute` (:func:`run_sweep`), :mod:`~fedvote.sweep.store` and
:mod:`~fedvote.sweep.identity` (the output directory and resume),
:mod:`~fedvote.sweep.journal` (every charge as it is made), :mod:`~fedvote.sweep.lock`
(one sweep per directory), :mod:`~fedvote.sweep.results` (rows, ``sweep.json``, ``sweep.csv``).
"""

from fedvote.sweep.execute import run_sweep
from fedvote.sweep.grid import grid_points, parse_grid, point_config, reference_points, with_run_noise_seed
from fedvote.sweep.points import reuses_votes
from fedvote.sweep.results import PointDone, format_duration, write_sweep
from fedvote.sweep.store import SweepStore

__all__ = [
    "PointDone",
    "SweepStore",
    "format_duration",
    "grid_points",
    "parse_grid",
    "point_config",
    "reference_points",
    "reuses_votes",
    "run_sweep",
    "with_run_noise_seed",
    "write_sweep",
]
