"""A sweep's grid: the axes, their product, and a config at one grid point."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

from fedvote.config import RunConfig
from fedvote.errors import ConfigError
from fedvote.privacy.noise_seeds import run_noise_seed

# The axes a grid may span, and how a value is read.
GRID_AXES: dict[str, type] = {"epsilon": float, "sigma": float, "queries": int, "delta": float}

# The grid axes that change only a run's noise and its accounting: a non-private
# reference runs the same at any of their values (:func:`is_reference`).
PRIVACY_AXES: frozenset[str] = frozenset({"epsilon", "sigma", "delta"})


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
