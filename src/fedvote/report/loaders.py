"""Read what runs, sweeps and comparisons leave on disk, for plots and reports.

Three inputs:

* a **run directory** (``fedvote run --out DIR``): ``result.json`` and, when the run
  recorded them, the arrays of ``analysis.npz`` (:mod:`fedvote.analysis`);
* a **sweep** (``fedvote sweep``): ``sweep.json`` with ``{"sweep": {...}, "base_config":
  {...}, "rows": [{"method", "point", "seed", "accuracy", "epsilon_agent",
  "epsilon_instance", "delta", "calibrated_level", ...}, ...]}``;
* a **comparison** (``fedvote compare --out``): ``compare.json`` with ``rows`` of
  ``{"method", "accuracy", "epsilon_agent", "epsilon_instance", "calibrated_level", ...}``
  (the experiments' files wrap the same rows with ``name``/``machine``/``date``).

The trade-off plot reads all of them as :class:`TradeoffPoint` s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedvote.analysis import ANALYSIS_FILE, RunAnalysis
from fedvote.errors import ConfigError
from fedvote.results import finite_or_none

RESULT_FILE = "result.json"
SWEEP_FILE = "sweep.json"
COMPARE_FILE = "compare.json"
LEVEL_CHOICES: tuple[str, ...] = ("calibrated", "agent", "instance")


@dataclass(frozen=True, eq=False)
class RunData:
    """One run: result.json as a dict and its analysis arrays (None when not recorded)."""

    directory: Path
    result: dict[str, Any]
    analysis: RunAnalysis | None


@dataclass(frozen=True)
class TradeoffPoint:
    """One (ε, accuracy) measurement of ``method``; ``group`` joins repeats (seeds) of one setting.

    ``epsilon`` is None for a non-private run (drawn as a reference line).
    """

    method: str
    level: str
    epsilon: float | None
    accuracy: float
    group: str
    delta: float | None = None


def read_json(path: Path, argument: str = "path") -> dict[str, Any]:
    """The JSON object in ``path``; a one-line ConfigError naming ``argument`` otherwise."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(argument, f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(argument, f"{path} is not readable JSON ({error})") from None
    if not isinstance(data, dict):
        raise ConfigError(argument, f"{path} does not hold a JSON object")
    return data


def load_run(directory: str | Path) -> RunData:
    """The run in ``directory`` (its result.json, and analysis.npz when present)."""
    path = Path(directory)
    result = read_json(path / RESULT_FILE, "directory")
    for key in ("method", "accuracy", "privacy", "config"):
        if key not in result:
            raise ConfigError("directory", f"{path / RESULT_FILE} has no {key!r}; not a fedvote result")
    analysis = None
    if (path / ANALYSIS_FILE).exists():
        try:
            analysis = RunAnalysis.load(path / ANALYSIS_FILE)
        except Exception as error:  # noqa: BLE001 - empty (EOFError), zip and format errors alike
            raise ConfigError("directory", f"{path / ANALYSIS_FILE} is unreadable ({error})") from None
    return RunData(directory=path, result=result, analysis=analysis)


def resolve_input(path: str | Path) -> Path:
    """The JSON file behind ``path``: itself, or the sweep/compare/result file in a directory."""
    target = Path(path)
    if target.is_dir():
        for name in (SWEEP_FILE, COMPARE_FILE, RESULT_FILE):
            if (target / name).exists():
                return target / name
        raise ConfigError("files", f"{target} holds no {SWEEP_FILE}, {COMPARE_FILE} or {RESULT_FILE}")
    if not target.exists():
        raise ConfigError("files", f"{target} does not exist")
    return target


def tradeoff_points(
    paths: list[str | Path] | tuple[str | Path, ...], level: str = "calibrated"
) -> list[TradeoffPoint]:
    """Every (ε, accuracy) point in the sweep, compare and result files (or directories) given.

    ``level`` picks the ε: ``"calibrated"`` (each row at the level its noise was
    calibrated to, else agent), ``"agent"`` or ``"instance"``. Rows with no ε at that level
    but one at another are left out (the method does not protect that level); rows with
    no ε at all are non-private references (``epsilon`` None).
    """
    if level not in LEVEL_CHOICES:
        raise ConfigError("level", f"must be one of {', '.join(LEVEL_CHOICES)}, got {level!r}")
    if not paths:
        raise ConfigError("files", "name at least one sweep.json, compare.json or result.json")
    points: list[TradeoffPoint] = []
    for raw in paths:
        path = resolve_input(raw)
        data = read_json(path, "files")
        if "rows" in data and "sweep" in data:
            rows = [
                _row_point(row, level, f"{path}:{json.dumps(row.get('point'), sort_keys=True)}")
                for row in _rows(data, path)
            ]
        elif "rows" in data:  # a compare file: one point per row
            delta = data.get("delta")
            rows = [
                _row_point({"delta": delta, **row}, level, f"{path}:{i}")
                for i, row in enumerate(_rows(data, path))
            ]
        elif "privacy" in data and "accuracy" in data:  # a single run's result.json
            rows = [_row_point(result_row(data), level, str(path))]
        else:
            raise ConfigError("files", f"{path} is not a fedvote sweep, compare or result file")
        points.extend(point for point in rows if point is not None)
    if not points:
        raise ConfigError("files", "no row has an accuracy to plot")
    return points


def result_row(result: dict[str, Any]) -> dict[str, Any]:
    """A run's result.json as one sweep-style row."""
    privacy = result["privacy"]
    return {
        "method": result["method"],
        "accuracy": result["accuracy"],
        "epsilon_agent": privacy["agent"]["epsilon"],
        "epsilon_instance": privacy["instance"]["epsilon"],
        "calibrated_level": privacy.get("calibrated_level"),
        "delta": privacy.get("delta"),
    }


def _rows(data: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    rows = data["rows"]
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise ConfigError("files", f"{path}: 'rows' must be a list of objects")
    for i, row in enumerate(rows):
        missing = [
            key for key in ("method", "accuracy", "epsilon_agent", "epsilon_instance") if key not in row
        ]
        if missing:
            raise ConfigError("files", f"{path}: row {i} lacks {', '.join(missing)}")
    return rows


def _finite(value: Any) -> float | None:
    """A number read from JSON as a float, None when absent or not finite."""
    return None if value is None else finite_or_none(float(value))


def _row_point(row: dict[str, Any], level: str, group: str) -> TradeoffPoint | None:
    accuracy = _finite(row.get("accuracy"))
    if accuracy is None:
        return None
    epsilons = {"agent": _finite(row["epsilon_agent"]), "instance": _finite(row["epsilon_instance"])}
    chosen = level
    if level == "calibrated":
        chosen = row.get("calibrated_level") or ("agent" if epsilons["agent"] is not None else "instance")
    if chosen not in epsilons:
        raise ConfigError("files", f"row of {row['method']!r}: unknown calibrated_level {chosen!r}")
    epsilon = epsilons[chosen]
    if epsilon is None and any(value is not None for value in epsilons.values()):
        return None  # private, but not at this level
    return TradeoffPoint(
        method=str(row["method"]),
        level=chosen if epsilon is not None else "none",
        epsilon=epsilon,
        accuracy=accuracy,
        group=group,
        delta=_finite(row.get("delta")),
    )
