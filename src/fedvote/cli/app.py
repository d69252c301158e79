"""The ``fedvote`` command line.

Errors from bad input are one line on stderr (``fedvote: error: ...``) with exit
status 2; nothing is written when a run fails.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from fedvote._meta import __version__
from fedvote.cli.account import account
from fedvote.cli.audit import audit
from fedvote.cli.compare import compare
from fedvote.cli.data import data
from fedvote.cli.deploy import deploy
from fedvote.cli.label import label
from fedvote.cli.ledger import ledger
from fedvote.cli.options import DATA_ENV, MethodHelp, flag_for, refuse_empty_out, reject_flags_besides
from fedvote.cli.report import plot, report
from fedvote.cli.run_options import run_config_options
from fedvote.cli.sweep import sweep
from fedvote.config import RunConfig, load_run_config
from fedvote.data.federation import dataset_names
from fedvote.errors import ConfigError, VoteRejected
from fedvote.methods.registry import check_options
from fedvote.models.threads import apply_host_policy, set_threads
from fedvote.results import (
    DIAGNOSTIC_NOTE,
    LevelPrivacy,
    PrivacyStatement,
    RunResult,
    agent_group_lines,
    check_writable,
    fallback_message,
    write_atomic,
    write_or_fallback,
    write_result,
)
from fedvote.settings.ledger_path import with_checked_ledger

# `--threads` beyond this is a typo (torch's pool would try to start them all).
MAX_THREADS = 1024


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fedvote")
def cli() -> None:
    """Differentially private federated learning by noisy voting."""


@cli.command(cls=MethodHelp)  # --method M --help: M's own options only
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="Rerun the config recorded in FILE (a result.json, or its 'config' object); "
                   "only --out and --json may be given with it.")
@run_config_options()
@click.option("--out", type=click.Path(file_okay=False), default=None, callback=refuse_empty_out,
              help="Write DIR/result.json.")
@click.option("--json", "as_json", is_flag=True, help="Print result.json on stdout instead of the summary.")
@click.option("--report", "with_report", is_flag=True,
              help="Also write DIR/report.html (plots, ε per level) at the end; needs --out.")
@click.option("--threads", type=int, default=None,
              help="Torch threads, whatever the load [default: torch's own; on a busy host only the CPUs "
                   "other processes leave idle, at least 1; OMP_NUM_THREADS if set].")
@click.pass_context
def run(
    context: click.Context,
    config_file: str | None,
    configs: list[RunConfig],
    out: str | None,
    as_json: bool,
    with_report: bool,
    threads: int | None,
) -> None:
    """Run a federated method and report accuracy and (ε, δ) at agent and instance level.

    Example: fedvote run --agents 50 --epsilon 4 --delta 1e-3
    """
    if with_report and out is None:
        raise ConfigError("report", "needs --out DIR, where result.json and report.html are written")
    if threads is not None and not 1 <= threads <= MAX_THREADS:
        raise ConfigError("threads", f"must be an integer from 1 to {MAX_THREADS}, got {threads}")
    if config_file is not None:
        config = _config_from_file(
            context, config_file, frozenset({"out", "as_json", "with_report", "threads"})
        )
    else:
        (config,) = configs
    if out is not None:  # an empty --out is refused as the flags are parsed (refuse_empty_out)
        check_writable(out)  # before anything is trained or charged
    # What the runner refuses first (the method's options, the datasets' names), refused
    # before the runner and torch are imported, so that a misspelt flag answers at once.
    check_options(config)
    dataset_names(config.federation.dataset, config.federation.target, config.federation.data_dir)
    from fedvote.progress import RichProgress
    from fedvote.runner import run as run_config  # lazy: imports torch; keeps fedvote --help under 1 s

    if threads is not None:
        set_threads(threads)
    try:
        # Off a terminal (a log, a batch job) each phase is a plain line with the time and an ETA.
        result = run_config(config, progress=RichProgress(log_lines=True, prefix="fedvote run"))
    except BaseException as error:  # failed or interrupted: a charge is written down, never only lost
        if out is not None:
            _save_charge(error, config, out)
        raise
    failed: str | None = None
    saved: Path | None = None
    if out is not None:
        failed, saved = _save_run(result, out, config.privacy.ledger, with_report)
        as_json = as_json or saved is None  # nowhere to write it: the result goes to stdout
    try:
        _print(result.to_json() if as_json else summary(result))
    except OSError as error:  # stdout full or closed: the result is saved, never lost
        failed = _unprinted(result, error, saved, failed, config.privacy.ledger)
    if failed is not None:
        click.echo(f"fedvote: error: {failed}", err=True)
        sys.exit(1)


def _save_run(
    result: RunResult, out: str, ledger: str | None, with_report: bool
) -> tuple[str | None, Path | None]:
    """Write ``out/result.json`` (and report.html); the one-line error if any, and where it was saved.

    A result that cannot be written to ``out`` after all (a full disk) is written beside
    the ledger or in the temporary directory (:func:`~fedvote.results.write_or_fallback`)
    and the error says where; if even that fails it is unsaved (None) and goes to stdout: a
    charged result is never lost. An earlier run's files in ``out`` go (:func:`_write_outcome`).
    """

    def write(directory: Path) -> Path:
        return _write_outcome(directory, lambda into: write_result(result, into), stopped=False)[0]

    try:
        path, failure = write_or_fallback(write, out, ledger)
    except OSError as error:
        reason = error.strerror or error
        return f"--out: cannot write to {out} ({reason}) nor to a fallback directory; it is on stdout", None
    if failure is not None:
        return fallback_message("--out", out, failure, path), path
    click.echo(f"wrote {path}", err=True)
    if with_report:
        from fedvote.report import write_report

        try:
            click.echo(f"wrote {write_report(out)}", err=True)
        except OSError as error:
            reason = error.strerror or error
            return f"--report: cannot write report.html in {out} ({reason}); {path} was written", path
    return None, path


def _print(text: str) -> None:
    """``text`` on stdout; an OSError when stdout cannot take it (full, a closed pipe, closed)."""
    if sys.stdout is None:  # started with stdout closed: click.echo would drop the text silently
        raise OSError(errno.EBADF, "standard output is closed")
    click.echo(text)


def _unprinted(
    result: RunResult, error: OSError, saved: Path | None, failed: str | None, ledger: str | None
) -> str:
    """The one-line error for a result stdout could not take, saved first where it was not yet.

    A result the run wrote to --out is there; otherwise it is written to a new
    ``fedvote-result-*`` directory beside the ledger, else in the temporary directory, as
    a result --out could not take is. Stdout is pointed at /dev/null, so that Python's own
    flush at exit adds no second error.
    """
    _silence_stdout()
    reason = f"{error.strerror or error}"
    if saved is not None:
        if failed is not None:  # --out fell back: that line says where it is
            return f"{failed}; printing it on stdout failed too ({reason})"
        return f"cannot print the result on stdout ({reason}); it was saved to {saved}"
    path = _save_aside(result, ledger)
    if path is not None:
        return f"cannot print the result on stdout ({reason}); it was saved to {path}" + (
            f" ({failed.split('; ', 1)[0]})" if failed is not None else ""
        )
    where = f"recorded in the ledger {ledger}" if ledger is not None else "in memory only (no --ledger)"
    return (
        f"cannot print the result on stdout ({reason}) nor write it to any directory: it is lost; "
        f"its releases were charged ({where})"
    )


def _save_aside(result: RunResult, ledger: str | None) -> Path | None:
    """``result`` written in a new ``fedvote-result-*`` directory beside ``ledger``, else in /tmp.

    None when no directory took it.
    """
    places = [Path(ledger).parent] if ledger is not None else []
    for place in [*places, Path(tempfile.gettempdir())]:
        try:
            directory = Path(tempfile.mkdtemp(prefix="fedvote-result-", dir=place))
        except OSError:
            continue
        try:
            return write_result(result, directory)
        except OSError:
            shutil.rmtree(directory, ignore_errors=True)
    return None


def _silence_stdout() -> None:
    """Point stdout's file descriptor at /dev/null (what is still buffered goes nowhere, quietly)."""
    try:
        descriptor = sys.stdout.fileno() if sys.stdout is not None else None
    except (OSError, ValueError):  # not a file (a test's capture)
        return
    if descriptor is None:
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, descriptor)
        finally:
            os.close(null)
    except OSError:
        pass


# What a run leaves in --out DIR: its result (result.json with its companions) or, for a run
# that stopped after a charge, charged.json; DIR holds one run's files at a time (_write_outcome).
RESULT_FILES = ("result.json", "analysis.npz", "report.html")
CHARGE_FILE = "charged.json"
EARLIER_RUN_PREFIX = "earlier-run-"


def _write_outcome(
    directory: Path, write: Callable[[Path], Path], *, stopped: bool
) -> tuple[Path, Path | None]:
    """``write(directory)``, this run's outcome, so that ``directory`` never presents two runs as one.

    An earlier run's outcome files there (:data:`RESULT_FILES`, :data:`CHARGE_FILE`) are first
    moved (renamed) into a new directory ``directory/earlier-run-*``, then the outcome is
    written. If writing fails, what it wrote is removed and the earlier files are moved back
    (the caller then falls back to another directory). Once it is written the moved files
    are removed: a new result replaces the earlier one, as it always has. A run that
    ``stopped`` (charged.json, no result) replaces no result: an earlier result.json moved
    aside stays, with its companions, in that ``earlier-run-*`` directory, returned beside
    the path written (None when nothing was kept).
    """
    names = (*RESULT_FILES, CHARGE_FILE)
    earlier = [name for name in names if os.path.lexists(directory / name)]
    if not earlier:
        return write(directory), None
    aside = Path(tempfile.mkdtemp(prefix=EARLIER_RUN_PREFIX, dir=directory))
    moved: list[str] = []
    try:
        for name in earlier:
            os.replace(directory / name, aside / name)
            moved.append(name)
        written = write(directory)
    except BaseException:
        for name in names:
            with contextlib.suppress(OSError):
                if name in moved:  # the earlier file back in its place (over a part of this outcome)
                    os.replace(aside / name, directory / name)
                elif name not in earlier:  # a part of this outcome, written before the failure
                    (directory / name).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            aside.rmdir()  # empty, unless a file could not go back: then it stays there
        raise
    if stopped and "result.json" in moved:
        return written, aside
    shutil.rmtree(aside, ignore_errors=True)
    return written, None


def _save_charge(error: BaseException, config: RunConfig, out: str) -> None:
    """Write ``out/charged.json`` for a run that stopped after a charge: what it cost, why it stopped.

    No result exists to write; this records what was released and charged (ε at both
    levels, the ledger and federation) beside the run's config, in ``out`` or, if that
    fails, in a fallback directory (:func:`~fedvote.results.write_or_fallback`). Nothing is
    written when nothing was charged. Never raises: the run's own error comes next.
    """
    charged = _charge_note(error)
    if charged is None:
        return
    payload = {
        "charged": charged,
        "stopped_by": "interrupt" if isinstance(error, KeyboardInterrupt) else _failure(error),
        "result": None,
        "config": config.to_dict(),
        "version": __version__,
    }
    text = json.dumps(payload, indent=2, ensure_ascii=False) + "\n"

    kept: list[Path] = []

    def write(directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path, earlier = _write_outcome(
            directory, lambda into: write_atomic(into / CHARGE_FILE, text), stopped=True
        )
        kept.extend([earlier] if earlier is not None else [])
        return path

    try:
        path, _ = write_or_fallback(write, out, config.privacy.ledger)
    except OSError:
        return  # the charge line on stderr still says it all
    moved = f"; the earlier run's result there was moved to {kept[0]}" if kept else ""
    click.echo(f"fedvote: wrote {path} (what the stopped run charged; no result){moved}", err=True)


def _config_from_file(context: click.Context, path: str, allowed: frozenset[str]) -> RunConfig:
    """The RunConfig stored in ``path``; refuses other flags given alongside.

    Its ledger path is made absolute against the working directory (what result.json then
    records) and probed before anything is loaded. A *recorded* config
    (:func:`~fedvote.config.is_recorded`: a result.json's) whose ledger does not exist is
    refused: rerunning it would charge a new, empty ledger and split the federation's spend
    (a result.json written before paths were recorded absolute holds the path as typed).
    """
    reject_flags_besides(context, allowed | {"config_file"})
    return with_checked_ledger(load_run_config(path, one_run=True), path)


def diagnostic_lines(diagnostics: dict[str, Any]) -> list[str]:
    """The scalar diagnostics of a run, under a heading that says what they are."""
    scalars = [
        (name.replace("_", " "), value)
        for name, value in diagnostics.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    ]
    scalars += [
        (f"{name.replace('_', ' ')} ({part})", value)
        for name, entry in diagnostics.items()
        if isinstance(entry, dict)
        for part, value in entry.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    ]
    if not scalars:
        return []
    lines = [f"  {DIAGNOSTIC_NOTE}:"]
    lines += [f"    {name:<34} {value:.4g}" for name, value in scalars]
    return lines


def statement_lines(statements: tuple[PrivacyStatement, ...]) -> list[str]:
    """A method's privacy statements beside the headlines, each saying what it is and where it comes from."""
    lines = []
    for statement in statements:
        figure = "unbounded" if statement.epsilon is None else f"ε = {statement.epsilon:.4f}"
        if statement.mu is not None:
            figure = f"μ = {statement.mu:.3f} ({figure})"
        kind = "headline, " if statement.headline else ""
        lines.append(f"  {statement.name} [{statement.level} level, {kind}{statement.kind}]: {figure}")
        lines.append(f"      {statement.source}")
    return lines


def summary(result: RunResult) -> str:
    """A readable few lines: accuracy, ε per level, queries, communication, time."""
    privacy = result.privacy
    checked = result.details.get("queries_checked")  # label release: pass bits vs labels
    counted = (
        f"{checked} queries checked, {result.details.get('queries_answered', result.queries)} answered, "
        if checked is not None
        else (f"{result.queries} queries, " if result.queries else "")
    )
    target = (result.config.get("federation") or {}).get("target")
    data = f"{result.dataset} → {target}" if target else result.dataset  # domain shift: sources → target
    header = f"fedvote {result.method} on {data}: {result.agents} agents, "
    header += f"{counted}σ = {result.sigma:.4g}"
    lines = [
        header,
        f"  {'student accuracy' if result.queries else 'test accuracy':<22}"
        f"{result.accuracy:.3f}   (test set)",
    ]
    if result.label_accuracy is not None:
        lines.append(f"  pseudo-label accuracy {result.label_accuracy:.3f}")
    if privacy.private:
        for level in ("agent", "instance"):
            entry = getattr(privacy, level)
            label = f"ε ({level}-level)"
            accountant = entry.accountant or privacy.accountant
            if entry.accountant_fallback is not None:  # the PLD could not be built at this level
                accountant += " upper bound (no pld: too little noise at this level)"
            if entry.epsilon is None:
                unbounded = "not private at this level"
                if entry.accountant == "none":  # nothing bounded it: ∞, not "no noise"
                    unbounded = "no finite bound computed"
                lines.append(f"  {label:<22}{unbounded} (unbounded)")
                continue
            lines.append(
                f"  {label:<22}{entry.epsilon:.4f} at δ = {privacy.delta:g} "
                f"[{accountant}, sensitivity {entry.sensitivity:.4g}]"
            )
            declined = (result.details.get("confident_gnmax") or {}).get("data_dependent_release") is False
            lines.extend(data_dependent_lines(entry, result.details.get("release") == "labels", declined))
    else:
        lines.append("  NOT PRIVATE: no noise protects the releases; ε is unbounded (reported as null)")
    lines.extend(statement_lines(privacy.statements))
    lines.extend(agent_group_lines(privacy.agent_groups))  # --agent-budgets (issue 45)
    lines.extend(diagnostic_lines(result.diagnostics))
    comm = result.communication
    lines.append(
        f"  communication         {comm['upload_floats']} floats up, "
        f"{comm['download_floats']} down, {comm['rounds']} round(s)"
    )
    ledger = result.details.get("ledger")
    if ledger:
        budget, spent = ledger["budget_epsilon"], ledger["spent_agent_epsilon"]
        shown = "unbounded (a non-private release)" if spent is None else f"{spent:.4f}"
        lines.append(
            f"  ledger                federation {ledger['federation']} has spent agent-level "
            f"ε = {shown}" + (f" of {budget:g}" if budget else "")
        )
    lines.append(f"  time                  {result.timings['total_s']:.1f} s")
    return "\n".join(lines)


def data_dependent_lines(entry: LevelPrivacy, labels: bool, declined: bool = False) -> list[str]:
    """A level's published data-dependent ε (its smooth-sensitivity release), labelled; else why none.

    Only a label-release run says why it has none (``declined``: the user chose
    ``--no-data-dependent-release``); the clean figure is never printed here (it is a
    simulation diagnostic).
    """
    if labels and declined:
        return [
            f"  {'':<22}data-dependent ε not released (--no-data-dependent-release): no smooth-sensitivity "
            "release was planned or charged; the clean figure is not private"
        ]
    if entry.data_dependent_epsilon_released is not None:
        return [
            f"  {'':<22}data-dependent ε {entry.data_dependent_epsilon_released:.4f}, released by smooth "
            "sensitivity (PATE'18 §4; its release is charged in the ε above)"
        ]
    if labels and entry.data_dependent_label is not None:
        return [f"  {'':<22}data-dependent ε {entry.data_dependent_label}"]
    return []


# The other command groups live in their own modules.
cli.add_command(account)
cli.add_command(audit)
cli.add_command(data)
cli.add_command(compare)
cli.add_command(report)
cli.add_command(plot)
cli.add_command(sweep)
cli.add_command(label)
cli.add_command(ledger)
cli.add_command(deploy)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning bad input into a one-line error and exit status 2.

    Before any command imports torch, OpenMP is told to wait passively and torch to take
    only the CPUs other processes leave idle (:func:`~fedvote.models.threads.apply_host_policy`;
    variables the user set win).
    """
    if "torch" not in sys.modules:  # after torch has loaded OpenMP, the variables change nothing
        apply_host_policy()
    try:
        cli.main(args=argv, prog_name="fedvote", standalone_mode=False)
    except click.exceptions.Abort as error:
        charged = _charge_note(error)  # Ctrl-C after releases: what they cost, and where it is recorded
        click.echo("fedvote: aborted" + (f"; {charged}" if charged else ""), err=True)
        sys.exit(130)
    except click.UsageError as error:
        click.echo(f"fedvote: error: {_one_line(error.format_message())}", err=True)
        sys.exit(2)
    except click.ClickException as error:
        click.echo(f"fedvote: error: {_one_line(error.format_message())}", err=True)
        sys.exit(error.exit_code)
    except ConfigError as error:
        detail = _escape_line_breaks(error.detail)
        _echo_charge(error)
        click.echo(f"fedvote: error: {_named(error.argument, argv)}: {detail}", err=True)
        sys.exit(2)
    except VoteRejected as error:  # a malformed vote at an agent's boundary; never summed
        _echo_charge(error)
        click.echo(f"fedvote: error: {_one_line(str(error))}", err=True)
        sys.exit(2)
    except Exception as error:
        charged = _charge_note(error)
        if charged is None:
            raise  # nothing released: a bug's traceback, as it was
        # Releases were charged, then the run failed: one line says both.
        line = f"fedvote: error: the run failed after releases were charged: {_failure(error)}; {charged}"
        click.echo(line, err=True)
        sys.exit(1)


def _named(argument: str, argv: list[str] | None) -> str:
    """How a refusal names ``argument``: its flag, or ``FEDVOTE_DATA`` for a data directory not typed.

    ``--data-dir`` defaults to ``$FEDVOTE_DATA``; a refusal of the directory (a dataset's files
    missing from it) then names the variable the user set, not a flag they did not type.
    """
    typed = sys.argv[1:] if argv is None else [str(arg) for arg in argv]
    if argument == "data_dir" and os.environ.get(DATA_ENV) and not any(
        arg == "--data-dir" or arg.startswith("--data-dir=") for arg in typed
    ):
        return DATA_ENV
    return flag_for(argument)


def _charge_note(error: BaseException) -> str | None:
    """What a run that stopped with ``error`` had charged (None when it charged nothing or was no run)."""
    run_ledger = sys.modules.get("fedvote.privacy.run_ledger")  # only a run that opened a ledger charged
    if run_ledger is None:
        return None
    note: str | None = run_ledger.charge_note_of(error)
    if note is None or note.startswith("nothing was charged"):
        return None
    return _escape_line_breaks(note)


def _echo_charge(error: BaseException) -> None:
    """The charge line above a refusal that came after some releases (a budget hit mid-run).

    Printed before the error line, so that the error stays the last line of stderr.
    """
    charged = _charge_note(error)
    if charged is not None:
        click.echo(f"fedvote: {charged}", err=True)


def _failure(error: BaseException) -> str:
    """``error`` on one line: its type, message and the innermost place it was raised."""
    place = ""
    trace = error.__traceback__
    while trace is not None and trace.tb_next is not None:
        trace = trace.tb_next
    if trace is not None:
        code = trace.tb_frame.f_code
        place = f" ({code.co_filename.rsplit('/', 1)[-1]}:{trace.tb_lineno}, in {code.co_name})"
    return _escape_line_breaks(_one_line(f"{type(error).__name__}: {error}")) + place


def _one_line(message: str) -> str:
    return " ".join(message.split())


# What str.splitlines() breaks at: a value quoted in an error (a path, a name) may hold one.
_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def _escape_line_breaks(message: str) -> str:
    r"""``message`` on one line: each line break escaped as Python writes it ("a\rb" stays readable)."""
    return message.translate(_LINE_BREAKS)


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
