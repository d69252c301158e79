"""What makes two sweeps the same, and the one line that refuses a resume of another sweep."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedvote.config import RunConfig
from fedvote.errors import ConfigError
from fedvote.sweep.points import json_normal


def sweep_identity(
    configs: Sequence[RunConfig], grid: dict[str, list[float | int]], seeds: Sequence[int]
) -> dict[str, Any]:
    """What makes two sweeps the same: each method's config, the grid and the seeds."""
    return json_normal(
        {
            "methods": [config.method for config in configs],
            "configs": [config.to_dict() for config in configs],
            "grid": grid,
            "seeds": list(seeds),
        }
    )


def check_same_sweep(out: Path, plan: dict[str, Any], identity: dict[str, Any]) -> None:
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
        relative = _relative_ledger(plan.get("configs"))
        if relative is not None:
            raise ConfigError("resume", _relative_ledger_refusal(out, relative, fields))
        differ = ", ".join(fields) or "the config"
        raise ConfigError(
            "resume", f"{out} holds a sweep with other settings (they differ in {differ}){tail}"
        )


def _relative_ledger(configs: Any) -> str | None:
    """The relative ledger path recorded in a sweep's ``configs`` (one started before e8d909d), if any."""
    if not isinstance(configs, list):
        return None
    for config in configs:
        privacy = config.get("privacy") if isinstance(config, dict) else None
        ledger = privacy.get("ledger") if isinstance(privacy, dict) else None
        if isinstance(ledger, str) and ledger and not Path(ledger).is_absolute():
            return ledger
    return None


def _relative_ledger_refusal(out: Path, ledger: str, fields: Sequence[str]) -> str:
    """Why a sweep that recorded a relative ``--ledger`` is not resumed, and what to do instead.

    Such a sweep was started before ledger paths were recorded absolute. Its ledger is not
    resolved here: from another directory the same relative path names another file, and
    the resumed points would be charged to a second ledger, splitting the federation's budget.
    """
    others = [name for name in fields if name != "privacy.ledger"]
    also = f"; its settings also differ in {', '.join(others)}" if others else ""
    return (
        f"{out} holds a sweep that recorded a relative ledger path ({ledger!r}; sweeps started before "
        "fedvote recorded ledger paths absolute did), which is ambiguous (it names another file from "
        f"another directory) and is no longer accepted{also}; start the sweep again (--overwrite, or "
        "another --out; the charges already made stay in the ledger) with the same flags from the "
        "directory it was started in, or with an absolute --ledger naming the file its charges went to"
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
