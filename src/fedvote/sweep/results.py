"""What a sweep reports: its rows, ``sweep.json`` and ``sweep.csv``, and its progress lines."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fedvote.results import RunResult, finite_or_none, write_atomic

SWEEP_JSON = "sweep.json"
SWEEP_CSV = "sweep.csv"


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
    # the accountant behind each level's total ("rdp"/"none" where its PLD could not be built)
    total_accountant: dict[str, str] = field(default_factory=dict)
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
                "total_accountant": self.total_accountant,
                "ledgers": self.ledgers,
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
