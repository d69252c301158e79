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
prepared it (:meth:`~fedvote.methods.base.Method.prepare_federation`: weighted-pate's and
PriFedSync's labelled validation slice), so its public pool is the method's.

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
import math
import os
import platform
import secrets
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from fedvote.agents.behaviour import Behaviour
from fedvote.aggregation.voting import WeightRule, confident_gnmax_step
from fedvote.config import RunConfig
from fedvote.data.federation import Federation, LabeledData
from fedvote.errors import ConfigError
from fedvote.methods import METHODS, Method, PateFL, PrivateKnnFL
from fedvote.models.features import FeatureExtractor
from fedvote.models.local_training import LocalTraining, LocalUpdates
from fedvote.models.training import TrainingConfig
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import LEVELS, LevelEvents
from fedvote.privacy.ledger import LedgerSession, PersistentLedger, PrivacyLedger, compose_releases
from fedvote.privacy.noise_seeds import run_noise_seed
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.results import RunResult, _finite
from fedvote.runner import (
    _ledger_details,
    check_budget,
    federation_content_key,
    make_federation,
    open_ledger,
    planned_release,
    run,
)
from fedvote.transport.base import Communication, ReleasedLabels, Transport, VoteSum
from fedvote.transport.local import LocalTransport

_T = TypeVar("_T")

# The axes a grid may span, and how a value is read.
GRID_AXES: dict[str, type] = {"epsilon": float, "sigma": float, "queries": int, "delta": float}

# The methods whose every transport operation :class:`ReusedVotesTransport` serves (their
# subclasses included: weighted-pate is a PateFL). Any other method gets a fresh
# LocalTransport per grid point — always correct, only slower.
REUSES_VOTES: tuple[type[Method], ...] = (PateFL, PrivateKnnFL)

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

    @classmethod
    def from_result(cls, point: dict[str, float | int], result: RunResult, time_s: float) -> SweepRow:
        """The row of ``result``, a run at ``point``."""
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
        return _finite(
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
    the budgets before the first (:class:`SweepLedgers`).
    """
    points = grid_points(grid)
    seed_list = list(seeds) if seeds else [configs[0].seed]
    for config in configs:  # refuse a bad grid value before any training
        for point in points:
            point_config(config, point)
    federations = _Federations()
    ledgers = SweepLedgers.plan(configs, points, seed_list, federations)  # refuses before any release
    rows: list[SweepRow] = []
    reuse: dict[str, dict[str, int]] = {}
    started = time.perf_counter()
    try:
        for config in configs:
            reusable = reuses_votes(config.method)
            for seed_position, seed in enumerate(seed_list):
                seeded = dataclasses.replace(config, seed=seed)
                federation = federations.get(seeded)  # the ledger's key: its agents' records
                # The method's view (a validation slice moved out of the pool): the same at
                # every point, since a point changes only the noise, Q and δ.
                prepared = METHODS[config.method].prepare_federation(seeded, federation)
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
                        rows.append(SweepRow.from_result(point, result, time.perf_counter() - mark))
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
        points: Sequence[dict[str, float | int]],
        seeds: Sequence[int],
        federations: _Federations,
    ) -> SweepLedgers:
        """Open every ledger the sweep will charge and refuse a sweep that would overrun one."""
        ledgers = cls()
        planned: dict[tuple[str | None, str], list[Any]] = {}
        try:
            for config in configs:
                for seed in seeds:
                    seeded = dataclasses.replace(config, seed=seed)
                    federation = federations.get(seeded)
                    key = cls._key(seeded, federation)
                    if key not in ledgers._ledgers:
                        ledgers._ledgers[key] = open_ledger(seeded, federation)
                    planned.setdefault(key, []).extend(
                        _planned_point(seeded, point, federation) for point in points
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
        return {level: value if math.isfinite(value) else None for level, value in total.items()}

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
            [row.method, *[row.point[axis] for axis in axes]]
            + ["" if values[name] is None else values[name] for name in fields if name != "method"]
        )
    return _write_atomic(out / SWEEP_JSON, json_text), _write_atomic(out / SWEEP_CSV, buffer.getvalue())


def machine_description() -> dict[str, Any]:
    """Where the sweep ran: platform, CPUs, torch and its device."""
    return {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


class ReusedVotesTransport(Transport):
    """A :class:`LocalTransport` whose teachers and clean votes outlive one run.

    Teachers are trained (or kNN indices built) on the first request and kept; clean
    vote sums Σᵢ vᵢ(x) are computed once per query and cached. Each vote request then
    adds fresh noise: the sum of the t…N agents' shares N(0, s²) is drawn directly as
    N(0, responders·s²), which has exactly the distribution of the sum the agents would
    release. Reputation-weighted votes and the accuracy summary are summed clean by the
    inner agents each run (the weights follow each run's own noisy summary) and noised
    here the same way. Simulation only (it holds every agent's clean votes); it counts
    communication as if every round were sent.
    """

    def __init__(self, inner: LocalTransport, *, noise_seed: int | None = None) -> None:
        super().__init__()
        self._inner = inner
        self._rng = self._noise_generator(noise_seed)
        self._trained: TrainingConfig | None = None
        self._knn_key: tuple[int, int | None, float] | None = None
        self._ks: np.ndarray | None = None
        self._clean: dict[int, np.ndarray] = {}  # query index -> clean vote sum (C,)
        self._accuracies: np.ndarray | None = None
        self._counts = {"teacher_trainings": 0, "knn_preparations": 0, "clean_votes_computed": 0}

    @staticmethod
    def _noise_generator(noise_seed: int | None) -> np.random.Generator:
        entropy = noise_seed if noise_seed is not None else secrets.randbits(128)
        return np.random.default_rng(np.random.SeedSequence([entropy, 0x5EE9]))

    def reseed(self, noise_seed: int | None) -> None:
        """Draw the next run's aggregate noise from ``noise_seed``'s stream (None: fresh OS entropy)."""
        self._rng = self._noise_generator(noise_seed)

    @property
    def num_agents(self) -> int:
        """Number of agents N."""
        return self._inner.num_agents

    def reuse_counts(self) -> dict[str, int]:
        """How often the expensive steps actually ran (the proof that work was reused)."""
        return dict(self._counts)

    def train_teachers(self, config: TrainingConfig, progress: Progress = NO_PROGRESS) -> None:
        """Train the teachers the first time (or when ``config`` changes); else keep them."""
        if self._trained != config:
            self._inner.train_teachers(config, progress)
            self._trained = config
            self._clean.clear()
            self._accuracies = None
            self._counts["teacher_trainings"] += 1

    def prepare_knn(
        self, extractor: FeatureExtractor, *, k: int | None = None, k_fraction: float = 0.05
    ) -> np.ndarray:
        """Build the agents' kNN indices once per extractor and k."""
        key = (id(extractor), k, k_fraction)
        if self._ks is None or self._knn_key is None or self._knn_key[1:] != key[1:]:
            self._ks = self._inner.prepare_knn(extractor, k=k, k_fraction=k_fraction)
            self._knn_key = key
            self._clean.clear()
            self._accuracies = None
            self._counts["knn_preparations"] += 1
        return self._ks.copy()

    def vote_sum(self, query_indices: np.ndarray, noise_std: float, min_responders: int) -> VoteSum | None:
        """Cached clean sums of these queries plus fresh aggregate noise."""
        return self._noisy_sum(query_indices, noise_std, min_responders)

    def knn_vote_sum(
        self, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """As :meth:`vote_sum`, for kNN votes (after :meth:`prepare_knn`)."""
        return self._noisy_sum(query_indices, noise_std, min_responders)

    def clean_vote_histograms(self, query_indices: np.ndarray) -> np.ndarray:
        """The cached clean vote sums of ``query_indices``, (Q, C) (simulation diagnostic)."""
        queries = np.asarray(query_indices, dtype=np.int64)
        missing = [int(q) for q in queries if int(q) not in self._clean]
        if missing:
            sums = self._inner.clean_vote_histograms(np.asarray(missing, dtype=np.int64))  # (M, C)
            self._clean.update(zip(missing, sums, strict=True))
            self._counts["clean_votes_computed"] += len(missing)
        return np.stack([self._clean[int(q)] for q in queries])

    def teacher_accuracies(self, test: LabeledData) -> np.ndarray:
        """Each teacher's test accuracy (N,), computed once."""
        if self._accuracies is None:
            self._accuracies = self._inner.teacher_accuracies(test)
        return self._accuracies.copy()

    def record_counts(self) -> np.ndarray:
        """Each agent's number of records (gradient methods run afresh through the inner transport)."""
        return self._inner.record_counts()

    def local_updates(
        self, global_params: np.ndarray, agent_ids: np.ndarray, training: LocalTraining
    ) -> LocalUpdates:
        """One round of local training; nothing to reuse, so the inner transport runs it."""
        return self._forward(lambda: self._inner.local_updates(global_params, agent_ids, training))

    # --- Reputation-weighted voting: the teachers are reused; each run fixes the agents'
    # weights afresh (they depend on its own noisy accuracy summary). The inner agents
    # compute their clean shares (noise std 0 draws nothing); the aggregate noise of the
    # responders' shares, N(0, responders·s²), is drawn here from the run's stream.

    def simulate_behaviours(self, behaviours: Sequence[Behaviour]) -> None:
        """Make agent i behave as ``behaviours[i]``; cached clean votes are dropped (they change)."""
        self._inner.simulate_behaviours(behaviours)
        self._clean.clear()

    def accuracy_summary(
        self, validation: LabeledData, bins: int, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """The agents' clean accuracy bins summed in process, plus fresh aggregate noise; one round."""
        clean = self._forward(lambda: self._inner.accuracy_summary(validation, bins, 0.0, min_responders))
        return None if clean is None else self._noised(clean, noise_std)

    def assign_weights(self, validation: LabeledData | None, rule: WeightRule) -> None:
        """Every agent fixes its own weight from ``rule`` (in the inner transport's agents)."""
        self._forward(lambda: self._inner.assign_weights(validation, rule))

    def weighted_vote_sum(
        self, query_indices: np.ndarray, noise_std: float, min_responders: int
    ) -> VoteSum | None:
        """The agents' clean weighted votes summed in process, plus fresh aggregate noise; one round."""
        clean = self._forward(lambda: self._inner.weighted_vote_sum(query_indices, 0.0, min_responders))
        return None if clean is None else self._noised(clean, noise_std)

    def _noised(self, clean: VoteSum, noise_std: float) -> VoteSum:
        """``clean`` plus the sum of its responders' noise shares N(0, noise_std²), drawn as one."""
        sums = clean.sums
        if noise_std > 0:
            sums = sums + self._rng.normal(0.0, noise_std * np.sqrt(clean.responders), size=sums.shape)
        return VoteSum(sums=sums, responders=clean.responders)

    def _forward(self, action: Callable[[], _T]) -> _T:
        """Run ``action`` on the inner transport and count its communication as this one's."""
        before = self._inner.communication.as_dict()
        result = action()
        after = self._inner.communication.as_dict()
        self.communication.upload_floats += after["upload_floats"] - before["upload_floats"]
        self.communication.download_floats += after["download_floats"] - before["download_floats"]
        self.communication.rounds += after["rounds"] - before["rounds"]
        return result

    def confident_labels(
        self,
        query_indices: np.ndarray,
        *,
        threshold: float,
        threshold_noise_std: float,
        noise_std: float,
        min_responders: int,
    ) -> ReleasedLabels | None:
        """Confident-GNMax on the cached clean sums, two fresh aggregate noise draws; one round.

        Counts what :meth:`LocalTransport.confident_labels` sends: two (Q, C) copies up.
        """
        responders = self.num_agents  # in-process every agent responds
        q = query_indices.shape[0]
        self.communication.download_floats += self.num_agents * q
        self.communication.upload_floats += responders * 2 * q * self._inner.num_classes
        self.communication.rounds += 1
        if responders < min_responders:
            return None
        clean = self.clean_vote_histograms(query_indices)  # (Q, C)
        scale = np.sqrt(responders)
        check = clean + self._rng.normal(0.0, threshold_noise_std * scale, size=clean.shape)
        argmax = clean + self._rng.normal(0.0, noise_std * scale, size=clean.shape)
        answered, labels = confident_gnmax_step(check, argmax, threshold)
        return ReleasedLabels(answered=answered, labels=labels, responders=responders)

    def _noisy_sum(self, query_indices: np.ndarray, noise_std: float, min_responders: int) -> VoteSum | None:
        responders = self.num_agents  # in-process every agent responds
        num_classes = self._inner.num_classes
        self.communication.download_floats += self.num_agents * query_indices.shape[0]
        self.communication.upload_floats += responders * query_indices.shape[0] * num_classes
        self.communication.rounds += 1
        if responders < min_responders:
            return None
        sums = self.clean_vote_histograms(query_indices)  # (Q, C)
        if noise_std > 0:
            sums = sums + self._rng.normal(0.0, noise_std * np.sqrt(responders), size=sums.shape)
        return VoteSum(sums=sums, responders=responders)


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
    return ", ".join(f"{name}={value:g}" for name, value in point.items())


def _write_atomic(target: Path, text: str) -> Path:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}-", suffix=target.suffix)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
