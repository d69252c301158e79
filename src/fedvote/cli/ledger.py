"""``fedvote ledger``: read, audit and budget a privacy ledger.

* ``show PATH [--charges] [--json]`` — per federation: the budget per level, ε spent at
  each level, its record count and the federations it shares records with, and one line
  per run (its charges, its ε, the method or command that made it); ``--charges`` lists
  every charge (JSON: a list of objects with ``federation``, ``records``, ``overlaps``,
  ``budget``, ``runs``, ``charges``, ``spent`` {``agent``, ``instance``}).
* ``verify PATH`` — SQLite's integrity check, then every spend recomputed from the
  stored events and checked, record by record, against the budgets in force when the
  charges were made; exit status 1 on a violation, 2 (saying what still reads) when the
  file is damaged.
* ``set-budget PATH --federation F --epsilon E`` — the one way to change a stored
  budget: an appended, timestamped budget row (the ledger's triggers forbid updates).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from fedvote.errors import ConfigError
from fedvote.privacy.config import ACCOUNTANTS, LEVELS

_PATH = click.argument("path", type=click.Path(dir_okay=False))
# How the commands' help shows the positional path (click's own refusals name it so).
_PATH_HINT = "'PATH'"
# The advice the ledger store gives about --ledger, and what these commands, which only read
# (or budget) an existing ledger, advise instead.
_RUN_ADVICE = "give a new file name or an existing fedvote ledger"
_PATH_ADVICE = "give the path of a fedvote ledger"


@contextmanager
def _naming_path() -> Iterator[None]:
    """Refusals of the ledger file, which the store names ``ledger`` (``--ledger``), name PATH.

    ``fedvote ledger show/verify/set-budget`` take the file as their positional PATH and have
    no ``--ledger``; the refusal stays one line, exit status 2.
    """
    try:
        yield
    except ConfigError as error:
        if error.argument != "ledger":
            raise
        detail = error.detail.replace(_RUN_ADVICE, _PATH_ADVICE)
        raise click.BadParameter(detail, param_hint=_PATH_HINT) from error


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def ledger() -> None:
    """Show, verify and budget a privacy ledger (the --ledger FILE of run, compare, sweep, label)."""


@ledger.command()
@_PATH
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per federation.")
@click.option("--charges", "every_charge", is_flag=True, help="List every charge, not one line per run.")
def show(path: str, as_json: bool, every_charge: bool) -> None:
    """Per federation: the budget, ε spent at each level, the federations sharing its records, its runs."""
    from fedvote.privacy.ledger_audit import ledger_report

    with _naming_path():
        report = ledger_report(path)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    if not report:
        click.echo(f"{path}: no federation charged or budgeted")
    for entry in report:
        click.echo("\n".join(_show_lines(entry, every_charge)))


def _show_lines(entry: dict[str, Any], every_charge: bool = False) -> list[str]:
    """A federation's lines: records and overlaps, budgets, spend per level, its runs (or charges)."""
    from fedvote.privacy.ledger_audit import started_text

    records = entry["records"]
    held = "records unknown: stored before record hashes" if records is None else f"{records} records"
    lines = [f"federation {entry['federation']}  ({held})"]
    lines += [
        f"  shares {o['shared_records']} records with federation {o['federation']}" for o in entry["overlaps"]
    ]
    for level in LEVELS:
        budget, spent = entry["budget"][level], entry["spent_at"][level]
        cap = "no budget" if budget is None else f"budget ε = {budget['epsilon']:g}"
        lines.append(
            f"  {level:<8} spent ε = {_show(spent['epsilon'])} at δ = {spent['delta']:g} "
            f"[{spent['accountant']}], {cap}"
        )
    if "spent_with_overlaps" in entry:
        with_overlaps = entry["spent_with_overlaps"]
        lines.append(
            "  with the federations sharing its records (what a run on it is checked against): "
            + ", ".join(f"{level} ε = {_show(with_overlaps[level])}" for level in LEVELS)
        )
    charges, runs = entry["charges"], entry["runs"]
    lines.append(
        f"  {len(runs)} run(s), {len(charges)} charge(s), {sum(c['voided'] for c in charges)} voided"
    )
    for run in runs:
        made_by = f" {run['command']}" if run["command"] else ""
        voided = f", {run['voided']} voided" if run["voided"] else ""
        lines.append(
            f"    run {started_text(run['started'])}{made_by}: {run['charges']} charge(s){voided}, "
            f"ε agent {_show(run['epsilon']['agent'])}, instance {_show(run['epsilon']['instance'])}"
        )
    if every_charge:
        lines += [
            f"    #{c['id']:<5} {c['run']}" + ("  (voided: not released)" if c["voided"] else "")
            for c in charges
        ]
    return lines


@ledger.command()
@_PATH
def verify(path: str) -> None:
    """SQLite's integrity check, then every spend recomputed; exit 1 on a violation, 2 if damaged."""
    from fedvote.privacy.ledger_audit import federations_in, integrity_report, verify_ledger
    from fedvote.privacy.ledger_store import LedgerDamaged

    with _naming_path():
        try:
            problems = verify_ledger(path)
        except LedgerDamaged:
            for line in integrity_report(path):  # what still reads, before the one-line refusal
                click.echo(line)
            raise
    for problem in problems:
        click.echo(f"violation: {problem}")
    if problems:
        raise SystemExit(1)
    click.echo(
        f"{path}: SQLite integrity check ok; {federations_in(path)} federation(s), "
        "every spend within its budgets"
    )


@ledger.command("set-budget")
@_PATH
@click.option("--federation", required=True, help="The federation key, as `fedvote ledger show` lists it.")
@click.option("--epsilon", type=float, required=True, help="The new ε budget.")
@click.option(
    "--level",
    type=click.Choice([*LEVELS, "both"]),
    default="both",
    show_default=True,
    help="The level(s) the budget binds.",
)
@click.option(
    "--delta",
    type=float,
    default=None,
    help="δ the budget is enforced at [default: the level's current budget's, else 1e-3].",
)
@click.option(
    "--accountant",
    type=click.Choice(ACCOUNTANTS),
    default=None,
    help="Accountant of the budget [default: the level's current budget's, else pld].",
)
def set_budget(
    path: str, federation: str, epsilon: float, level: str, delta: float | None, accountant: str | None
) -> None:
    """Set (raise or lower) a federation's budget: an appended, logged row; never an update."""
    from fedvote.privacy.ledger_audit import set_budget as append_budgets

    levels = LEVELS if level == "both" else (level,)
    with _naming_path():
        budgets = append_budgets(path, federation, epsilon, levels, delta=delta, accountant=accountant)
    for name, budget in budgets.items():
        click.echo(
            f"federation {federation}: {name}-level budget ε = {budget.epsilon:g} "
            f"at δ = {budget.delta:g} [{budget.accountant}]"
        )


def _show(value: float | None) -> str:
    return "unbounded" if value is None else f"{value:.4f}"
