"""A sweep's output directory: each point's row kept as it completes, and what a resume needs."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fedvote.config import RunConfig
from fedvote.errors import ConfigError
from fedvote.privacy.events import LevelEvents
from fedvote.results import finite_or_none, write_atomic
from fedvote.sweep.identity import check_same_sweep, sweep_identity
from fedvote.sweep.journal import JOURNAL_NAME, ChargeJournal, charge_from_json, charge_to_json
from fedvote.sweep.lock import LOCK_NAME, SweepLock
from fedvote.sweep.points import SweepPoint
from fedvote.sweep.results import SWEEP_CSV, SWEEP_JSON, SweepResult, SweepRow, write_sweep

# A sweep directory's completed points (SweepStore): POINTS_DIR/PLAN_JSON and POINTS_DIR/<n>.json.
POINTS_DIR = "points"
PLAN_JSON = "plan.json"
POINTS_FORMAT = "fedvote sweep points"
POINTS_VERSION = 1


class SweepStore:
    """A sweep's output directory: each point's row kept as it completes, and what a resume needs.

    ``D/points/plan.json``, written before the first point, names the sweep — each method's
    config, the grid, the seeds — and lists its points in run order; ``D/points/<n>.json``
    holds point n's row and the charges it made, written atomically (:func:`write_atomic`)
    as soon as the point is done; ``D/points/charges.jsonl`` every charge as it is made
    (:class:`~fedvote.sweep.journal.ChargeJournal`). :meth:`open` refuses, before anything
    is loaded or run, a resume of another sweep or of a directory without one, a fresh
    sweep into a directory that is not empty (unless ``overwrite``), and a directory
    another sweep holds (:class:`~fedvote.sweep.lock.SweepLock`, held until :meth:`close`).
    """

    def __init__(
        self,
        out_dir: str | Path,
        identity: dict[str, Any],
        *,
        resume: bool,
        command: str = "",
        overwrite: bool = False,
    ) -> None:
        self.out = Path(out_dir)
        self.points_dir = self.out / POINTS_DIR
        self.plan_path = self.points_dir / PLAN_JSON
        self.journal = ChargeJournal(self.points_dir / JOURNAL_NAME)
        self.identity = identity
        self.resume = resume
        self.overwrite = overwrite
        self.command = command
        self.done = 0  # points with a row on disk: resumed or run
        self.saved = 0  # of them, the rows this sweep wrote
        self.total: int | None = None  # the sweep's points, once known
        self._plan: dict[str, Any] | None = None
        self._created: list[Path] = []
        self._began = False
        self._lock: SweepLock | None = None

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
        overwrite: bool = False,
    ) -> SweepStore:
        """The store of ``out_dir`` for this sweep (``seeds`` None: the first config's seed), its lock held.

        Reads nothing but ``plan.json``; refuses (:class:`ConfigError`) with ``resume`` a
        directory holding no sweep or another sweep (methods, settings, grid or seeds), and
        without it (and without ``overwrite``) a directory that is not empty — leaving it
        as it is — then takes the directory's lock, refusing one another sweep holds, and
        checks again under it. :meth:`close` lets go of the lock.
        """
        if resume and overwrite:
            raise ConfigError(
                "overwrite", "--overwrite starts the sweep afresh; --resume continues it: give one"
            )
        seed_list = list(seeds) if seeds else [configs[0].seed]
        store = cls(
            out_dir,
            sweep_identity(configs, grid, seed_list),
            resume=resume,
            command=command,
            overwrite=overwrite,
        )
        store._check()  # before the lock: a refused sweep leaves the directory as it was
        store._lock = SweepLock.acquire(store.out)
        try:
            store._check()  # again: another sweep may have written it meanwhile
        except BaseException:
            store.close()
            raise
        return store

    def _check(self) -> None:
        """Refuse a resume of no sweep or another, or a fresh sweep into a directory that is not empty."""
        plan = self._read_plan()
        if self.resume:
            if plan is None:
                raise ConfigError("resume", f"{self.out} holds no sweep to resume (no {self.plan_path})")
            check_same_sweep(self.out, plan, self.identity)
            self._plan = plan
            return
        if self.overwrite:
            return
        tail = "give --overwrite to replace it (its ledger charges stay), or write to another directory"
        if plan is not None:
            done, total = len(self._point_files()), len(plan["points"])
            if done < total:
                raise ConfigError(
                    "out",
                    f"{self.out} holds an unfinished sweep ({done} of {total} points done); "
                    "continue it with --resume, or write to another directory",
                )
            points = f"{total} point{'s' * (total != 1)}"
            raise ConfigError("out", f"{self.out} holds a finished sweep ({points}); {tail}")
        entries = self.out.iterdir() if self.out.is_dir() else iter(())
        held = sorted(path.name for path in entries if path.name != LOCK_NAME)
        if held:
            shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
            raise ConfigError("out", f"{self.out} is not empty (it holds {shown}); {tail}")

    def close(self) -> None:
        """Let go of the directory's lock; a fresh sweep that kept nothing leaves nothing behind.

        Nothing kept: no row written and no charge journaled (a charge spent is kept, with its
        ``plan.json``, for ``--resume`` to count). Then ``plan.json``, the journal, the lock
        file and the directories this sweep made are removed.
        """
        if self._lock is None:
            return
        nothing = not self.resume and self.saved == 0 and self.journal.charged == 0
        if nothing and self._began:
            try:
                self.plan_path.unlink(missing_ok=True)
                self.journal.path.unlink(missing_ok=True)
                for made in reversed(self._created):
                    made.rmdir()
            except OSError:
                nothing = False  # something else is there: keep the directory
        self._lock.release(remove=nothing)
        self._lock = None

    def __enter__(self) -> SweepStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
                charges = [charge_from_json(charge) for charge in data["charges"]]
            except (OSError, ValueError, TypeError, KeyError) as error:
                raise ConfigError("resume", f"{path} is not a point of this sweep: {error}") from error
            completed[index] = (row, charges)
        self.done = len(completed)
        return completed

    def earlier_charges(
        self, completed: dict[int, tuple[SweepRow, list[LevelEvents]]]
    ) -> list[tuple[int, LevelEvents]]:
        """Every charge the sweep made before this resume, in order, with its point's index; ``[]`` if fresh.

        The journal's, which holds the charges of a point interrupted after its release
        too; ``completed``'s (the rows' charges) for a directory written before it kept one.
        """
        if self._plan is None:
            return []
        if self.journal.path.exists():
            return self.journal.read_points()
        return [(index, charge) for index, (_, charges) in sorted(completed.items()) for charge in charges]

    def begin(
        self, points: Sequence[SweepPoint], completed: dict[int, tuple[SweepRow, list[LevelEvents]]]
    ) -> None:
        """Before the first point: write ``plan.json`` (a resumed sweep's is there already).

        An earlier sweep's files in the directory (``--overwrite``: its point files, journal,
        ``sweep.json`` and ``sweep.csv``) are removed first. A resumed directory written
        before the journal was kept gets one, holding its rows' charges (``completed``).
        """
        self.total = len(points)
        if self._plan is not None and not self.journal.path.exists():
            self.journal.seed({index: charges for index, (_, charges) in completed.items()})
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
                earlier = [self.journal.path, self.out / SWEEP_JSON, self.out / SWEEP_CSV]
                for stale in [*self._point_files(), *earlier]:
                    stale.unlink(missing_ok=True)
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
            "charges": [charge_to_json(charge) for charge in charges],
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
        self.saved += 1
        return path

    def keep(self, result: Callable[[bool], SweepResult], *, any_rows: bool) -> None:
        """After an interrupt or error: the rows so far into ``sweep.json`` and ``sweep.csv``, not complete.

        ``result(False)`` builds them (a fresh sweep that finished no point leaves nothing
        behind: :meth:`close`). Best effort: the exception that stopped the sweep is the
        one reported, and every finished point's row is in ``points/`` already.
        """
        if not self._began:
            return
        try:
            if any_rows:
                write_sweep(result(False), self.out, command=self.command)
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
