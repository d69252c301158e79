"""``fedvote sweep``: one or more methods over a grid of ε, σ, Q or δ, reusing teachers and votes."""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING, Any

import click

from fedvote.cli.options import MethodHelp, refuse_empty_out
from fedvote.cli.run_options import run_config_options
from fedvote.config import RunConfig
from fedvote.errors import ConfigError
from fedvote.results import check_writable

if TYPE_CHECKING:
    from fedvote.sweep import SweepStore


@click.command(cls=MethodHelp)  # --method M[,M…] --help: their own options only
@run_config_options(several_methods=True)
@click.option("--grid", "grid_text", required=True,
              help="Grid axes (epsilon, sigma, queries, delta), ';'-separated, values ','-separated; "
                   "the sweep runs their product. E.g. 'epsilon=1,2,4,8' or 'sigma=10,20;queries=100,300'.")
@click.option("--seeds", default=None,
              help="Comma-separated seeds; each gets its own federation and teachers [default: --seed].")
@click.option("--out", type=click.Path(file_okay=False), required=True, callback=refuse_empty_out,
              help="Write DIR/sweep.json and DIR/sweep.csv, and each point's row to DIR/points/ "
                   "as it completes.")
@click.option("--resume", is_flag=True,
              help="Continue the interrupted sweep in --out DIR: its completed points are kept, neither "
                   "rerun nor charged again. Refused unless methods, settings, grid and seeds are its own.")
@click.option("--overwrite", is_flag=True,
              help="Start afresh in a --out DIR that is not empty, replacing the sweep there (its ledger "
                   "charges stay). Without it (or --resume) such a DIR is refused.")
@click.option("--json", "as_json", is_flag=True, help="Print sweep.json on stdout instead of the table.")
def sweep(
    configs: list[RunConfig],
    grid_text: str,
    seeds: str | None,
    out: str,
    resume: bool,
    overwrite: bool,
    as_json: bool,
) -> None:
    """Run methods over a grid; teachers and clean votes are computed once per seed.

    Every point is a release: under --ledger each is charged to it, and a sweep whose
    points together would exceed the stored budget is refused before the first.

    Each point's row is kept in DIR/points/ as soon as it is done; after a Ctrl-C (or any
    failure) DIR/sweep.json holds the rows so far, and the same command with --resume runs
    only the remaining points. A DIR that is not empty is refused unless --resume or
    --overwrite, and one sweep at a time writes DIR (it holds DIR/.lock). Progress (points
    done of all, time left) goes to stderr, as plain lines when stderr is not a terminal.

    Example: fedvote sweep --method pate-fl,dp-fedavg --grid "epsilon=1,2,4,8" --out sweep/
    """
    import json

    from fedvote.progress import RichProgress
    from fedvote.sweep import PointDone, SweepStore, parse_grid, run_sweep, write_sweep

    grid = parse_grid(grid_text)
    seed_list = _parse_seeds(seeds)
    if any(config.privacy.secure_sum for config in configs):
        raise ConfigError(
            "secure_sum",
            "a sweep simulates the vote sums in process; secure aggregation changes none of its figures",
        )
    command = "fedvote " + " ".join(shlex.quote(arg) for arg in sys.argv[1:])
    check_writable(out)  # before anything is read, trained or charged
    progress = RichProgress()

    def report(point: PointDone) -> None:
        if not progress.on_terminal:  # a terminal shows the points' bars, counted, with the ETA
            click.echo(f"fedvote sweep: {point.line()}", err=True)

    # the lock on DIR is held until the sweep's files are written
    with SweepStore.open(
        out, configs, grid, seed_list, resume=resume, command=command, overwrite=overwrite
    ) as store:
        try:
            result = run_sweep(
                configs, grid, seeds=seed_list, progress=progress, store=store, on_point=report
            )
        except KeyboardInterrupt:
            _say_how_to_resume(store, out)
            raise
        json_path, csv_path = write_sweep(result, out, command=command)
    click.echo(f"wrote {json_path} and {csv_path}", err=True)
    if as_json:
        click.echo(json.dumps(result.to_dict(command), indent=2))
        return
    axes = list(grid)
    header = f"{'method':<16}" + "".join(f"{axis:>10}" for axis in axes)
    header += f"{'seed':>6}{'σ':>10}{'Q':>7}{'accuracy':>10}{'ε agent':>10}{'ε inst.':>10}{'time s':>8}"
    click.echo(header)
    for row in result.rows:
        line = f"{row.method:<16}" + "".join(_axis_cell(row.point, axis) for axis in axes)
        line += f"{row.seed:>6}{row.sigma:>10.4g}{row.queries:>7}{row.accuracy:>10.3f}"
        line += f"{_number(row.epsilon_agent):>10}{_number(row.epsilon_instance):>10}{row.time_s:>8.1f}"
        click.echo(line)
    if any(row.reference for row in result.rows):
        click.echo("reference: a non-private method, run once per seed; ε, σ and δ do not apply to it")
    click.echo(f"total {result.timings['total_s']:.1f} s; reused work: {result.reuse}")
    click.echo(_total_line(result.total_epsilon, configs[0].privacy.delta, result.total_accountant))
    for state in result.ledgers:
        click.echo(_ledger_line(state))


def _ledger_line(state: dict[str, Any]) -> str:
    """A ledger's line after the sweep: the charges of this sweep (those the totals compose), its spend."""
    before = state.get("charges_before_resume") or 0
    resumed = f" ({before} of them before --resume)" if before else ""
    return (
        f"ledger {state['path']}: federation {state['federation']} charged {state['charges']} time(s) "
        f"by this sweep{resumed}, has spent agent-level ε = {_number(state['spent_agent_epsilon'])}, "
        f"instance-level {_number(state['spent_instance_epsilon'])}"
    )


def _say_how_to_resume(store: SweepStore, out: str) -> None:
    """After a Ctrl-C: what the sweep kept in ``out``, and that ``--resume`` goes on from there."""
    if store.done:
        click.echo(
            f"fedvote sweep: interrupted with {store.done} of {store.total} points done; their rows are "
            f"in {store.points_dir} and {out}/sweep.json; the same command with --resume runs the rest",
            err=True,
        )
    elif store.journal.charged:
        click.echo(
            f"fedvote sweep: interrupted after a charge, before any point was done; the charge is kept "
            f"in {store.journal.path}; the same command with --resume runs the sweep and counts it",
            err=True,
        )


def _axis_cell(point: dict[str, float | int], axis: str) -> str:
    """A grid axis's value in the table; "reference" where it does not apply (a non-private method)."""
    return f"{point[axis]:>10g}" if axis in point else f"{'reference':>10}"


def _parse_seeds(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as error:
        raise ConfigError("seeds", f"expected comma-separated integers, got {text!r}") from error
    if not seeds:
        raise ConfigError("seeds", "give at least one seed")
    return seeds


def _total_line(
    total: dict[str, float | None], delta: float, accountants: dict[str, str] | None = None
) -> str:
    """The ε spent by all points together, per level, each with its accountant (RDP where no PLD fit)."""

    def shown(level: str) -> str:
        name = (accountants or {}).get(level)
        return _number(total.get(level)) + (f" [{name}]" if name else "")

    return (
        f"total ε spent by all points: agent-level {shown('agent')}, "
        f"instance-level {shown('instance')} at δ = {delta:g}"
    )


def _number(value: float | None) -> str:
    return "unbounded" if value is None else f"{value:.3f}"
