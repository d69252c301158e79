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
from fedvote.privacy.ledger import event_from_json, event_to_json
from fedvote.results import finite_or_none, write_atomic
from fedvote.sweep.identity import check_same_sweep, sweep_identity
from fedvote.sweep.points import SweepPoint
from fedvote.sweep.results import SweepResult, SweepRow, write_sweep

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
        store = cls(out_dir, sweep_identity(configs, grid, seed_list), resume=resume, command=command)
        plan = store._read_plan()
        if resume:
            if plan is None:
                raise ConfigError("resume", f"{store.out} holds no sweep to resume (no {store.plan_path})")
            check_same_sweep(store.out, plan, store.identity)
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
