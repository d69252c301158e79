"""``fedvote label``: answer user queries with noisy-argmax labels (query-time labelling, no student).

The CaPC mode (Choquette-Choo et al. 2021, cited by the reputation-weighted PATE paper):
a querying party sends its own unlabelled examples; the federation's teachers vote on
each, every agent adding its share of N(0, σ²), and only the argmax of the noisy sum goes
back. Each answer is one Gaussian release (PATE-FL, Theorem 3: sensitivity 1 at agent
level, √2 at instance level), charged to the ledger *before* it is computed, so ε grows
with every answer; with ``--budget-epsilon`` the command stops before the answer that
would exceed the budget.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import numpy as np

from fedvote.aggregation.voting import noise_share_std, noisy_argmax
from fedvote.cli.options import reject_flags_besides
from fedvote.cli.run_options import run_config_options
from fedvote.config import RunConfig, load_run_config
from fedvote.data.federation import LabeledData
from fedvote.errors import ConfigError
from fedvote.privacy.config import LEVELS
from fedvote.results import finite_or_none

if TYPE_CHECKING:
    from fedvote.privacy.ledger import PrivacyLedger
    from fedvote.transport.capabilities import TeacherVotes

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
    # lazy: keeps fedvote --help under 1 s (these import torch and dp_accounting)
    from fedvote.methods.pate_fl import PateFL
    from fedvote.privacy.events import pate_fl_events
    from fedvote.privacy.ledger import PersistentLedger, PrivacyBudgetExceeded
    from fedvote.progress import RichProgress
    from fedvote.runner import check_budget, make_federation, note_charge, open_ledger, plan
    from fedvote.transport.capabilities import check_capabilities
    from fedvote.transport.local import LocalTransport

    (flags_config,) = configs
    config = flags_config if config_file is None else _config_from_file(context, config_file, flags_config)
    if config.method != "pate-fl":
        raise ConfigError(
            "method", f"fedvote label answers with the teachers' votes (pate-fl), not {config.method}"
        )
    if config.privacy.secure_noise:
        raise ConfigError("secure_noise", "fedvote label answers with Gaussian noise, not on the secure path")
    federation = make_federation(config)
    queries = load_queries(queries_file, federation.example_shape)  # (Q, *shape)
    check_query_range(queries, federation.public.features, queries_file)
    count = queries.shape[0]
    # The queries take the public pool's place: agents vote on them by index.
    asked = dataclasses.replace(
        federation, public=LabeledData(features=queries, labels=np.full(count, -1, dtype=np.int64))
    )
    method = plan(dataclasses.replace(config, queries=count), asked.public_metadata())
    assert isinstance(method, PateFL)
    sigma, min_responders = float(method.sigma), method.min_responders
    privacy = config.privacy
    ledger = open_ledger(config, federation)  # keyed by the agents' records
    answers: list[dict[str, Any]] = []
    stopped: str | None = None
    try:
        if not as_json:
            click.echo(
                f"fedvote label: {count} queries, {federation.num_agents} teachers on "
                f"{config.federation.dataset}, "
                f"σ = {sigma:.4g}; each answer charged at δ = {privacy.delta:g} [{privacy.accountant}]"
            )
        transport = LocalTransport(
            asked, seed=config.seed, noise_seed=privacy.noise_seed, secure_sum=privacy.secure_sum
        )
        check_capabilities(method, transport)
        try:
            check_budget(ledger, [pate_fl_events(sigma, 1)])  # no training when not one answer fits
        except PrivacyBudgetExceeded as error:
            stopped = error.detail
        if stopped is None:
            transport.train_teachers(method.teacher, RichProgress())
            noise_std = noise_share_std(sigma, min_responders)
            stopped = _answer(
                transport, ledger, config, sigma, noise_std, min_responders, count, answers, as_json
            )
        ledger_summary = _ledger_summary(ledger)
    except BaseException as error:  # Ctrl-C or a failure between answers: say what was charged
        note_charge(error, config, ledger)
        raise
    finally:
        if isinstance(ledger, PersistentLedger):
            ledger.close()
    released = [a for a in answers if a["label"] is not None]
    if as_json:
        payload = {
            "method": config.method,
            "dataset": config.federation.dataset,
            "agents": federation.num_agents,
            "sigma": sigma,
            "delta": privacy.delta,
            "accountant": privacy.accountant,
            "secure_sum": privacy.secure_sum,
            "requested": count,
            "answered": len(released),
            "answers": answers,
            "stopped": stopped,
            "ledger": ledger_summary,
            "config": config.to_dict(),
        }
        click.echo(json.dumps(payload, indent=2))
        _exit_if_stopped(stopped, len(released), count)
        return
    last = released[-1] if released else {"epsilon_agent": 0.0, "epsilon_instance": 0.0}
    click.echo(
        f"answered {len(released)} of {count} queries: ε (agent-level) {_show(last['epsilon_agent'])}, "
        f"ε (instance-level) {_show(last['epsilon_instance'])} at δ = {privacy.delta:g}"
        + (f"; federation {ledger_summary['federation']} has spent agent-level ε = "
           f"{_show(ledger_summary['spent_agent_epsilon'])}" if ledger_summary else "")
    )
    if stopped is not None:
        click.echo(f"stopped before query {len(answers)}: {stopped}")
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


def _answer(
    transport: TeacherVotes,
    ledger: PrivacyLedger,
    config: RunConfig,
    sigma: float,
    noise_std: float,
    min_responders: int,
    count: int,
    answers: list[dict[str, Any]],
    as_json: bool,
) -> str | None:
    """Answer queries 0 … count−1 in order, one charged round each; the reason it stopped, if any."""
    from fedvote.privacy.accountant import epsilon_for  # lazy: keeps fedvote --help under 1 s
    from fedvote.privacy.events import pate_fl_events
    from fedvote.privacy.ledger import PrivacyBudgetExceeded

    privacy = config.privacy
    for index in range(count):
        try:
            charge = ledger.charge(pate_fl_events(sigma, 1))  # before anything is computed
        except PrivacyBudgetExceeded as error:
            return str(error.detail)
        result = transport.vote_sum(np.array([index]), noise_std, min_responders)
        if result is None:  # fewer than t responders: nothing released, nothing spent
            ledger.void(charge)
            answers.append({"query": index, "label": None, "epsilon_agent": None, "epsilon_instance": None})
            if not as_json:
                click.echo(f"query {index:>5}  not released (fewer than t = {min_responders} responders)")
            continue
        spent = {  # cumulative ε of this session's answers so far
            level: epsilon_for(ledger.event(level), privacy.delta, privacy.accountant) for level in LEVELS
        }
        answer = {
            "query": index,
            "label": int(noisy_argmax(result.sums)[0]),  # result.sums: (1, C)
            "epsilon_agent": finite_or_none(spent["agent"]),
            "epsilon_instance": finite_or_none(spent["instance"]),
        }
        answers.append(answer)
        if not as_json:
            click.echo(
                f"query {index:>5}  label {answer['label']:<3} ε agent {_show(answer['epsilon_agent'])}  "
                f"instance {_show(answer['epsilon_instance'])}"
            )
    return None


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
        return config
    changes = {name: getattr(flags.privacy, name) for name in typed}
    if "sigma" in typed and "epsilon" not in typed:
        changes["epsilon"] = None
    if "epsilon" in typed and "sigma" not in typed:
        changes["sigma"] = None
    return dataclasses.replace(config, privacy=dataclasses.replace(config.privacy, **changes))


def load_queries(path: str | Path, example_shape: tuple[int, ...]) -> np.ndarray:
    """The examples in ``path`` as float32 (Q, *example_shape); one-line errors for anything else.

    Accepts .npy, .npz (array ``x``) and .csv (one example per row, optional header);
    each row is either already of ``example_shape`` or flat with prod(example_shape) values.
    """
    file = Path(path)
    suffix = file.suffix.lower()
    try:
        if suffix == ".npy":
            array = np.load(file, allow_pickle=False)
        elif suffix == ".npz":
            with np.load(file, allow_pickle=False) as archive:
                if "x" not in archive.files:
                    found = ", ".join(archive.files) or "nothing"
                    raise ConfigError("queries", f"{file} holds no array 'x' (found: {found})")
                array = archive["x"]
        elif suffix == ".csv":
            array = _read_csv(file)
        else:
            raise ConfigError("queries", f"{file}: expected a .npy, .npz (array 'x') or .csv file")
    except ConfigError:
        raise
    except Exception as error:  # noqa: BLE001 - empty (EOFError), zip and format errors alike
        raise ConfigError("queries", f"cannot read {file}: {' '.join(str(error).split())}") from error
    features = math.prod(example_shape)
    if not (np.issubdtype(array.dtype, np.number) and array.dtype != np.bool_) or array.ndim < 2:
        raise ConfigError(
            "queries",
            f"{file} holds a {array.dtype} array of shape {array.shape}; expected (Q, {features}) numbers",
        )
    if array.shape[0] < 1:
        raise ConfigError("queries", f"{file} holds no queries")
    if tuple(array.shape[1:]) != tuple(example_shape):
        if array.ndim != 2 or array.shape[1] != features:
            raise ConfigError(
                "queries",
                f"{file}: each query has shape {tuple(array.shape[1:])}, but the federation's examples have "
                f"shape {tuple(example_shape)} ({features} features)",
            )
        array = array.reshape((array.shape[0], *example_shape))
    if not np.all(np.isfinite(array)):
        raise ConfigError("queries", f"{file} holds non-finite values")
    return np.ascontiguousarray(array, dtype=np.float32)


def check_query_range(queries: np.ndarray, reference: np.ndarray, file: str | Path) -> None:
    """Refuse (naming ``--queries``) a query value far outside the data's range.

    ``reference`` is the federation's public pool, in the loader's representation (digits'
    pixels in [0, 1]). A value more than the pool's whole span beyond its range (1e30 for a
    pixel) is no example of this data — a file in another representation, or garbage — and
    each answer would still be charged. The range is of public data only.
    """
    if not reference.size:
        return
    low, high = float(np.min(reference)), float(np.max(reference))
    span = max(high - low, 1.0)
    outside = (queries < low - span) | (queries > high + span)  # (Q, *shape)
    if np.any(outside):
        index = int(np.argmax(outside.reshape(outside.shape[0], -1).any(axis=1)))
        value = float(queries[index][outside[index]].flat[0])
        raise ConfigError(
            "queries",
            f"{file}: query {index} holds {value:g}, far outside the data's range [{low:g}, {high:g}]; "
            "give queries in the representation the dataset loader produces",
        )


def _read_csv(file: Path) -> np.ndarray:
    """Rows of comma-separated numbers, (Q, features); a first row that is not numbers is a header."""
    with file.open() as handle:
        first = handle.readline()
    try:
        [float(cell) for cell in first.split(",")]
        header = 0
    except ValueError:
        header = 1
    return np.loadtxt(file, delimiter=",", skiprows=header, ndmin=2, dtype=np.float64)


def _ledger_summary(ledger: PrivacyLedger) -> dict[str, Any] | None:
    from fedvote.privacy.ledger import PersistentLedger  # lazy: keeps fedvote --help under 1 s

    if not isinstance(ledger, PersistentLedger):
        return None
    return {
        "path": str(ledger.path),
        "federation": ledger.federation,
        "spent_agent_epsilon": finite_or_none(ledger.spent("agent")),
        "spent_instance_epsilon": finite_or_none(ledger.spent("instance")),
        "budget_epsilon": ledger.budget_epsilon,
    }


def _show(value: float | None) -> str:
    return "∞ (not private)" if value is None else f"{value:.4f}"
