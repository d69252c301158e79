"""Issue 43's two Bar federations as the release measurements see them (projected_votes, teacher_variants).

One job: build each Bar's federation through the defaults' public features, plan its σ, train
the defaults' teachers, draw the shared noise, and drive a script over both federations, so
that the scripts measuring other releases or other teachers differ only in what they measure.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import code_version, machine, require_data_dir, save_results  # noqa: E402  (experiments/run.py)

from fedvote.data.federation import Federation  # noqa: E402
from fedvote.models.config import TrainingConfig  # noqa: E402
from fedvote.models.ensemble import fit_ensemble  # noqa: E402
from fedvote.runner import make_federation, plan, prepare_public  # noqa: E402
from fedvote.settings import build_config  # noqa: E402

SEED = 0
DRAWS = 3
FEDERATIONS: dict[str, dict[str, Any]] = {
    "CIFAR-10 (JPEG copy), the Bar's command": {
        "dataset": "cifar10", "agents": 100, "partition": "dirichlet", "dirichlet_alpha": 0.5, "epsilon": 4.0,
    },
    "Fashion-MNIST, the Bar's command": {
        "dataset": "fashion-mnist", "agents": 100, "partition": "classes", "classes_per_agent": 6, "epsilon": 4.3,
    },
}  # fmt: skip
BAR_ACCURACY = {"cifar10": 0.60, "fashion-mnist": 0.85}  # issue 43's accuracy bar on each command above


@dataclass(frozen=True, eq=False)
class BarFederation:
    """A Bar's federation seen through the defaults' φ, its planned teachers and σ, the pool and test as float64."""

    federation: Federation
    seed: int
    teacher: TrainingConfig
    sigma: float
    pool: np.ndarray  # (Q, d)
    test: np.ndarray  # (T, d)
    test_labels: np.ndarray  # (T,)


def prepared(settings: dict[str, Any], data_dir: str, seed: int = SEED) -> BarFederation:
    """PATE-FL's federation for ``settings`` (one of :data:`FEDERATIONS`) at ``seed``, planned as a run plans it."""
    config = build_config("pate-fl", data_dir=data_dir, seed=seed, **settings)
    federation = prepare_public(config, make_federation(config))
    planned = plan(config, federation.public_metadata())
    pool = federation.public.features.astype(np.float64)
    test = federation.test.features.astype(np.float64)
    return BarFederation(federation, seed, planned.teacher, float(planned.sigma), pool.reshape(len(pool), -1),
                         test.reshape(len(test), -1), np.asarray(federation.test.labels))  # fmt: skip


def fit_teachers(bar: BarFederation, teacher: TrainingConfig | None = None) -> Any:
    """Every agent's teacher (the planned one unless ``teacher``), seeded as the scripts' rows compare them."""
    federation = bar.federation
    return fit_ensemble(
        [agent.features for agent in federation.agents],
        [np.asarray(agent.labels) for agent in federation.agents],
        bar.teacher if teacher is None else teacher,
        [bar.seed * 1_000 + i for i in range(federation.num_agents)],
        num_classes=federation.num_classes,
    )


def noisy_reads(
    clean: np.ndarray, noise: float, read: Callable[[np.ndarray], float], seed: int = SEED
) -> list[float]:
    """``read`` of ``clean`` plus N(0, noise²) for each of the :data:`DRAWS` draws every row at ``seed`` shares."""
    return [read(clean + np.random.default_rng([seed, 43, draw]).normal(0.0, noise, clean.shape))
            for draw in range(DRAWS)]  # fmt: skip


def main_over_federations(
    name: str,
    measure: Callable[[str, dict[str, Any], str], dict[str, Any]],
    section: Callable[[dict[str, Any]], str],
) -> None:
    """A script's main: ``measure`` each federation, save the record and its section (``--render``: the section only)."""
    if "--render" in sys.argv[1:]:  # the section again from the saved record, without rerunning
        record = json.loads((HERE / "results" / f"{name}.json").read_text())
        save_results(name, record, section(record))
        return
    data_dir = require_data_dir(f"experiments/{name}.py", holding="cifar10/ and fashion-mnist/")
    started = time.perf_counter()
    parts = [measure(label, settings, data_dir) for label, settings in FEDERATIONS.items()]
    record = {"name": name, "machine": machine(), "date": time.strftime("%Y-%m-%d"), "seed": SEED,
              "draws": DRAWS, "parts": parts, "wall_seconds": time.perf_counter() - started}  # fmt: skip
    save_results(name, record, section(record))
    print(section(record))


def measure_part_into_saved(
    name: str,
    part: str,
    measure_into: Callable[[str, dict[str, Any]], None],
    section: Callable[[dict[str, Any]], str],
) -> None:
    """A script's ``--part P``: ``measure_into(data_dir, record)`` adds P's rows to the saved record, stamped with
    when, at which commit and in how long (``record["parts_ran"][P]``, :func:`part_ran`), then saved and rendered."""
    data_dir = require_data_dir(f"experiments/{name}.py", holding="cifar10/ and fashion-mnist/")
    path = HERE / "results" / f"{name}.json"
    record = json.loads(path.read_text())
    started = time.perf_counter()
    measure_into(data_dir, record)
    record.setdefault("parts_ran", {})[part] = {"date": time.strftime("%Y-%m-%d"),
                                                "commit": code_version().removeprefix("commit "),
                                                "wall_seconds": time.perf_counter() - started}  # fmt: skip
    save_results(name, record, section(record))
    print(section(record))


def part_ran(record: dict[str, Any], part: str) -> str:
    """'--part P, DATE, fedvote commit C, N s' for a part measured by :func:`measure_part_into_saved` ('' if not)."""
    ran = record.get("parts_ran", {}).get(part)
    if ran is None:
        return ""
    return f"`--part {part}`, {ran['date']}, fedvote commit {ran['commit']}, {ran['wall_seconds']:.0f} s"
