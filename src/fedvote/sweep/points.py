"""The runs of a sweep: which points each method runs at, in run order, and what they plan to release."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dp_accounting import dp_event

from fedvote.config import RunConfig
from fedvote.data.federation import Federation
from fedvote.errors import ConfigError
from fedvote.methods import METHODS, Method, PateFL, PrivateKnnFL
from fedvote.privacy.events import LEVELS, LevelEvents
from fedvote.results import finite_or_none
from fedvote.runner import make_federation, planned_release
from fedvote.sweep.grid import point_config, reference_points, with_run_noise_seed

# The methods whose every transport operation :class:`ReusedVotesTransport` serves (their
# subclasses included: weighted-pate is a PateFL). Any other method gets a fresh
# LocalTransport per grid point — always correct, only slower.
REUSES_VOTES: tuple[type[Method], ...] = (PateFL, PrivateKnnFL)


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
        return f"{self.config.method} seed {self.seed} at {describe_point(self.point)}"

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
        return json_normal(
            {
                "index": self.index,
                "method": self.config.method,
                "seed": self.seed,
                "point": self.point,
                "reference": self.reference,
            }
        )


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


def swept_method(
    config: RunConfig, points: list[dict[str, float | int]], federation: Federation
) -> tuple[RunConfig, list[dict[str, float | int]], bool]:
    """(the config as the sweep runs it, the points it runs at, whether it is a reference)."""
    if is_reference(config, federation):
        return without_privacy_target(config), reference_points(points), True
    return config, points, False


class Federations:
    """Each (federation settings, seed)'s federation, built once and shared by the sweep's methods."""

    def __init__(self) -> None:
        self._built: dict[str, Federation] = {}

    def get(self, config: RunConfig) -> Federation:
        """``config``'s federation (deterministic under its seed)."""
        key = json.dumps([config.to_dict()["federation"], config.seed], sort_keys=True)
        if key not in self._built:
            self._built[key] = make_federation(config)
        return self._built[key]


def json_normal(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples as lists, non-finite floats as None)."""
    return json.loads(json.dumps(finite_or_none(value)))


def planned_point(config: RunConfig, point: dict[str, float | int], federation: Federation) -> LevelEvents:
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


def describe_point(point: dict[str, float | int]) -> str:
    """``"epsilon=1, queries=40"``; a reference run at no grid axis is ``"its one run (reference)"``."""
    return ", ".join(f"{name}={value:g}" for name, value in point.items()) or "its one run (reference)"
