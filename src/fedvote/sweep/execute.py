"""Running a sweep: per (method, seed) one federation and transport, then one charged run per point."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from fedvote.config import RunConfig
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.runner import prepare_public, run
from fedvote.sweep.grid import grid_points, point_config
from fedvote.sweep.ledgers import SweepLedgers
from fedvote.sweep.points import Federations, reuses_votes, sweep_points, swept_method
from fedvote.sweep.results import PointDone, SweepResult, SweepRow, format_duration
from fedvote.sweep.store import SweepStore
from fedvote.transport.base import Communication
from fedvote.transport.local import LocalTransport
from fedvote.transport.reused_votes import ReusedVotesTransport


def run_sweep(
    configs: Sequence[RunConfig],
    grid: dict[str, list[float | int]],
    *,
    seeds: Sequence[int] | None = None,
    progress: Progress = NO_PROGRESS,
    store: SweepStore | None = None,
    on_point: Callable[[PointDone], None] | None = None,
) -> SweepResult:
    """Run every config at every grid point and seed, reusing teachers and clean votes.

    Per (method, seed): one federation, one :class:`ReusedVotesTransport` (teachers
    trained and clean vote sums computed on first use), then one run per point, each
    charged to its federation's ledger; all points' planned charges are checked against
    the budgets before the first (:class:`SweepLedgers`). A non-private method
    (:func:`is_reference`) runs once per seed at :func:`reference_points`, as a reference row.

    ``store`` (a sweep directory, :meth:`SweepStore.open`) keeps each point's row as it
    completes, and on resume supplies the rows already done: those points are skipped and
    not charged, and the budget check covers the remaining ones. On an interrupt or error
    the rows so far are written to the store's ``sweep.json``/``sweep.csv`` (``complete``
    false) before the exception goes on. ``on_point`` hears of each point done
    (:class:`PointDone`: how many of how many, the estimated time left).
    """
    grid_point_list = grid_points(grid)
    seed_list = list(seeds) if seeds else [configs[0].seed]
    for config in configs:  # refuse a bad grid value before any training
        for grid_point in grid_point_list:
            point_config(config, grid_point)
    federations = Federations()
    first_seed = seed_list[0]  # whether a method is a reference does not depend on the seed
    swept = [  # (the config as run, its points, whether it is a reference), per method
        swept_method(config, grid_point_list, federations.get(dataclasses.replace(config, seed=first_seed)))
        for config in configs
    ]
    points = sweep_points(swept, seed_list)
    completed = store.completed_points(points) if store is not None else {}
    remaining = [point for point in points if point.index not in completed]
    with SweepLedgers.plan(points, remaining, federations) as ledgers:  # refuses before any release
        rows: dict[int, SweepRow] = {index: row for index, (row, _) in completed.items()}
        # every charge made before a resume: the completed points' and an interrupted point's
        earlier = store.earlier_charges(completed) if store is not None else []
        earlier_charges = [charge for _, charge in earlier]
        reuse: dict[str, dict[str, int]] = {}
        started = time.perf_counter()

        def result(complete: bool) -> SweepResult:
            return SweepResult(
                methods=[config.method for config in configs],
                grid=grid,
                seeds=seed_list,
                base_config=configs[0].to_dict(),
                rows=[rows[index] for index in sorted(rows)],
                timings={"total_s": round(time.perf_counter() - started, 4)},
                reuse=reuse,
                total_epsilon=ledgers.total(
                    configs[0].privacy.delta, configs[0].privacy.accountant, earlier=earlier_charges
                ),
                total_accountant={
                    level: bounded.accountant
                    for level, bounded in ledgers.total_bounded(
                        configs[0].privacy.delta, configs[0].privacy.accountant, earlier=earlier_charges
                    ).items()
                },
                ledgers=ledgers.states(earlier_points=[index for index, _ in earlier]),
                complete=complete,
                points_total=len(points),
            )

        try:
            if store is not None:
                store.begin(points, completed)
            done, ran = len(completed), 0
            for method_position, (config, _, _) in enumerate(swept):
                # secure noise is drawn by run() per point, not by the reused-votes transport
                reusable = reuses_votes(config.method) and not config.privacy.secure_noise
                for seed in seed_list:
                    pending = [
                        p for p in remaining if p.method_position == method_position and p.seed == seed
                    ]
                    if not pending:  # every point of this (method, seed) was done before a resume
                        continue
                    seeded = pending[0].seeded
                    federation = federations.get(seeded)  # the ledger's key: its agents' records
                    # The method's view (a validation slice moved out of the pool): the same at
                    # every point, since a point changes only the noise, Q and δ.
                    prepared = prepare_public(seeded, federation)
                    transport = (
                        ReusedVotesTransport(
                            LocalTransport(prepared, seed=seed, noise_seed=seeded.privacy.noise_seed),
                            noise_seed=seeded.privacy.noise_seed,
                        )
                        if reusable
                        else None  # run() builds a fresh LocalTransport per point, on its noise seed
                    )
                    for point in pending:
                        description = f"point {done + 1}/{len(points)}: {point.label}"
                        if ran:
                            left = (time.perf_counter() - started) / ran * (len(points) - done)
                            description += f" (ETA {format_duration(left)})"
                        with progress.step(description, total=1) as bar:
                            mark = time.perf_counter()
                            at_point = point.run_config()
                            if transport is not None:
                                transport.communication = Communication()  # each point reports its own run's
                                transport.reseed(at_point.privacy.noise_seed)
                            session = ledgers.session(
                                seeded,
                                federation,
                                f"sweep {point.label}",
                                journal=store.journal if store is not None else None,
                                point=point.index,
                            )
                            outcome = run(at_point, federation=prepared, transport=transport, ledger=session)
                            elapsed = time.perf_counter() - mark
                            row = SweepRow.from_result(
                                point.point, outcome, elapsed, reference=point.reference
                            )
                            rows[point.index] = row
                            if store is not None:
                                store.save(point, row, session.charges)
                            bar.advance()
                        done, ran = done + 1, ran + 1
                        if on_point is not None:
                            left = (time.perf_counter() - started) / ran * (len(points) - done)
                            on_point(PointDone(done, len(points), point.label, left))
                    reuse[f"{config.method}/seed={seed}"] = (
                        transport.reuse_counts()
                        if transport is not None
                        else {"fresh_transports": len(pending)}
                    )
            return result(complete=True)
        except BaseException:
            if store is not None:
                store.keep(result, any_rows=bool(rows))
            raise
