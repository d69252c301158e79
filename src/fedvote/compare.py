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

**One ledger for all rows.** Every row is a release on the same federation: under the
config's ``--ledger`` each row's run is charged to it (a
:class:`~fedvote.privacy.ledger.LedgerSession` of one shared ledger), the sum of all
rows' planned events is checked against the stored budget before the first row runs (a
compare that would overrun it releases nothing), and ``compare.json`` states the total
ε of all rows' charges.

**One noise stream per method.** Under ``--noise-seed S`` each method's run gets its own
seed, :func:`fedvote.privacy.noise_seeds.run_noise_seed` (S, method, 0), recorded in its row: two
rows never share noise, and each row is reproducible on its own.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedvote.config import RunConfig
from fedvote.errors import ConfigError
from fedvote.methods import METHODS, check_method, option_names
from fedvote.privacy.accountant import bounded_epsilon
from fedvote.privacy.events import LEVELS
from fedvote.privacy.ledger import LedgerSession, PrivacyLedger
from fedvote.privacy.noise_seeds import run_noise_seed
from fedvote.privacy.run_ledger import check_budget, ledger_details, open_ledger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.results import RunResult, finite_or_none, write_atomic
from fedvote.runner import make_federation, planned_release, run

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
        return dict(finite_or_none(dataclasses.asdict(self)))

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


@dataclass(frozen=True)
class Comparison:
    """A comparison's rows, the total ε of all their charges per level, and the ledger's state."""

    rows: list[ComparisonRow]
    total_epsilon: dict[str, float | None]
    ledger: dict[str, Any] | None = None
    # The accountant behind each level's total: the run's, or "rdp" (an upper bound) / "none"
    # (∞) where its PLD could not be built (privacy.accountant.bounded_epsilon).
    total_accountant: dict[str, str] = field(default_factory=dict)


def compare(
    config: RunConfig,
    methods: Sequence[str],
    *,
    epsilon: float,
    delta: float,
    out_dir: str | Path | None = None,
    progress: Progress = NO_PROGRESS,
) -> list[ComparisonRow]:
    """The rows of :func:`run_comparison` (same arguments)."""
    return run_comparison(
        config, methods, epsilon=epsilon, delta=delta, out_dir=out_dir, progress=progress
    ).rows


def run_comparison(
    config: RunConfig,
    methods: Sequence[str],
    *,
    epsilon: float,
    delta: float,
    out_dir: str | Path | None = None,
    progress: Progress = NO_PROGRESS,
) -> Comparison:
    """Run ``methods`` on ``config``'s federation, each calibrated to ``epsilon`` at ``delta``.

    The federation is built once from ``config`` and shared; each method then runs
    through :func:`fedvote.runner.run` with its noise calibrated at its own level
    (``Method.calibration_level``; FedAvg, not private, runs as is) and, under a noise
    seed, its own noise stream (:func:`method_noise_seed`). Every row is charged to one
    ledger (``config.privacy.ledger``, else in memory); with a persisted ledger the sum
    of all rows' planned events is checked against its budget before the first row.
    Writes ``out_dir/compare.json`` when given.
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ConfigError(
            "methods", f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(sorted(METHODS))}"
        )
    if not methods:
        raise ConfigError("methods", "name at least one method")
    configs = [_row_config(config, name, epsilon=epsilon, delta=delta) for name in methods]
    federation = make_federation(config)
    with open_ledger(config, federation) as ledger:
        planned = [planned_release(row_config, federation) for row_config in configs]
        check_budget(ledger, planned, what=f"this compare's {len(configs)} runs")  # before any release
        rows = []
        for name, row_config in zip(methods, configs, strict=True):
            session = LedgerSession(ledger, f"compare {name}")
            result = run(row_config, progress, federation=federation, ledger=session)
            rows.append(ComparisonRow.from_result(result))
        state = ledger_details(ledger).get("ledger")
        comparison = Comparison(
            rows=rows,
            total_epsilon=_total_epsilon(ledger, delta, config.privacy.accountant),
            total_accountant=_total_accountant(ledger, delta, config.privacy.accountant),
            ledger=state if isinstance(state, dict) else None,
        )
    if out_dir is not None:
        write_comparison(comparison, config, epsilon=epsilon, delta=delta, out_dir=out_dir)
    return comparison


def _row_config(config: RunConfig, name: str, *, epsilon: float, delta: float) -> RunConfig:
    """``config`` for method ``name``'s row: calibrated to ``epsilon`` (or σ = 0), its own noise seed.

    The row gets the options of ``config`` that its method takes (the gradient settings go to
    the gradient rows, a voting method's to its own row). The ledger and its budget stay: the
    row is a release on the same federation.
    """
    private = METHODS[name].calibration_level is not None
    taken = option_names(name)
    row = dataclasses.replace(
        config,
        method=name,
        options={key: value for key, value in config.options.items() if key in taken},
        privacy=dataclasses.replace(
            config.privacy,
            sigma=None,  # calibrated to ε, or each non-calibrated method's own (none, or its heads' budgets)
            epsilon=epsilon if private else None,
            delta=delta,
            calibrate_level=None,
            noise_seed=method_noise_seed(config.privacy.noise_seed, name),
        ),
    )
    check_method(row)  # a bad option of any row is refused before the first row runs
    return row


def _total_epsilon(ledger: PrivacyLedger, delta: float, accountant: str) -> dict[str, float | None]:
    """ε per level of everything charged to ``ledger`` in this process (all rows), at ``delta``."""
    total = {level: bounded_epsilon(ledger.event(level), delta, accountant).epsilon for level in LEVELS}
    return finite_or_none(total)


def _total_accountant(ledger: PrivacyLedger, delta: float, accountant: str) -> dict[str, str]:
    """The accountant behind each level's :func:`_total_epsilon` (remembered: no second PLD)."""
    return {level: bounded_epsilon(ledger.event(level), delta, accountant).accountant for level in LEVELS}


def method_noise_seed(noise_seed: int | None, method: str) -> int | None:
    """``method``'s own noise seed in a comparison under ``noise_seed`` (None: OS entropy)."""
    return None if noise_seed is None else run_noise_seed(noise_seed, method, 0)


def write_comparison(
    comparison: Comparison, config: RunConfig, *, epsilon: float, delta: float, out_dir: str | Path
) -> Path:
    """Write ``out_dir/compare.json``: the target, the config, the rows, the total ε of all rows."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "compare.json"
    payload = {
        "target_epsilon": epsilon,
        "delta": delta,
        "accountant": config.privacy.accountant,
        "config": config.to_dict(),
        "rows": [row.to_dict() for row in comparison.rows],
        "total_epsilon": comparison.total_epsilon,
        "total_accountant": comparison.total_accountant,
        "ledger": comparison.ledger,
    }
    return write_atomic(path, json.dumps(payload, indent=2) + "\n")


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
