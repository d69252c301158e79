"""Methods side by side at the same ε: same federation, same seed, one table.

Each method's noise is calibrated so that its ε at the run's δ meets the target at the
level the method can protect (``Method.calibration_level``): the agent level for the
voting methods (σ of the vote sums) and DP-FedAvg (its noise multiplier at fixed T); the
instance level for DP-FedSGD, whose agent-level ε is unbounded (the row says so);
nothing for FedAvg (non-private). Every method then runs on one federation (built once
from the config and its seed) and reports accuracy, ε at both levels, communication and
time. ``compare.json`` holds the rows and the config they came from.

**One adjacency per column.** The instance level is replace-one record for every
method (DP-FedSGD included: its DP-SGD event is accounted under dp-accounting's
REPLACE_ONE relation, not DP-SGD's usual add/remove), the agent level zero-out of one
agent; the table header names both, so that the figures in a column compare.

**One noise stream per method.** Under ``--noise-seed S`` each method's run gets its own
seed, :func:`fedvote.noise_seeds.run_noise_seed` (S, method, 0), recorded in its row: two
rows never share noise, and each row is reproducible on its own.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedvote.config import RunConfig
from fedvote.errors import ConfigError
from fedvote.methods import METHODS
from fedvote.noise_seeds import run_noise_seed
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.results import RunResult, _finite
from fedvote.runner import make_federation, run

# The adjacency of each ε column (docs/privacy.md, "Adjacency"), named in the table header.
AGENT_ADJACENCY = "zero-out"
INSTANCE_ADJACENCY = "replace-one"


@dataclass(frozen=True)
class ComparisonRow:
    """One method's line of the comparison table."""

    method: str
    accuracy: float
    epsilon_agent: float | None
    epsilon_instance: float | None
    calibrated_level: str | None
    sigma: float
    upload_floats: int
    download_floats: int
    rounds: int
    seconds: float
    details: dict[str, Any]
    noise_seed: int | None = None
    instance_adjacency: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (non-finite floats as null)."""
        return dict(_finite(dataclasses.asdict(self)))

    @classmethod
    def from_result(cls, result: RunResult) -> ComparisonRow:
        """The row of one run."""
        communication = result.communication
        return cls(
            method=result.method,
            accuracy=result.accuracy,
            epsilon_agent=result.privacy.agent.epsilon,
            epsilon_instance=result.privacy.instance.epsilon,
            calibrated_level=result.privacy.calibrated_level,
            sigma=result.sigma,
            upload_floats=communication["upload_floats"],
            download_floats=communication["download_floats"],
            rounds=communication["rounds"],
            seconds=result.timings["total_s"],
            details=dict(result.details),
            noise_seed=result.config["privacy"]["noise_seed"],
            instance_adjacency=result.privacy.instance.adjacency,
        )


def compare(
    config: RunConfig,
    methods: Sequence[str],
    *,
    epsilon: float,
    delta: float,
    out_dir: str | Path | None = None,
    progress: Progress = NO_PROGRESS,
) -> list[ComparisonRow]:
    """Run ``methods`` on ``config``'s federation, each calibrated to ``epsilon`` at ``delta``.

    The federation is built once from ``config`` and shared; each method then runs
    through :func:`fedvote.runner.run` with its noise calibrated at its own level
    (``Method.calibration_level``; FedAvg, not private, runs as is) and, under a noise
    seed, its own noise stream (:func:`method_noise_seed`). Writes
    ``out_dir/compare.json`` when given.
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ConfigError(
            "methods", f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(sorted(METHODS))}"
        )
    if not methods:
        raise ConfigError("methods", "name at least one method")
    federation = make_federation(config)
    rows: list[ComparisonRow] = []
    for name in methods:
        private = METHODS[name].calibration_level is not None
        run_config = dataclasses.replace(
            config,
            method=name,
            privacy=dataclasses.replace(
                config.privacy,
                sigma=None if private else 0.0,
                epsilon=epsilon if private else None,
                delta=delta,
                calibrate_level=None,
                ledger=None,
                budget_epsilon=None,
                noise_seed=method_noise_seed(config.privacy.noise_seed, name),
            ),
        )
        rows.append(ComparisonRow.from_result(run(run_config, progress, federation=federation)))
    if out_dir is not None:
        write_comparison(rows, config, epsilon=epsilon, delta=delta, out_dir=out_dir)
    return rows


def method_noise_seed(noise_seed: int | None, method: str) -> int | None:
    """``method``'s own noise seed in a comparison under ``noise_seed`` (None: OS entropy)."""
    return None if noise_seed is None else run_noise_seed(noise_seed, method, 0)


def write_comparison(
    rows: Sequence[ComparisonRow], config: RunConfig, *, epsilon: float, delta: float, out_dir: str | Path
) -> Path:
    """Write ``out_dir/compare.json``: the target, the config, the rows."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "compare.json"
    payload = {
        "target_epsilon": epsilon,
        "delta": delta,
        "accountant": config.privacy.accountant,
        "config": config.to_dict(),
        "rows": [row.to_dict() for row in rows],
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def format_table(rows: Sequence[ComparisonRow]) -> str:
    """The comparison as a plain-text table (ε ∞ where a level is not protected)."""

    def eps(value: float | None) -> str:
        return "∞" if value is None or not math.isfinite(value) else f"{value:.3f}"

    header = ("method", "accuracy", f"ε agent ({AGENT_ADJACENCY})", f"ε instance ({INSTANCE_ADJACENCY})",
              "calibrated", "σ", "floats up", "floats down", "rounds", "seconds")  # fmt: skip
    lines = [
        (
            row.method,
            f"{row.accuracy:.4f}",
            eps(row.epsilon_agent),
            eps(row.epsilon_instance),
            row.calibrated_level or "-",
            f"{row.sigma:.4g}",
            str(row.upload_floats),
            str(row.download_floats),
            str(row.rounds),
            f"{row.seconds:.1f}",
        )
        for row in rows
    ]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    out.append("  ".join("-" * w for w in widths))
    out.extend("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines)
    return "\n".join(out)
