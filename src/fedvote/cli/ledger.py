"""``fedvote ledger``: read, audit and budget a privacy ledger.

* ``show PATH [--json]`` — per federation: the budget per level, every charge, ε spent
  at each level (JSON: a list of objects with ``federation``, ``budget``, ``charges``,
  ``spent`` {``agent``, ``instance``}).
* ``verify PATH`` — recompute every spend from the stored events and check it against
  the budgets in force when the charges were made; exit status 1 on a violation.
* ``set-budget PATH --federation F --epsilon E`` — the one way to change a stored
  budget: an appended, timestamped budget row (the ledger's triggers forbid updates).
"""

from __future__ import annotations

import json
from typing import Any

import click

from fedvote.privacy.config import ACCOUNTANTS, LEVELS

_PATH = click.argument("path", type=click.Path(dir_okay=False))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def ledger() -> None:
    """Show, verify and budget a privacy ledger (the --ledger FILE of run, compare, sweep, label)."""


@ledger.command()
@_PATH
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per federation.")
def show(path: str, as_json: bool) -> None:
    """Per federation: the budget, every charge and the ε spent at each level."""
    from fedvote.privacy.ledger import ledger_report

    report = ledger_report(path)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    if not report:
        click.echo(f"{path}: no federation charged or budgeted")
    for entry in report:
        click.echo("\n".join(_show_lines(entry)))


def _show_lines(entry: dict[str, Any]) -> list[str]:
    """A federation's readable lines: budgets, spend per level, one line per charge."""
    lines = [f"federation {entry['federation']}"]
    for level in LEVELS:
        budget, spent = entry["budget"][level], entry["spent_at"][level]
        cap = "no budget" if budget is None else f"budget ε = {budget['epsilon']:g}"
        lines.append(
            f"  {level:<8} spent ε = {_show(spent['epsilon'])} at δ = {spent['delta']:g} "
            f"[{spent['accountant']}], {cap}"
        )
    charges = entry["charges"]
    lines.append(f"  {len(charges)} charge(s), {sum(c['voided'] for c in charges)} voided")
    lines += [
        f"    #{c['id']:<5} {c['run']}" + ("  (voided: not released)" if c["voided"] else "") for c in charges
    ]
    return lines


@ledger.command()
@_PATH
def verify(path: str) -> None:
    """Recompute every spend from the stored events; exit 1 if any exceeds its budget."""
    from fedvote.privacy.ledger import ledger_report, verify_ledger

    problems = verify_ledger(path)
    for problem in problems:
        click.echo(f"violation: {problem}")
    if problems:
        raise SystemExit(1)
    click.echo(f"{path}: {len(ledger_report(path))} federation(s), every spend within its budgets")


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
    from fedvote.privacy.ledger import set_budget as append_budgets

    levels = LEVELS if level == "both" else (level,)
    budgets = append_budgets(path, federation, epsilon, levels, delta=delta, accountant=accountant)
    for name, budget in budgets.items():
        click.echo(
            f"federation {federation}: {name}-level budget ε = {budget.epsilon:g} "
            f"at δ = {budget.delta:g} [{budget.accountant}]"
        )


def _show(value: float | None) -> str:
    return "unbounded" if value is None else f"{value:.4f}"
