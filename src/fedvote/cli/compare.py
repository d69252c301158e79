"""``fedvote compare``: several methods at the same ε on one federation, as one table."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from fedvote.cli.options import (
    MethodsHelp,
    federation_options,
    method_option_flags,
    refuse_empty_out,
    reject_flags_besides,
)
from fedvote.cli.run_options import run_flags
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig, load_run_config
from fedvote.errors import ConfigError
from fedvote.methods.registry import METHOD_NAMES, option_names
from fedvote.models.config import DEFAULT_EPOCHS, TrainingConfig
from fedvote.results import check_writable, fallback_message, write_or_fallback
from fedvote.settings.ledger_path import probe_ledger, with_absolute_ledger, with_checked_ledger

if TYPE_CHECKING:
    from fedvote.compare import Comparison


@click.command(cls=MethodsHelp)  # --methods M,… --help: their own options only
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="Compare on the federation and settings recorded in FILE (a run config or "
                   "result.json); only --methods, --epsilon, --delta, --ledger, --budget-epsilon, --out "
                   "and --json may join it. The recorded --ledger and budget are kept: every row is charged.")
@click.option("--methods", default="pate-fl,dp-fedavg,dp-fedsgd", show_default=True,
              help="Comma-separated methods to compare.")
@federation_options
# The run flags compare takes, declared once for run, sweep and compare (cli/run_options.py);
# what compare means otherwise by a flag is its change here.
@run_flags(
    "epsilon", "delta", "accountant", "queries", "epochs",
    epsilon={"default": 4.0, "show_default": True,
             "help": "Target ε every method is calibrated to (agent level, zero-out, where the method "
                     "can protect it; DP-FedSGD: instance level, replace-one record)."},
)  # fmt: skip
@method_option_flags  # every method's own options, as fedvote run takes them; each row gets its method's
@run_flags(
    "seed", "noise_seed", "ledger", "budget_epsilon",
    noise_seed={"help": "Seed the privacy noise and sampling for a reproducible simulation; each method "
                        "draws its own stream derived from it [default: OS entropy]."},
    ledger={"help": "SQLite privacy ledger every row is charged to before it releases anything "
                    "[default: the --config run's ledger, if any]."},
    budget_epsilon={"help": "The federation's agent-level ε budget in --ledger (stored on first use; a "
                            "stored budget binds, change it with `fedvote ledger set-budget`). A compare "
                            "whose rows together would exceed it is refused before the first row."},
)  # fmt: skip
@click.option("--out", type=click.Path(file_okay=False), default=None, callback=refuse_empty_out,
              help="Write DIR/compare.json.")
@click.option("--json", "as_json", is_flag=True, help="Print compare.json's rows instead of the table.")
@click.pass_context
def compare(
    context: click.Context,
    config_file: str | None,
    methods: str,
    federation: FederationConfig,
    epsilon: float,
    delta: float,
    accountant: str,
    queries: int | None,
    epochs: int,
    method_flags: dict[str, Any],
    seed: int,
    noise_seed: int | None,
    ledger: str | None,
    budget_epsilon: float | None,
    out: str | None,
    as_json: bool,
) -> None:
    """Calibrate each method to the same ε and run them on one federation and seed.

    Example: fedvote compare --methods pate-fl,dp-fedavg,dp-fedsgd --epsilon 4 --delta 1e-3
    """
    names = [m.strip() for m in methods.split(",") if m.strip()]
    unknown = [name for name in names if name not in METHOD_NAMES]
    if unknown or not names:
        raise ConfigError(
            "methods",
            f"unknown method(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(METHOD_NAMES)}",
        )
    if not epsilon > 0:
        raise ConfigError("epsilon", f"must be > 0, got {epsilon}")
    if config_file is not None:
        reject_flags_besides(
            context,
            {"config_file", "methods", "epsilon", "delta", "ledger", "budget_epsilon", "out", "as_json"},
        )
        loaded = with_ledger(load_run_config(config_file), ledger, budget_epsilon)
        config = with_checked_ledger(loaded, config_file, typed_ledger=ledger is not None, methods=names)
    else:
        # The methods' own options typed (the gradient settings --rounds, …, a voting method's),
        # each handed to the rows whose method takes it (fedvote.compare); one that no compared
        # method takes is refused by name.
        options = dict(method_flags)
        for name in options:
            if not any(name in option_names(method) for method in names):
                raise ConfigError(name, f"is not an option of method {' or '.join(map(repr, names))}")
        config = RunConfig(
            method=names[0] if names else "pate-fl",
            federation=federation,
            privacy=PrivacyConfig(
                epsilon=epsilon,
                delta=delta,
                accountant=accountant,
                noise_seed=noise_seed,
                ledger=ledger,
                budget_epsilon=budget_epsilon,
            ),
            teacher=TrainingConfig(model="auto", epochs=epochs),  # None: planned (teacher_training)
            student=TrainingConfig(
                model="auto", epochs=epochs if epochs is not None else DEFAULT_EPOCHS, precision="auto"
            ),
            options=options,
            queries=queries,
            seed=seed,
        )
        config = with_absolute_ledger(config)  # what compare.json records: the file charged
        probe_ledger(config.privacy.ledger)  # before anything is loaded
    if out is not None:
        check_writable(out)  # before any row is trained or charged
    # lazy: imports torch; the refusals above answer without it (and fedvote --help under 1 s)
    from fedvote.compare import format_table, run_comparison, write_comparison, write_stopped
    from fedvote.progress import RichProgress

    def keep_stopped(stopped: Comparison) -> None:
        """A compare stopped after a charge: its rows done and what every charge cost, kept on disk."""
        if out is None and not stopped.rows:
            return  # as fedvote run without --out: the charge line on stderr says it all
        _keep_stopped(stopped, config, epsilon=epsilon, delta=delta, out=out, write=write_stopped)

    comparison = run_comparison(
        config,
        names,
        epsilon=epsilon,
        delta=delta,
        # Off a terminal (a log, a batch job) each phase is a plain line with the time and an ETA.
        progress=RichProgress(log_lines=True, prefix="fedvote compare"),
        on_stop=keep_stopped,
    )

    def write(directory: Path) -> Path:
        return write_comparison(comparison, config, epsilon=epsilon, delta=delta, out_dir=directory)

    failed: str | None = None
    saved: Path | None = None
    if out is not None:  # never lose the charged rows: a fallback directory if out fails now
        try:
            saved, failure = write_or_fallback(write, out, config.privacy.ledger)
        except OSError as error:  # not even a fallback: the rows go to stdout
            failed = f"--out: cannot write to {out} ({error.strerror or error}) nor to a fallback directory"
            failed += "; the rows are printed on stdout"
            as_json = True
        else:
            if failure is None:
                click.echo(f"wrote {saved}", err=True)
            else:
                failed = fallback_message("--out", out, failure, saved)
    try:
        if as_json:
            click.echo(json.dumps([row.to_dict() for row in comparison.rows], indent=2))
        else:
            fed = config.federation
            target = f"target ε = {epsilon:g} at δ = {delta:g}"
            click.echo(f"fedvote compare on {fed.dataset}: {fed.agents} agents, {target}")
            click.echo(format_table(comparison.rows))
            totals = comparison.total_epsilon
            click.echo(total_line(totals, delta, comparison.ledger, comparison.total_accountant))
    except OSError as error:  # stdout full or closed: the charged rows are kept on disk, one line says where
        _silence_stdout()
        failed = _unprinted(error, saved, write, config.privacy.ledger)
    if failed is not None:
        click.echo(f"fedvote: error: {failed}", err=True)
        sys.exit(1)


def _keep_stopped(
    stopped: Comparison,
    config: RunConfig,
    *,
    epsilon: float,
    delta: float,
    out: str | None,
    write: Callable[..., Path],
) -> None:
    """Write a stopped compare's ``compare.json`` (incomplete) and ``charged.json``; say where on stderr.

    Into ``--out``, else (or when that fails) a new ``fedvote-result-*`` directory beside the
    ledger or in the temporary directory. Never raises: the compare's own error comes next,
    with the line of what it charged.
    """

    def files(directory: Path) -> Path:
        return write(stopped, config, epsilon=epsilon, delta=delta, out_dir=directory)

    ledger = config.privacy.ledger
    try:
        path, _ = write_or_fallback(files, out or _fresh_directory(ledger), ledger)
    except Exception:  # noqa: BLE001 - the charge line on stderr still says what was charged
        return
    done = ", ".join(row.method for row in stopped.rows) or "none"
    also = f" and {path.parent / 'charged.json'} (what every row charged)" if stopped.charges else ""
    click.echo(f"fedvote: wrote {path} (incomplete; rows done before it stopped: {done}){also}", err=True)


def _unprinted(error: OSError, saved: Path | None, write: Callable[[Path], Path], ledger: str | None) -> str:
    """The error line of a comparison that could not be printed: where it is kept (saved now if need be)."""
    reason = error.strerror or error
    if saved is None:
        try:
            saved, _ = write_or_fallback(write, _fresh_directory(ledger), ledger)
        except OSError as failure:
            return (
                f"cannot print the comparison on stdout ({reason}) nor save it "
                f"({failure.strerror or failure}); its charges are in the ledger"
            )
    return f"cannot print the comparison on stdout ({reason}); it is saved in {saved}"


def _fresh_directory(near: str | None) -> Path:
    """A new ``fedvote-result-*`` directory beside ``near`` (the ledger) or in the temporary directory."""
    places = [Path(near).resolve().parent] if near is not None else []
    places.append(Path(tempfile.gettempdir()))
    failure: OSError | None = None
    for place in places:
        try:
            return Path(tempfile.mkdtemp(prefix="fedvote-result-", dir=place))
        except OSError as error:
            failure = error
    raise failure or OSError("no directory to write in")


def _silence_stdout() -> None:
    """Point a stdout that failed at the null device, so that nothing fails again at exit."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, sys.stdout.fileno())
        finally:
            os.close(null)
    except (AttributeError, OSError, ValueError):  # no descriptor (a test's captured stdout)
        pass


def with_ledger(config: RunConfig, ledger: str | None, budget_epsilon: float | None) -> RunConfig:
    """``config`` with ``--ledger``/``--budget-epsilon`` applied where given (else its own kept)."""
    changes: dict[str, Any] = {}
    if ledger is not None:
        changes["ledger"] = ledger
    if budget_epsilon is not None:
        changes["budget_epsilon"] = budget_epsilon
    if not changes:
        return config
    return dataclasses.replace(config, privacy=dataclasses.replace(config.privacy, **changes))


def total_line(
    total: dict[str, float | None],
    delta: float,
    ledger: dict[str, Any] | None,
    accountants: dict[str, str] | None = None,
) -> str:
    """The line stating the ε spent by all rows together (and the federation's, under a ledger).

    ``accountants`` names the accountant of each level's total (``Comparison.total_accountant``:
    RDP's upper bound, or none, where its PLD could not be built), shown beside the figure.
    """

    def show(value: float | None, level: str | None = None) -> str:
        shown = "unbounded" if value is None else f"{value:.4f}"
        return shown + (f" [{accountants[level]}]" if level and accountants and level in accountants else "")

    line = (
        f"total ε spent by all rows: agent-level {show(total['agent'], 'agent')}, "
        f"instance-level {show(total['instance'], 'instance')} at δ = {delta:g}"
    )
    if ledger:
        line += (
            f"; federation {ledger['federation']} has spent agent-level ε = "
            f"{show(ledger['spent_agent_epsilon'])}, instance-level {show(ledger['spent_instance_epsilon'])}"
        )
    return line
