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

**A charged row is never lost.** A compare interrupted or failed after its first charge
(a later row stopped, the table's accounting failed) keeps what it did:
:func:`run_comparison` hands ``on_stop`` a :class:`Comparison` of the rows done, marked not
``complete``, whose total ε composes *every* charge the compare made — the rows done and
the stopped row's releases — and writes it, when given ``out_dir``, as an incomplete
``compare.json`` beside ``charged.json`` (:func:`write_stopped`). The error's charge note
(what ``fedvote`` prints on its last line) is replaced by one covering all those charges,
not only the stopped row's.

**One noise stream per method.** Under ``--noise-seed S`` each method's run gets its own
seed, :func:`fedvote.privacy.noise_seeds.run_noise_seed` (S, method, 0), recorded in its row: two
rows never share noise, and each row is reproducible on its own.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedvote._meta import __version__
from fedvote.config import RunConfig
from fedvote.errors import ConfigError
from fedvote.methods import METHODS, check_method, option_names
from fedvote.privacy.accountant import bounded_epsilon
from fedvote.privacy.events import LEVELS
from fedvote.privacy.ledger import LedgerSession, PrivacyLedger
from fedvote.privacy.noise_seeds import run_noise_seed
from fedvote.privacy.run_ledger import (
    CHARGE_NOTE_PREFIX,
    charge_note,
    charge_note_of,
    check_budget,
    ledger_details,
    open_ledger,
)
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
    # A compare that stopped (interrupted, failed) after a charge: its rows so far, not complete;
    # why it stopped; the one line of what every charge it made cost (run_ledger.charge_note).
    complete: bool = True
    stopped_by: str | None = None
    charged: str | None = None
    charges: int | None = None  # how many releases the compare charged (its totals compose them all)
    methods: tuple[str, ...] = ()  # the methods asked for, in order (rows missing from a stopped one)


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
    on_stop: Callable[[Comparison], None] | None = None,
) -> Comparison:
    """Run ``methods`` on ``config``'s federation, each calibrated to ``epsilon`` at ``delta``.

    The federation is built once from ``config`` and shared; each method then runs
    through :func:`fedvote.runner.run` with its noise calibrated at its own level
    (``Method.calibration_level``; FedAvg, not private, runs as is) and, under a noise
    seed, its own noise stream (:func:`method_noise_seed`). Every row is charged to one
    ledger (``config.privacy.ledger``, else in memory); with a persisted ledger the sum
    of all rows' planned events is checked against its budget before the first row.
    Writes ``out_dir/compare.json`` when given.

    Interrupted or failed once the rows began, it keeps what was done and charged before
    the exception goes on: ``on_stop`` receives the rows so far (:func:`stopped_comparison`:
    not complete, totals of every charge), ``out_dir`` gets them (:func:`write_stopped`:
    an incomplete ``compare.json`` and ``charged.json``; best effort), and the exception's
    charge note covers every charge of the compare (:func:`note_compare_charge`).
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
        rows: list[ComparisonRow] = []
        try:
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
                charges=len(ledger.charges),
                methods=tuple(methods),
            )
        except BaseException as error:  # a row interrupted or failed: keep the rows done, say all it cost
            note_compare_charge(error, configs[0], ledger)
            stopped = stopped_comparison(rows, ledger, configs[0], error, methods)
            if stopped.rows or stopped.charges:
                if out_dir is not None:
                    try:
                        write_stopped(stopped, config, epsilon=epsilon, delta=delta, out_dir=out_dir)
                    except OSError:
                        pass  # the error's charge note still says what was charged
                if on_stop is not None:
                    on_stop(stopped)
            raise
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


def note_compare_charge(error: BaseException, config: RunConfig, ledger: PrivacyLedger) -> None:
    """Make ``error``'s charge note cover every charge of the compare's ``ledger`` (all its rows).

    The stopped row's run attached a note of its own charges only
    (:func:`~fedvote.privacy.run_ledger.note_charge`); it is removed from ``error`` and the
    exceptions it came from, and the compare's, at ``config``'s δ and accountant, attached.
    """
    seen: set[int] = set()
    inner: BaseException | None = error
    while inner is not None and id(inner) not in seen:
        seen.add(id(inner))
        notes = getattr(inner, "__notes__", None)
        if isinstance(notes, list):
            notes[:] = [n for n in notes if not (isinstance(n, str) and n.startswith(CHARGE_NOTE_PREFIX))]
        inner = inner.__cause__ or inner.__context__
    error.add_note(CHARGE_NOTE_PREFIX + charge_note(config, ledger))


def stopped_comparison(
    rows: Sequence[ComparisonRow],
    ledger: PrivacyLedger,
    config: RunConfig,
    error: BaseException,
    methods: Sequence[str],
) -> Comparison:
    """The :class:`Comparison` of a compare stopped by ``error``: the ``rows`` done, not complete.

    Its totals compose every charge of ``ledger`` (the rows done and the stopped row's
    releases), at ``config``'s δ and accountant; a figure that cannot be computed is None
    (``charged`` still says what was charged). Never raises.
    """
    privacy = config.privacy
    try:
        bounded = {level: bounded_epsilon(ledger.event(level), privacy.delta, privacy.accountant)
                   for level in LEVELS}  # fmt: skip
        totals = finite_or_none({level: value.epsilon for level, value in bounded.items()})
        accountants = {level: value.accountant for level, value in bounded.items()}
    except Exception:  # noqa: BLE001 - what was done must be kept whatever failed
        totals, accountants = dict.fromkeys(LEVELS), {}
    try:
        state = ledger_details(ledger).get("ledger")
    except Exception:  # noqa: BLE001
        state = None
    return Comparison(
        rows=list(rows),
        total_epsilon=totals,
        total_accountant=accountants,
        ledger=state if isinstance(state, dict) else None,
        complete=False,
        stopped_by=stopped_by(error),
        charged=charge_note_of(error) or charge_note(config, ledger),
        charges=len(ledger.charges),
        methods=tuple(methods),
    )


def stopped_by(error: BaseException) -> str:
    """Why a compare stopped, on one line: "interrupt", or the error's type and message."""
    if isinstance(error, KeyboardInterrupt):
        return "interrupt"
    return " ".join(f"{type(error).__name__}: {error}".split())


def method_noise_seed(noise_seed: int | None, method: str) -> int | None:
    """``method``'s own noise seed in a comparison under ``noise_seed`` (None: OS entropy)."""
    return None if noise_seed is None else run_noise_seed(noise_seed, method, 0)


def write_comparison(
    comparison: Comparison, config: RunConfig, *, epsilon: float, delta: float, out_dir: str | Path
) -> Path:
    """Write ``out_dir/compare.json``: the target, the config, the rows, the total ε of all rows.

    A stopped compare's (``complete`` false) also says why it stopped, what every charge
    cost (``charged``) and which methods have no row. A complete one removes the
    ``charged.json`` an earlier, stopped compare left in ``out_dir`` (its charges stay in
    the ledger), so that the directory never holds two outcomes.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "compare.json"
    payload: dict[str, Any] = {
        "complete": comparison.complete,
        "target_epsilon": epsilon,
        "delta": delta,
        "accountant": config.privacy.accountant,
        "config": config.to_dict(),
        "rows": [row.to_dict() for row in comparison.rows],
        "total_epsilon": comparison.total_epsilon,
        "total_accountant": comparison.total_accountant,
        "charges": comparison.charges,
        "ledger": comparison.ledger,
    }
    if not comparison.complete:
        done = {row.method for row in comparison.rows}
        payload["stopped_by"] = comparison.stopped_by
        payload["charged"] = comparison.charged
        payload["methods_without_row"] = [name for name in comparison.methods if name not in done]
    written = write_atomic(path, json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    if comparison.complete:
        (out / "charged.json").unlink(missing_ok=True)
    return written


def write_stopped(
    comparison: Comparison, config: RunConfig, *, epsilon: float, delta: float, out_dir: str | Path
) -> Path:
    """A stopped compare's files in ``out_dir``: ``compare.json`` (incomplete) and ``charged.json``.

    ``charged.json`` is ``fedvote run``'s record of a stopped command — what every charge
    cost (``charged``, ``total_epsilon``), why it stopped, ``result`` null — with the methods
    whose rows ``compare.json`` holds. Written only when something was charged. Returns the
    path of ``compare.json``.
    """
    path = write_comparison(comparison, config, epsilon=epsilon, delta=delta, out_dir=out_dir)
    if comparison.charges:
        payload = {
            "charged": comparison.charged,
            "stopped_by": comparison.stopped_by,
            "result": None,
            "charges": comparison.charges,
            "total_epsilon": comparison.total_epsilon,
            "total_accountant": comparison.total_accountant,
            "ledger": comparison.ledger,
            "rows_in_compare_json": [row.method for row in comparison.rows],
            "config": config.to_dict(),
            "version": __version__,
        }
        write_atomic(Path(out_dir) / "charged.json", json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
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
