"""Sweeps: one method (or several) over a grid of ε, σ, Q or δ, reusing what does not change.

A privacy–accuracy curve needs many runs that differ only in the noise and the number
of queries. Everything upstream of the noise — the federation, the teachers (or kNN
indices) and the *clean* vote sums — is the same at every grid point, so a sweep builds
them once per (method, seed) and then, per point, redraws only the noise, the noisy
argmax, the student and the accounting (:class:`ReusedVotesTransport`): PATE-FL,
Private-kNN-FL and reputation-weighted PATE (:data:`REUSES_VOTES`). Every other method —
gradient methods, PriFedSync, FedAUXfdp and its baselines, and any method added later —
has no clean part the reused transport knows how to keep (its training *is* the noisy
release) and runs afresh at each point, on a fresh in-process transport seeded with the
point's own noise seed. Either way the transport holds the federation as the method
prepared it (:func:`fedvote.runner.prepare_public`: weighted-pate's and PriFedSync's
labelled validation slice), so its public pool is the method's.

**A non-private method is a reference.** A method with nothing to calibrate whose every
planned release is non-private at both levels (FedAvg, majority-vote:
:func:`is_reference`) is the same run at every ε, σ or δ: it runs once per seed (and per
value of the axes that still change it, ``queries``) and its row says ``reference: true``,
without the axes that do not apply. Reports draw it as a dashed horizontal line.

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
would.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import json
import os
import platform
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from dp_accounting import dp_event

from fedvote.config import RunConfig
from fedvote.data.federation import Federation
from fedvote.errors import ConfigError
from fedvote.methods import METHODS, Method, PateFL, PrivateKnnFL
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import LEVELS, LevelEvents
from fedvote.privacy.ledger import (
    LedgerSession,
    PersistentLedger,
    PrivacyLedger,
    compose_releases,
    event_from_json,
    event_to_json,
)
from fedvote.privacy.noise_seeds import run_noise_seed
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.results import RunResult, finite_or_none, write_atomic
from fedvote.runner import (
    _ledger_details,
    check_budget,
    federation_content_key,
    make_federation,
    open_ledger,
    planned_release,
    prepare_public,
    run,
)
from fedvote.transport.base import Communication
from fedvote.transport.local import LocalTransport
from fedvote.transport.reused_votes import ReusedVotesTransport

# The axes a grid may span, and how a value is read.
GRID_AXES: dict[str, type] = {"epsilon": float, "sigma": float, "queries": int, "delta": float}

# The methods whose every transport operation :class:`ReusedVotesTransport` serves (their
# subclasses included: weighted-pate is a PateFL). Any other method gets a fresh
# LocalTransport per grid point — always correct, only slower.
REUSES_VOTES: tuple[type[Method], ...] = (PateFL, PrivateKnnFL)

# The grid axes that change only a run's noise and its accounting: a non-private
# reference runs the same at any of their values (:func:`is_reference`).
PRIVACY_AXES: frozenset[str] = frozenset({"epsilon", "sigma", "delta"})

SWEEP_JSON = "sweep.json"
SWEEP_CSV = "sweep.csv"
# A sweep directory's completed points (SweepStore): POINTS_DIR/PLAN_JSON and POINTS_DIR/<n>.json.
POINTS_DIR = "points"
PLAN_JSON = "plan.json"
POINTS_FORMAT = "fedvote sweep points"
POINTS_VERSION = 1


def parse_grid(text: str) -> dict[str, list[float | int]]:
    """``"sigma=10,20;queries=100,300"`` → ``{"sigma": [10.0, 20.0], "queries": [100, 300]}``.

    Axes are separated by ``;``, values by ``,``; the grid is their product. ``epsilon``
    and ``sigma`` cannot both be axes (one fixes the other). Errors name ``--grid``.
    """
    grid: dict[str, list[float | int]] = {}
    for part in (piece.strip() for piece in text.split(";")):
        if not part:
            continue
        name, sep, values = part.partition("=")
        name = name.strip()
        if not sep or name not in GRID_AXES:
            raise ConfigError(
                "grid", f"expected AXIS=V1,V2,... with AXIS one of {', '.join(GRID_AXES)}; got {part!r}"
            )
        if name in grid:
            raise ConfigError("grid", f"axis {name!r} given twice")
        try:
            parsed = [GRID_AXES[name](v.strip()) for v in values.split(",") if v.strip()]
        except ValueError as error:
            raise ConfigError("grid", f"{name}: {error}") from error
        if not parsed:
            raise ConfigError("grid", f"axis {name!r} has no values")
        grid[name] = parsed
    if not grid:
        raise ConfigError("grid", "give at least one axis, e.g. --grid 'epsilon=1,2,4,8'")
    if "epsilon" in grid and "sigma" in grid:
        raise ConfigError("grid", "epsilon and sigma cannot both be axes (one fixes the other)")
    return grid


def grid_points(grid: dict[str, list[float | int]]) -> list[dict[str, float | int]]:
    """Every point of the product grid, first axis slowest."""
    names = list(grid)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*grid.values())]


def point_config(config: RunConfig, point: dict[str, float | int]) -> RunConfig:
    """``config`` at one grid point: σ given (ε dropped) or ε given (σ dropped), Q, δ."""
    privacy = config.privacy
    if "sigma" in point:
        privacy = dataclasses.replace(privacy, sigma=float(point["sigma"]), epsilon=None)
    if "epsilon" in point:
        privacy = dataclasses.replace(privacy, epsilon=float(point["epsilon"]), sigma=None)
    if "delta" in point:
        privacy = dataclasses.replace(privacy, delta=float(point["delta"]))
    queries = int(point["queries"]) if "queries" in point else config.queries
    return dataclasses.replace(config, privacy=privacy, queries=queries)


def with_run_noise_seed(config: RunConfig, run_index: int) -> RunConfig:
    """``config`` with its run's own noise seed (:func:`fedvote.privacy.noise_seeds.run_noise_seed`).

    Unchanged without a noise seed: every run then draws fresh OS entropy anyway.
    """
    noise_seed = config.privacy.noise_seed
    if noise_seed is None:
        return config
    derived = run_noise_seed(noise_seed, config.method, run_index)
    return dataclasses.replace(config, privacy=dataclasses.replace(config.privacy, noise_seed=derived))


@dataclass(frozen=True)
class SweepRow:
    """One method at one grid point and seed."""

    method: str
    point: dict[str, float | int]
    seed: int
    sigma: float
    queries: int
    accuracy: float
    label_accuracy: float | None
    epsilon_agent: float | None
    epsilon_instance: float | None
    delta: float
    accountant: str
    calibrated_level: str | None
    time_s: float
    reference: bool = False  # a non-private method, run once: ``point`` holds only the axes that apply

    @classmethod
    def from_result(
        cls, point: dict[str, float | int], result: RunResult, time_s: float, *, reference: bool = False
    ) -> SweepRow:
        """The row of ``result``, a run at ``point`` (``reference``: a non-private method's one run)."""
        privacy = result.privacy
        return cls(
            method=result.method,
            point=dict(point),
            seed=result.seed,
            sigma=result.sigma,
            queries=result.queries,
            accuracy=result.accuracy,
            label_accuracy=result.label_accuracy,
            epsilon_agent=privacy.agent.epsilon,
            epsilon_instance=privacy.instance.epsilon,
            delta=privacy.delta,
            accountant=privacy.accountant,
            calibrated_level=privacy.calibrated_level,
            time_s=round(time_s, 4),
            reference=reference,
        )


@dataclass(frozen=True)
class SweepResult:
    """Rows of a sweep, the grid and config they came from, and what was reused."""

    methods: list[str]
    grid: dict[str, list[float | int]]
    seeds: list[int]
    base_config: dict[str, Any]
    rows: list[SweepRow]
    timings: dict[str, float]
    reuse: dict[str, dict[str, int]]
    total_epsilon: dict[str, float | None] = field(default_factory=dict)
    ledgers: list[dict[str, Any]] = field(default_factory=list)
    # Whether every point ran (False: an interrupted or failed sweep's rows so far), of how many.
    complete: bool = True
    points_total: int | None = None

    def to_dict(self, command: str = "") -> dict[str, Any]:
        """``sweep.json``'s content."""
        return finite_or_none(
            {
                "sweep": {
                    "methods": self.methods,
                    "grid": self.grid,
                    "seeds": self.seeds,
                    "command": command,
                    "machine": machine_description(),
                    "complete": self.complete,
                    "points_done": len(self.rows),
                    "points_total": len(self.rows) if self.points_total is None else self.points_total,
                },
                "base_config": self.base_config,
                "rows": [dataclasses.asdict(row) for row in self.rows],
                "timings": self.timings,
                "reuse": self.reuse,
                "total_epsilon": self.total_epsilon,
                "ledgers": self.ledgers,
            }
        )


@dataclass(frozen=True)
class SweepPoint:
    """One run of a sweep: a method at one seed and grid point.

    ``index`` is its place in run order, from 1 (method, then seed, then point); ``config``
    is the method's config as the sweep runs it (a reference's without ε or σ), before the
    seed and point are applied (:meth:`run_config`).
    """

    index: int
    method_position: int
    config: RunConfig
    seed: int
    seed_position: int
    point: dict[str, float | int]
    point_position: int
    points_per_seed: int
    reference: bool

    @property
    def label(self) -> str:
        """``"pate-fl seed 0 at epsilon=2"``."""
        return f"{self.config.method} seed {self.seed} at {_describe(self.point)}"

    @property
    def seeded(self) -> RunConfig:
        """The method's config at this point's seed (the federation and teachers it shares)."""
        return dataclasses.replace(self.config, seed=self.seed)

    def run_config(self) -> RunConfig:
        """The config this point runs: at its seed and point, with its own noise seed."""
        return with_run_noise_seed(
            point_config(self.seeded, self.point),
            self.seed_position * self.points_per_seed + self.point_position,
        )

    def key(self) -> dict[str, Any]:
        """What names the point in a sweep directory (``plan.json`` and its row file)."""
        return _json_normal(
            {
                "index": self.index,
                "method": self.config.method,
                "seed": self.seed,
                "point": self.point,
                "reference": self.reference,
            }
        )


@dataclass(frozen=True)
class PointDone:
    """A sweep's progress after a point: ``done`` of ``total`` (resumed points included), the time left."""

    done: int
    total: int
    label: str
    eta_s: float

    def line(self) -> str:
        """``"point 3/8 done (pate-fl seed 0 at epsilon=2), ETA 40 s"``."""
        return f"point {self.done}/{self.total} done ({self.label}), ETA {format_duration(self.eta_s)}"


def format_duration(seconds: float) -> str:
    """``"40 s"``, ``"3 min 05 s"``, ``"2 h 10 min"``."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


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
    federations = _Federations()
    first_seed = seed_list[0]  # whether a method is a reference does not depend on the seed
    swept = [  # (the config as run, its points, whether it is a reference), per method
        _swept_method(config, grid_point_list, federations.get(dataclasses.replace(config, seed=first_seed)))
        for config in configs
    ]
    points = sweep_points(swept, seed_list)
    completed = store.completed_points(points) if store is not None else {}
    remaining = [point for point in points if point.index not in completed]
    ledgers = SweepLedgers.plan(points, remaining, federations)  # refuses before any release
    rows: dict[int, SweepRow] = {index: row for index, (row, _) in completed.items()}
    earlier_charges = [charge for _, charges in completed.values() for charge in charges]
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
            ledgers=ledgers.states(),
            complete=complete,
            points_total=len(points),
        )

    try:
        if store is not None:
            store.begin(points)
        done, ran = len(completed), 0
        for method_position, (config, _, _) in enumerate(swept):
            # secure noise is drawn by run() per point, not by the reused-votes transport
            reusable = reuses_votes(config.method) and not config.privacy.secure_noise
            for seed in seed_list:
                pending = [p for p in remaining if p.method_position == method_position and p.seed == seed]
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
                        session = ledgers.session(seeded, federation, f"sweep {point.label}")
                        outcome = run(at_point, federation=prepared, transport=transport, ledger=session)
                        elapsed = time.perf_counter() - mark
                        row = SweepRow.from_result(point.point, outcome, elapsed, reference=point.reference)
                        rows[point.index] = row
                        if store is not None:
                            store.save(point, row, session.charges)
                        bar.advance()
                    done, ran = done + 1, ran + 1
                    if on_point is not None:
                        left = (time.perf_counter() - started) / ran * (len(points) - done)
                        on_point(PointDone(done, len(points), point.label, left))
                reuse[f"{config.method}/seed={seed}"] = (
                    transport.reuse_counts() if transport is not None else {"fresh_transports": len(pending)}
                )
        return result(complete=True)
    except BaseException:
        if store is not None:
            store.keep(result, any_rows=bool(rows))
        raise
    finally:
        ledgers.close()


def sweep_points(
    swept: Sequence[tuple[RunConfig, list[dict[str, float | int]], bool]], seeds: Sequence[int]
) -> list[SweepPoint]:
    """Every run of a sweep in run order: per method (as swept), per seed, per point."""
    points: list[SweepPoint] = []
    for method_position, (config, method_points, reference) in enumerate(swept):
        for seed_position, seed in enumerate(seeds):
            for point_position, point in enumerate(method_points):
                points.append(
                    SweepPoint(
                        index=len(points) + 1,
                        method_position=method_position,
                        config=config,
                        seed=seed,
                        seed_position=seed_position,
                        point=point,
                        point_position=point_position,
                        points_per_seed=len(method_points),
                        reference=reference,
                    )
                )
    return points


def reuses_votes(method: str) -> bool:
    """Whether a sweep runs ``method``'s points on one :class:`ReusedVotesTransport` (else fresh ones)."""
    return issubclass(METHODS[method], REUSES_VOTES)


def without_privacy_target(config: RunConfig) -> RunConfig:
    """``config`` with neither ε nor σ given: as a non-private method runs."""
    return dataclasses.replace(config, privacy=dataclasses.replace(config.privacy, sigma=None, epsilon=None))


def is_reference(config: RunConfig, federation: Federation) -> bool:
    """Whether ``config``'s method is a non-private reference: the same run at every ε, σ and δ.

    It has nothing to calibrate (``calibration_level`` None) and every release it plans is
    non-private at both levels (FedAvg, majority-vote). FedAUXfdp also calibrates nothing
    but is private (its budget is given per head): not a reference.
    """
    if METHODS[config.method].calibration_level is not None:
        return False
    events = planned_release(without_privacy_target(config), federation)
    return all(isinstance(events.at(level), dp_event.NonPrivateDpEvent) for level in LEVELS)


def reference_points(points: Sequence[dict[str, float | int]]) -> list[dict[str, float | int]]:
    """The distinct ``points`` without the privacy axes (:data:`PRIVACY_AXES`), in order.

    ``[{}]`` when the grid spans only privacy axes: one run.
    """
    kept: list[dict[str, float | int]] = []
    for point in points:
        applies = {axis: value for axis, value in point.items() if axis not in PRIVACY_AXES}
        if applies not in kept:
            kept.append(applies)
    return kept


def _swept_method(
    config: RunConfig, points: list[dict[str, float | int]], federation: Federation
) -> tuple[RunConfig, list[dict[str, float | int]], bool]:
    """(the config as the sweep runs it, the points it runs at, whether it is a reference)."""
    if is_reference(config, federation):
        return without_privacy_target(config), reference_points(points), True
    return config, points, False


class _Federations:
    """Each (federation settings, seed)'s federation, built once and shared by the sweep's methods."""

    def __init__(self) -> None:
        self._built: dict[str, Federation] = {}

    def get(self, config: RunConfig) -> Federation:
        """``config``'s federation (deterministic under its seed)."""
        key = json.dumps([config.to_dict()["federation"], config.seed], sort_keys=True)
        if key not in self._built:
            self._built[key] = make_federation(config)
        return self._built[key]


class SweepLedgers:
    """The ledgers a sweep charges: one per (ledger file, federation content key).

    :meth:`plan` opens them and checks the sum of every point's planned events against
    each one's budget before anything is trained or released.
    """

    def __init__(self) -> None:
        self._ledgers: dict[tuple[str | None, str], PrivacyLedger] = {}

    @staticmethod
    def _key(config: RunConfig, federation: Federation) -> tuple[str | None, str]:
        return config.privacy.ledger, federation_content_key(federation)

    @classmethod
    def plan(
        cls,
        points: Sequence[SweepPoint],
        remaining: Sequence[SweepPoint],
        federations: _Federations,
    ) -> SweepLedgers:
        """Open every ledger the sweep's ``points`` charge; refuse ``remaining`` points that overrun one.

        ``remaining`` are the points still to run (all of them, unless a resumed sweep
        finished some: the ledger already holds those points' charges).
        """
        ledgers = cls()
        planned: dict[tuple[str | None, str], list[Any]] = {}
        try:
            for point in points:
                seeded = point.seeded
                federation = federations.get(seeded)
                key = cls._key(seeded, federation)
                if key not in ledgers._ledgers:
                    ledgers._ledgers[key] = open_ledger(seeded, federation)
            for point in remaining:
                seeded = point.seeded
                federation = federations.get(seeded)
                planned.setdefault(cls._key(seeded, federation), []).append(
                    _planned_point(seeded, point.point, federation)
                )
            what = "points" if len(remaining) == len(points) else "remaining points"
            for key, releases in planned.items():
                check_budget(ledgers._ledgers[key], releases, what=f"this sweep's {len(releases)} {what}")
        except BaseException:
            ledgers.close()
            raise
        return ledgers

    def session(self, config: RunConfig, federation: Federation, run_label: str) -> LedgerSession:
        """A point's view of its federation's ledger (its charges labelled ``run_label``)."""
        return LedgerSession(self._ledgers[self._key(config, federation)], run_label)

    def total(
        self, delta: float, accountant: str, earlier: Sequence[LevelEvents] = ()
    ) -> dict[str, float | None]:
        """ε per level of all points' charges together (every federation), at ``delta``.

        ``earlier`` are the charges of points done before a resume (kept with their rows).
        """
        charges = [*earlier, *(charge for ledger in self._ledgers.values() for charge in ledger.charges)]
        total = {level: epsilon_for(compose_releases(charges, level), delta, accountant) for level in LEVELS}
        return finite_or_none(total)

    def states(self) -> list[dict[str, Any]]:
        """Each persisted ledger's federation, spend and budget after the sweep, with its charge count."""
        states = []
        for ledger in self._ledgers.values():
            state = _ledger_details(ledger).get("ledger")
            if isinstance(state, dict):
                states.append({**state, "charges": len(ledger.charges)})
        return states

    def close(self) -> None:
        """Close every persisted ledger (each charge is already committed)."""
        for ledger in self._ledgers.values():
            if isinstance(ledger, PersistentLedger):
                ledger.close()


def write_sweep(result: SweepResult, out_dir: str | Path, command: str = "") -> tuple[Path, Path]:
    """Write ``out_dir/sweep.json`` and ``out_dir/sweep.csv`` (each atomically)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_text = json.dumps(result.to_dict(command), indent=2)
    axes = list(result.grid)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    fields = [f.name for f in dataclasses.fields(SweepRow) if f.name != "point"]
    writer.writerow(["method", *axes, *[name for name in fields if name != "method"]])
    for row in result.rows:
        values = dataclasses.asdict(row)
        writer.writerow(
            [row.method, *[row.point.get(axis, "") for axis in axes]]
            + ["" if values[name] is None else values[name] for name in fields if name != "method"]
        )
    return write_atomic(out / SWEEP_JSON, json_text), write_atomic(out / SWEEP_CSV, buffer.getvalue())


class SweepStore:
    """A sweep's output directory: each point's row kept as it completes, and what a resume needs.

    ``D/points/plan.json``, written before the first point, names the sweep — each method's
    config, the grid, the seeds — and lists its points in run order; ``D/points/<n>.json``
    holds point n's row and the charges it made, written atomically (:func:`write_atomic`)
    as soon as the point is done. :meth:`open` refuses, before anything is loaded or run,
    a resume of another sweep or of a directory without one, and a fresh sweep over an
    unfinished one (its completed points would be lost).
    """

    def __init__(
        self, out_dir: str | Path, identity: dict[str, Any], *, resume: bool, command: str = ""
    ) -> None:
        self.out = Path(out_dir)
        self.points_dir = self.out / POINTS_DIR
        self.plan_path = self.points_dir / PLAN_JSON
        self.identity = identity
        self.resume = resume
        self.command = command
        self.done = 0  # points with a row on disk: resumed or run
        self.total: int | None = None  # the sweep's points, once known
        self._plan: dict[str, Any] | None = None
        self._created: list[Path] = []
        self._began = False

    @classmethod
    def open(
        cls,
        out_dir: str | Path,
        configs: Sequence[RunConfig],
        grid: dict[str, list[float | int]],
        seeds: Sequence[int] | None = None,
        *,
        resume: bool = False,
        command: str = "",
    ) -> SweepStore:
        """The store of ``out_dir`` for this sweep (``seeds`` None: the first config's seed).

        Reads nothing but ``plan.json``; refuses (:class:`ConfigError`) with ``resume`` a
        directory holding no sweep or another sweep (methods, settings, grid or seeds), and
        without it a directory holding an unfinished sweep.
        """
        seed_list = list(seeds) if seeds else [configs[0].seed]
        store = cls(out_dir, _sweep_identity(configs, grid, seed_list), resume=resume, command=command)
        plan = store._read_plan()
        if resume:
            if plan is None:
                raise ConfigError("resume", f"{store.out} holds no sweep to resume (no {store.plan_path})")
            _check_same_sweep(store.out, plan, store.identity)
            store._plan = plan
        elif plan is not None:
            done, total = len(store._point_files()), len(plan["points"])
            if done < total:
                raise ConfigError(
                    "out",
                    f"{store.out} holds an unfinished sweep ({done} of {total} points done); "
                    "continue it with --resume, or write to another directory",
                )
        return store

    def completed_points(self, points: Sequence[SweepPoint]) -> dict[int, tuple[SweepRow, list[LevelEvents]]]:
        """The rows (and charges) of the ``points`` done before, by index; none for a fresh sweep."""
        self.total = len(points)
        if self._plan is None:
            return {}
        keys = [point.key() for point in points]
        if self._plan["points"] != keys:
            raise ConfigError(
                "resume",
                f"{self.out} holds a sweep of other points ({len(self._plan['points'])} there, "
                f"{len(keys)} here); write to another directory",
            )
        completed: dict[int, tuple[SweepRow, list[LevelEvents]]] = {}
        for path in self._point_files():
            try:
                data = json.loads(path.read_text())
                index = data["index"]
                if not (isinstance(index, int) and 1 <= index <= len(keys)) or data["key"] != keys[index - 1]:
                    raise ValueError(f"it names another point ({data.get('key')})")
                row = SweepRow(**data["row"])
                charges = [_charge_from_json(charge) for charge in data["charges"]]
            except (OSError, ValueError, TypeError, KeyError) as error:
                raise ConfigError("resume", f"{path} is not a point of this sweep: {error}") from error
            completed[index] = (row, charges)
        self.done = len(completed)
        return completed

    def begin(self, points: Sequence[SweepPoint]) -> None:
        """Before the first point: write ``plan.json`` (a resumed sweep's is there already).

        Point files of an earlier, finished sweep in the directory are removed first.
        """
        self.total = len(points)
        if self._plan is None:
            plan = {
                "format": POINTS_FORMAT,
                "version": POINTS_VERSION,
                **self.identity,
                "points": [point.key() for point in points],
                "command": self.command,
            }
            try:
                for parent in reversed([self.points_dir, *self.points_dir.parents]):
                    if not parent.exists():
                        parent.mkdir()
                        self._created.append(parent)
                for stale in self._point_files():
                    stale.unlink()
                write_atomic(self.plan_path, json.dumps(plan, indent=2) + "\n")
            except OSError as error:
                raise ConfigError("out", f"cannot write in {self.out}: {error.strerror or error}") from error
        self._began = True

    def save(self, point: SweepPoint, row: SweepRow, charges: Sequence[LevelEvents]) -> Path:
        """Write point ``point.index``'s row and charges (atomically); returns the file's path."""
        path = self.points_dir / f"{point.index}.json"
        data = {
            "format": POINTS_FORMAT,
            "version": POINTS_VERSION,
            "index": point.index,
            "key": point.key(),
            "row": finite_or_none(dataclasses.asdict(row)),
            "charges": [_charge_to_json(charge) for charge in charges],
        }
        try:
            write_atomic(path, json.dumps(data, indent=2) + "\n")
        except OSError as error:
            raise ConfigError(
                "out",
                f"cannot write {path} ({error.strerror or error}); the {self.done} points done before it "
                f"are in {self.points_dir}",
            ) from error
        self.done += 1
        return path

    def keep(self, result: Callable[[bool], SweepResult], *, any_rows: bool) -> None:
        """After an interrupt or error: the rows so far into ``sweep.json`` and ``sweep.csv``, not complete.

        ``result(False)`` builds them. A fresh sweep that finished no point leaves nothing
        behind (its ``plan.json`` and the directories it made are removed). Best effort:
        the exception that stopped the sweep is the one reported, and every finished
        point's row is in ``points/`` already.
        """
        if not self._began:
            return
        try:
            if any_rows:
                write_sweep(result(False), self.out, command=self.command)
            elif not self.resume:
                self.plan_path.unlink(missing_ok=True)
                for made in reversed(self._created):
                    made.rmdir()
        except Exception:  # noqa: BLE001 - the sweep's own error is the one to report
            pass

    def _read_plan(self) -> dict[str, Any] | None:
        if not self.plan_path.exists():
            return None
        argument = "resume" if self.resume else "out"
        try:
            plan = json.loads(self.plan_path.read_text())
        except (OSError, ValueError) as error:
            raise ConfigError(argument, f"cannot read {self.plan_path}: {error}") from error
        if not isinstance(plan, dict) or plan.get("format") != POINTS_FORMAT:
            raise ConfigError(argument, f"{self.plan_path} is not a fedvote sweep plan")
        if not isinstance(plan.get("points"), list):
            raise ConfigError(argument, f"{self.plan_path} is not a fedvote sweep plan")
        version = plan.get("version")
        if not isinstance(version, int) or version > POINTS_VERSION:
            raise ConfigError(
                argument,
                f"{self.plan_path} is of sweep format version {version}; this fedvote reads {POINTS_VERSION}",
            )
        return plan

    def _point_files(self) -> list[Path]:
        """The point row files in the directory, in index order."""
        if not self.points_dir.is_dir():
            return []
        files = [path for path in self.points_dir.iterdir() if _POINT_FILE.fullmatch(path.name)]
        return sorted(files, key=lambda path: int(path.stem))


_POINT_FILE = re.compile(r"[1-9][0-9]*\.json")


def _json_normal(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples as lists, non-finite floats as None)."""
    return json.loads(json.dumps(finite_or_none(value)))


def _sweep_identity(
    configs: Sequence[RunConfig], grid: dict[str, list[float | int]], seeds: Sequence[int]
) -> dict[str, Any]:
    """What makes two sweeps the same: each method's config, the grid and the seeds."""
    return _json_normal(
        {
            "methods": [config.method for config in configs],
            "configs": [config.to_dict() for config in configs],
            "grid": grid,
            "seeds": list(seeds),
        }
    )


def _check_same_sweep(out: Path, plan: dict[str, Any], identity: dict[str, Any]) -> None:
    """Refuse (one line, naming ``--resume``) a resume whose sweep is not the one in ``out``."""
    tail = "; resume with the flags it was started with, or write to another directory"
    if plan.get("methods") != identity["methods"]:
        there = ",".join(map(str, plan.get("methods") or []))
        given = ",".join(identity["methods"])
        raise ConfigError("resume", f"{out} holds a sweep of {there}, not {given}{tail}")
    if plan.get("grid") != identity["grid"]:
        raise ConfigError(
            "resume",
            f"{out} holds a sweep over another grid ({_grid_text(plan.get('grid'))}, "
            f"not {_grid_text(identity['grid'])}){tail}",
        )
    if plan.get("seeds") != identity["seeds"]:
        there = ",".join(map(str, plan.get("seeds") or []))
        given = ",".join(map(str, identity["seeds"]))
        raise ConfigError("resume", f"{out} holds a sweep with seeds {there}, not {given}{tail}")
    if plan.get("configs") != identity["configs"]:
        fields = sorted(set(_differences(plan.get("configs"), identity["configs"])))
        differ = ", ".join(fields) or "the config"
        raise ConfigError(
            "resume", f"{out} holds a sweep with other settings (they differ in {differ}){tail}"
        )


def _grid_text(grid: Any) -> str:
    """``"epsilon=1,2;queries=40"``, as ``--grid`` takes it."""
    if not isinstance(grid, dict):
        return repr(grid)
    try:
        return ";".join(f"{axis}={','.join(f'{v:g}' for v in values)}" for axis, values in grid.items())
    except (TypeError, ValueError):
        return json.dumps(grid)


_MISSING = object()


def _differences(old: Any, new: Any, path: str = "") -> list[str]:
    """The dotted paths at which two JSON values differ (lists of configs compared item by item)."""
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[str] = []
        for key in [*old, *(key for key in new if key not in old)]:
            found += _differences(old.get(key, _MISSING), new.get(key, _MISSING), f"{path}{key}.")
        return found
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new) and not path:
        return [item for a, b in zip(old, new, strict=True) for item in _differences(a, b)]
    return [] if old == new else [path.rstrip(".") or "the config"]


def _charge_to_json(charge: LevelEvents) -> dict[str, Any]:
    """A point's charge as JSON (its events as the ledger stores them)."""
    return {
        "agent": json.loads(event_to_json(charge.agent)),
        "instance": json.loads(event_to_json(charge.instance)),
        "agent_sensitivity": repr(float(charge.agent_sensitivity)),
        "instance_sensitivity": repr(float(charge.instance_sensitivity)),
    }


def _charge_from_json(data: dict[str, Any]) -> LevelEvents:
    """The charge :func:`_charge_to_json` wrote."""
    return LevelEvents(
        agent=event_from_json(json.dumps(data["agent"])),
        instance=event_from_json(json.dumps(data["instance"])),
        agent_sensitivity=float(data["agent_sensitivity"]),
        instance_sensitivity=float(data["instance_sensitivity"]),
    )


def machine_description() -> dict[str, Any]:
    """Where the sweep ran: platform, CPUs, torch and its device."""
    return {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def _planned_point(config: RunConfig, point: dict[str, float | int], federation: Federation) -> LevelEvents:
    """:func:`planned_release` of ``config`` at ``point``; a refusal of a grid axis names ``--grid``.

    E.g. FedAUXfdp takes its budget per head and refuses an ``epsilon`` or ``sigma`` axis.
    """
    try:
        return planned_release(point_config(config, point), federation)
    except ConfigError as error:
        if error.argument not in point:
            raise
        raise ConfigError(
            "grid", f"{config.method} cannot be swept over {error.argument}: {error.detail}"
        ) from error


def _describe(point: dict[str, float | int]) -> str:
    """``"epsilon=1, queries=40"``; a reference run at no grid axis is ``"its one run (reference)"``."""
    return ", ".join(f"{name}={value:g}" for name, value in point.items()) or "its one run (reference)"
