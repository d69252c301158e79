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
"""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import json
import os
import platform
import time
from collections.abc import Sequence
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
from fedvote.privacy.ledger import LedgerSession, PersistentLedger, PrivacyLedger, compose_releases
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
                },
                "base_config": self.base_config,
                "rows": [dataclasses.asdict(row) for row in self.rows],
                "timings": self.timings,
                "reuse": self.reuse,
                "total_epsilon": self.total_epsilon,
                "ledgers": self.ledgers,
            }
        )


def run_sweep(
    configs: Sequence[RunConfig],
    grid: dict[str, list[float | int]],
    *,
    seeds: Sequence[int] | None = None,
    progress: Progress = NO_PROGRESS,
) -> SweepResult:
    """Run every config at every grid point and seed, reusing teachers and clean votes.

    Per (method, seed): one federation, one :class:`ReusedVotesTransport` (teachers
    trained and clean vote sums computed on first use), then one run per point, each
    charged to its federation's ledger; all points' planned charges are checked against
    the budgets before the first (:class:`SweepLedgers`). A non-private method
    (:func:`is_reference`) runs once per seed at :func:`reference_points`, as a reference row.
    """
    grid_point_list = grid_points(grid)
    seed_list = list(seeds) if seeds else [configs[0].seed]
    for config in configs:  # refuse a bad grid value before any training
        for point in grid_point_list:
            point_config(config, point)
    federations = _Federations()
    first_seed = seed_list[0]  # whether a method is a reference does not depend on the seed
    swept = [  # (the config as run, its points, whether it is a reference), per method
        _swept_method(config, grid_point_list, federations.get(dataclasses.replace(config, seed=first_seed)))
        for config in configs
    ]
    ledgers = SweepLedgers.plan(  # refuses before any release
        [config for config, _, _ in swept], [points for _, points, _ in swept], seed_list, federations
    )
    rows: list[SweepRow] = []
    reuse: dict[str, dict[str, int]] = {}
    started = time.perf_counter()
    try:
        for config, points, reference in swept:
            reusable = reuses_votes(config.method)
            for seed_position, seed in enumerate(seed_list):
                seeded = dataclasses.replace(config, seed=seed)
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
                for point_position, point in enumerate(points):
                    label = f"{config.method} seed {seed} at {_describe(point)}"
                    with progress.step(label, total=1) as bar:
                        mark = time.perf_counter()
                        at_point = with_run_noise_seed(
                            point_config(seeded, point), seed_position * len(points) + point_position
                        )
                        if transport is not None:
                            transport.communication = Communication()  # each point reports its own run's
                            transport.reseed(at_point.privacy.noise_seed)
                        result = run(
                            at_point,
                            federation=prepared,
                            transport=transport,
                            ledger=ledgers.session(seeded, federation, f"sweep {label}"),
                        )
                        elapsed = time.perf_counter() - mark
                        rows.append(SweepRow.from_result(point, result, elapsed, reference=reference))
                        bar.advance()
                reuse[f"{config.method}/seed={seed}"] = (
                    transport.reuse_counts() if transport is not None else {"fresh_transports": len(points)}
                )
        total = ledgers.total(configs[0].privacy.delta, configs[0].privacy.accountant)
        states = ledgers.states()
    finally:
        ledgers.close()
    return SweepResult(
        methods=[config.method for config in configs],
        grid=grid,
        seeds=seed_list,
        base_config=configs[0].to_dict(),
        rows=rows,
        timings={"total_s": round(time.perf_counter() - started, 4)},
        reuse=reuse,
        total_epsilon=total,
        ledgers=states,
    )


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
        configs: Sequence[RunConfig],
        points: Sequence[Sequence[dict[str, float | int]]],
        seeds: Sequence[int],
        federations: _Federations,
    ) -> SweepLedgers:
        """Open every ledger the sweep will charge and refuse a sweep that would overrun one.

        ``points[i]`` are the points ``configs[i]`` runs at (a reference's are fewer).
        """
        ledgers = cls()
        planned: dict[tuple[str | None, str], list[Any]] = {}
        try:
            for config, config_points in zip(configs, points, strict=True):
                for seed in seeds:
                    seeded = dataclasses.replace(config, seed=seed)
                    federation = federations.get(seeded)
                    key = cls._key(seeded, federation)
                    if key not in ledgers._ledgers:
                        ledgers._ledgers[key] = open_ledger(seeded, federation)
                    planned.setdefault(key, []).extend(
                        _planned_point(seeded, point, federation) for point in config_points
                    )
            for key, releases in planned.items():
                check_budget(ledgers._ledgers[key], releases, what=f"this sweep's {len(releases)} points")
        except BaseException:
            ledgers.close()
            raise
        return ledgers

    def session(self, config: RunConfig, federation: Federation, run_label: str) -> LedgerSession:
        """A point's view of its federation's ledger (its charges labelled ``run_label``)."""
        return LedgerSession(self._ledgers[self._key(config, federation)], run_label)

    def total(self, delta: float, accountant: str) -> dict[str, float | None]:
        """ε per level of all points' charges together (every federation), at ``delta``."""
        charges = [charge for ledger in self._ledgers.values() for charge in ledger.charges]
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
