"""``fedvote label``: answer user queries with noisy-argmax labels (query-time labelling, no student).

The CaPC mode (Choquette-Choo et al. 2021, cited by the reputation-weighted PATE paper):
each answer is the argmax of the teachers' noisy vote sum, charged to the ledger *before*
it is computed; with ``--budget-epsilon`` the command stops before the answer that would
exceed the budget. The protocol is :mod:`fedvote.labelling`; this module parses the flags
and prints what the protocol reports.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import click

from fedvote.cli.options import reject_flags_besides
from fedvote.cli.run_options import run_config_options
from fedvote.config import RunConfig, load_run_config
from fedvote.settings.ledger_path import with_checked_ledger

# The exit status of a session that stopped before its last query because the next answer
# would have exceeded the privacy budget (the answers given are printed and charged).
EXIT_STOPPED_AT_BUDGET = 3

# Flags that may accompany --config: they change how answers are charged, not the federation.
_CONFIG_OVERRIDES = frozenset({"sigma", "epsilon", "ledger", "budget_epsilon", "secure_sum", "noise_seed"})


@click.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="Build the federation and teachers a run recorded in FILE (a result.json or its "
                   "'config'); --queries, --json, --sigma, --epsilon, --ledger, --budget-epsilon, "
                   "--secure-sum and --noise-seed may be given with it.")
@click.option("--queries", "queries_file", type=click.Path(dir_okay=False, exists=True), required=True,
              help="The examples to label: .npy (Q, *shape) or (Q, features), .npz with array 'x', or "
                   ".csv with one example's features per row (an optional header row).")
@run_config_options(exclude=frozenset({"queries"}))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of one line per answer.")
@click.pass_context
def label(
    context: click.Context,
    config_file: str | None,
    queries_file: str,
    configs: list[RunConfig],
    as_json: bool,
) -> None:
    """Answer each query with the teachers' noisy-argmax label, charging every answer first.

    σ is --sigma, or calibrated so that answering every query in the file costs at most
    --epsilon (default 4) at agent level. Each line shows the label and the cumulative ε
    at both levels so far.

    Exit status: 0 when every query was answered; 3 when it stopped early because the next
    answer would exceed the privacy budget (the answers given are printed and charged); 2
    on bad input.

    Example: fedvote label --agents 20 --epsilon 4 --queries queries.npy
    """
    # lazy: keeps fedvote --help under 1 s (the protocol imports torch and dp_accounting)
    from fedvote.labelling import Answer, answer_queries, plan_labelling
    from fedvote.progress import RichProgress

    (flags_config,) = configs
    config = flags_config if config_file is None else _config_from_file(context, config_file, flags_config)
    labelling = plan_labelling(config, queries_file)
    count, privacy = labelling.count, config.privacy

    def opened() -> None:
        click.echo(
            f"fedvote label: {count} queries, {labelling.federation.num_agents} teachers on "
            f"{config.federation.dataset}, "
            f"σ = {labelling.sigma:.4g}; each answer charged at δ = {privacy.delta:g} [{privacy.accountant}]"
        )

    def answered(answer: Answer) -> None:
        if answer.label is None:
            t = labelling.min_responders
            click.echo(f"query {answer.query:>5}  not released (fewer than t = {t} responders)")
            return
        click.echo(
            f"query {answer.query:>5}  label {answer.label:<3} ε agent {_show(answer.epsilon_agent)}  "
            f"instance {_show(answer.epsilon_instance)}"
        )

    outcome = answer_queries(
        labelling,
        # Off a terminal (a log, a batch job) each phase is a plain line with the time and an ETA.
        RichProgress(log_lines=True, prefix="fedvote label"),
        on_open=None if as_json else opened,
        on_answer=None if as_json else answered,
    )
    released, stopped, ledger_summary = outcome.released, outcome.stopped, outcome.ledger
    if as_json:
        payload = {
            "method": config.method,
            "dataset": config.federation.dataset,
            "agents": labelling.federation.num_agents,
            "sigma": labelling.sigma,
            "delta": privacy.delta,
            "accountant": privacy.accountant,
            "secure_sum": privacy.secure_sum,
            "requested": count,
            "answered": len(released),
            "answers": [answer.to_dict() for answer in outcome.answers],
            "stopped": stopped,
            "ledger": ledger_summary,
            "config": config.to_dict(),
        }
        click.echo(json.dumps(payload, indent=2))
        _exit_if_stopped(stopped, len(released), count)
        return
    last = released[-1] if released else None
    click.echo(
        f"answered {len(released)} of {count} queries: "
        f"ε (agent-level) {_show(last.epsilon_agent if last else 0.0)}, "
        f"ε (instance-level) {_show(last.epsilon_instance if last else 0.0)} at δ = {privacy.delta:g}"
        + (f"; federation {ledger_summary['federation']} has spent agent-level ε = "
           f"{_show(ledger_summary['spent_agent_epsilon'])}" if ledger_summary else "")
    )
    if stopped is not None:
        click.echo(f"stopped before query {len(outcome.answers)}: {stopped}")
    _exit_if_stopped(stopped, len(released), count)


def _exit_if_stopped(stopped: str | None, answered: int, count: int) -> None:
    """Exit with :data:`EXIT_STOPPED_AT_BUDGET` (saying so on stderr) if the budget stopped the session."""
    if stopped is None:
        return
    click.echo(
        f"fedvote: label stopped at the privacy budget after {answered} of {count} answers "
        f"(exit status {EXIT_STOPPED_AT_BUDGET})",
        err=True,
    )
    sys.exit(EXIT_STOPPED_AT_BUDGET)


def _config_from_file(context: click.Context, path: str, flags: RunConfig) -> RunConfig:
    """The config in ``path`` with the charging flags typed on the command line applied."""
    reject_flags_besides(context, _CONFIG_OVERRIDES | {"config_file", "queries_file", "as_json"})
    config = load_run_config(path)
    typed = {
        name
        for name in _CONFIG_OVERRIDES
        if context.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    }
    if not typed:
        return with_checked_ledger(config, path)
    changes = {name: getattr(flags.privacy, name) for name in typed}
    if "sigma" in typed and "epsilon" not in typed:
        changes["epsilon"] = None
    if "epsilon" in typed and "sigma" not in typed:
        changes["sigma"] = None
    changed = dataclasses.replace(config, privacy=dataclasses.replace(config.privacy, **changes))
    return with_checked_ledger(changed, path, typed_ledger="ledger" in typed)


def _show(value: float | None) -> str:
    return "∞ (not private)" if value is None else f"{value:.4f}"
