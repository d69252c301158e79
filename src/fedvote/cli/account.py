"""``fedvote account``: ε of a planned release without training anything.

Register with ``cli.add_command(account)``. Every subcommand prints a readable line, or
with ``--json`` an object with at least ``epsilon``, ``delta`` and ``accountant``. Bad
input raises :class:`~fedvote.errors.ConfigError`, which ``fedvote.cli.main`` prints as
a one-line error naming the flag.

The accountants (dp_accounting, scipy) are imported by the commands that use them, not
with this module (lazy: keeps ``fedvote --help`` under 1 s); the choices of the flags come
from the light :mod:`fedvote.privacy.config`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import numpy as np

from fedvote.errors import ConfigError
from fedvote.privacy.config import ACCOUNTANTS, KNN_BOUNDS, LEVELS
from fedvote.results import finite_or_none

_ACCOUNTANT = click.option(
    "--accountant", type=click.Choice(ACCOUNTANTS), default="pld", show_default=True,
    help="pld (tight, numerical), rdp (dense orders), exact (Gaussian closed form), "
         "classic (RDP with the classic conversion, as the voting paper).",
)
# δ defaults to fedvote run's, so that `account` reproduces a run's figure with the same flags.
_DELTA = click.option("--delta", type=float, default=1e-3, show_default=True, help="Target δ.")
_JSON = click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
_SIGMA = click.option("--sigma", type=float, required=True, help="Std σ of the total noise on each vote sum.")
# Counts of releases, records, steps, clients: a count beyond 10¹⁸ is a typo, and the float
# arithmetic of the bounds overflows near 10³⁰⁸; refused in one line naming the flag.
COUNT = click.IntRange(min=None, max=10**18)

_QUERIES = click.option("--queries", type=COUNT, required=True, help="Number of queries Q answered.")
_LEVEL = click.option("--level", type=click.Choice(LEVELS), default="agent", show_default=True)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _check_delta(delta: float) -> None:
    if not 0.0 < delta < 1.0:
        raise ConfigError("delta", f"must lie in (0, 1), got {delta}")


def _check_positive(name: str, value: float) -> None:
    if not value > 0 or not math.isfinite(value):
        raise ConfigError(name, f"must be a finite number > 0, got {value}")


def _check_count(name: str, value: int) -> None:
    """Refuse a count of releases (queries, steps) below one, as ``fedvote run`` refuses 0 queries.

    Zero releases cost ε = 0 and answer nothing: surely a mistake, never a plan.
    """
    if value < 1:
        raise ConfigError(name, f"must be at least 1, got {value}")


@contextmanager
def _noise_named(flag: str) -> Iterator[None]:
    """Name ``flag`` (the noise) in a refusal of a release too little noised to account."""
    from fedvote.privacy.accountant import PLDTooLarge  # lazy: keeps fedvote --help under 1 s

    try:
        yield
    except PLDTooLarge as error:
        raise ConfigError(flag, error.detail) from error


def _emit(payload: dict[str, Any], as_json: bool, text: str) -> None:
    if as_json:
        click.echo(json.dumps(finite_or_none(payload)))
    else:
        click.echo(text)


def _gaussian_payload(event: Any, delta: float, accountant: str) -> dict[str, Any]:
    from fedvote.privacy.accountant import epsilon_for, gaussian_mu  # lazy: keeps fedvote --help under 1 s

    with _noise_named("sigma"):
        epsilon = epsilon_for(event, delta, accountant)
    payload: dict[str, Any] = {"epsilon": epsilon, "delta": delta, "accountant": accountant}
    try:
        payload["mu"] = gaussian_mu(event)
    except ValueError:
        pass
    return payload


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def account() -> None:
    """Compute (ε, δ) of a planned release without training."""


@account.command()
@_SIGMA
@click.option("--sensitivity", type=float, default=1.0, show_default=True, help="L2 sensitivity s.")
@click.option("--count", type=COUNT, required=True, help="Number of releases Q.")
@_DELTA
@_ACCOUNTANT
@_JSON
def gaussian(
    sigma: float, sensitivity: float, count: int, delta: float, accountant: str, as_json: bool
) -> None:
    """Q Gaussian releases with noise std σ and L2 sensitivity s (μ = s·√Q/σ).

    Example: fedvote account gaussian --sigma 25 --count 500 --delta 1e-3
    """
    from fedvote.privacy.events import gaussian_release_event  # lazy: keeps fedvote --help under 1 s

    _check_positive("sigma", sigma)
    _check_positive("sensitivity", sensitivity)
    _check_count("count", count)
    _check_delta(delta)
    payload = _gaussian_payload(gaussian_release_event(sigma, sensitivity, count), delta, accountant)
    payload.update(sigma=sigma, sensitivity=sensitivity, count=count)
    _emit(payload, as_json, f"ε = {payload['epsilon']:.4f} at δ = {delta:g} [{accountant}]")


@account.command("pate-fl")
@_SIGMA
@_QUERIES
@_DELTA
@_LEVEL
@_ACCOUNTANT
@_JSON
def pate_fl(sigma: float, queries: int, delta: float, level: str, accountant: str, as_json: bool) -> None:
    """PATE-FL (Theorem 3 of the voting paper): s = 1 agent level, √2 instance level.

    Example: fedvote account pate-fl --sigma 25 --queries 500 --delta 1e-3 --level agent
    """
    from fedvote.privacy.events import pate_fl_events  # lazy: keeps fedvote --help under 1 s

    _check_positive("sigma", sigma)
    _check_count("queries", queries)
    _check_delta(delta)
    events = pate_fl_events(sigma, queries)
    payload = _gaussian_payload(events.at(level), delta, accountant)
    payload.update(level=level, sigma=sigma, queries=queries, sensitivity=events.sensitivity(level))
    _emit(payload, as_json, f"ε ({level}-level) = {payload['epsilon']:.4f} at δ = {delta:g} [{accountant}]")


@account.command("private-knn-fl")
@_SIGMA
@_QUERIES
@click.option("--k", "k", type=COUNT, required=True, help="Neighbours per vote.")
@_DELTA
@_LEVEL
@click.option("--bound", type=click.Choice(KNN_BOUNDS), default="tight", show_default=True,
              help="Instance-level sensitivity: tight √2/k (proved) or the paper's √(2/k).")
@_ACCOUNTANT
@_JSON
def private_knn_fl(
    sigma: float, queries: int, k: int, delta: float, level: str, bound: str, accountant: str, as_json: bool
) -> None:
    """Private-kNN-FL: s = 1 agent level; instance level √2/k (tight) or √(2/k) (paper).

    Example: fedvote account private-knn-fl --sigma 15 --queries 200 --k 10 --delta 1e-4 --level instance
    """
    from fedvote.privacy.events import private_knn_fl_events  # lazy: keeps fedvote --help under 1 s

    _check_positive("sigma", sigma)
    _check_count("queries", queries)
    _check_delta(delta)
    events = private_knn_fl_events(sigma, queries, k, bound)
    payload = _gaussian_payload(events.at(level), delta, accountant)
    payload.update(level=level, bound=bound, k=k, sigma=sigma, queries=queries,
                   sensitivity=events.sensitivity(level))
    _emit(payload, as_json,
          f"ε ({level}-level, {bound} bound) = {payload['epsilon']:.4f} at δ = {delta:g} [{accountant}]")


@account.command("dp-sgd")
@click.option("--sampling-rate", type=float, required=True, help="Poisson sampling rate q = B/n.")
@click.option("--noise-multiplier", type=float, required=True, help="z: noise std over the clip norm.")
@click.option("--steps", type=COUNT, required=True, help="Number of steps T.")
@_DELTA
@click.option("--accountant", type=click.Choice(("pld", "rdp", "classic")), default="pld", show_default=True)
@_JSON
def dp_sgd(sampling_rate: float, noise_multiplier: float, steps: int, delta: float, accountant: str,
           as_json: bool) -> None:
    """DP-SGD / DP-FedSGD: T steps of the Poisson-subsampled Gaussian (add/remove one record).

    Example: fedvote account dp-sgd --sampling-rate 0.01 --noise-multiplier 1.1 --steps 1000 --delta 1e-5
    """
    from fedvote.privacy.accountant import epsilon_for  # lazy: keeps fedvote --help under 1 s
    from fedvote.privacy.events import dp_sgd_event

    _check_positive("noise_multiplier", noise_multiplier)
    _check_count("steps", steps)
    _check_delta(delta)
    event = dp_sgd_event(sampling_rate, noise_multiplier, steps)
    with _noise_named("noise_multiplier"):
        epsilon = epsilon_for(event, delta, accountant)
    payload = {"epsilon": epsilon, "delta": delta, "accountant": accountant, "sampling_rate": sampling_rate,
               "noise_multiplier": noise_multiplier, "steps": steps, "adjacency": "add/remove one record"}
    _emit(payload, as_json, f"ε = {epsilon:.4f} at δ = {delta:g} [{accountant}, add/remove one record]")


@account.command()
@click.option("--histogram", "histogram_path", type=click.Path(dir_okay=False), required=True,
              help="A .npy file of clean vote sums, queries × classes (private!).")
@_SIGMA
@_DELTA
@click.option("--sensitivity", type=float, default=1.0, show_default=True,
              help="L2 sensitivity of the level analysed (1: agent level; √2: PATE-FL instance level).")
@click.option("--bound", type=click.Choice(("gnmax", "theorem5")), default="gnmax", show_default=True,
              help="gnmax: Papernot et al. 2018, Thm 6 / Prop 7; "
                   "theorem5: the voting paper's Lemma 4 / Thm 5.")
@click.option("--per-query/--no-per-query", default=True, show_default=True,
              help="Include per-query margins, q and ε in --json.")
@_JSON
def votes(histogram_path: str, sigma: float, delta: float, sensitivity: float, bound: str, per_query: bool,
          as_json: bool) -> None:
    """Data-dependent ε from clean vote histograms — itself NOT private; report it separately.

    Example: fedvote account votes --histogram votes.npy --sigma 25 --delta 1e-3
    """
    from fedvote.privacy.data_dependent import data_dependent_epsilon

    _check_positive("sigma", sigma)
    _check_positive("sensitivity", sensitivity)
    _check_delta(delta)
    path = Path(histogram_path)
    try:
        histogram = np.load(path, allow_pickle=False)
    except Exception as error:  # noqa: BLE001 - missing, empty (EOFError), zip and format errors alike
        raise ConfigError("histogram", f"cannot read {path} as a .npy array: {_one_line(error)}") from error
    if histogram.dtype.kind not in "biuf":  # strings, objects, complex numbers: not vote counts
        raise ConfigError(
            "histogram",
            f"{path} holds {histogram.dtype} values of shape {histogram.shape}; expected vote counts "
            "(numbers), queries × classes",
        )
    result = data_dependent_epsilon(histogram, sigma, delta, sensitivity=sensitivity, bound=bound)
    payload = result.to_dict(per_query=per_query)
    payload["accountant"] = f"rdp ({bound}, data-dependent), capped by exact data-independent"
    _emit(payload, as_json,
          f"ε = {result.epsilon:.4f} at δ = {delta:g} — {result.label}; "
          f"data-independent ε = {result.epsilon_data_independent:.4f}")


@account.command("gdp-clt")
@click.option("--sigma", type=float, required=True, help="Noise scale σ of Algorithm 2 (noise N(0, 4C²σ²)).")
@click.option("--batch-size", type=COUNT, required=True, help="B: batch size.")
@click.option("--records", type=COUNT, required=True, help="n: records of the client.")
@click.option("--local-steps", type=COUNT, required=True, help="K: local steps per round.")
@click.option("--rounds", type=COUNT, required=True, help="R: synchronisation rounds.")
@click.option("--clients", type=COUNT, default=None, help="m: clients, to report strong federated μ.")
@click.option("--delta", type=float, default=1e-5, show_default=True)
@click.option("--pld/--no-pld", "with_pld", default=True, show_default=True,
              help="Also compute the PLD ε of the same run (replace-one, Poisson rate B/n).")
@_JSON
def gdp_clt(sigma: float, batch_size: int, records: int, local_steps: int, rounds: int, clients: int | None,
            delta: float, with_pld: bool, as_json: bool) -> None:
    """PriFedSync Theorem 2: μ-GDP by the CLT, μ = √2·c·√(e^{σ⁻²}Φ(1.5/σ)+3Φ(−0.5/σ)−2).

    Example: fedvote account gdp-clt --sigma 1 --batch-size 16 --records 600 --local-steps 38 --rounds 93
    """
    from fedvote.privacy.fdp import federated_mu, gdp_epsilon, prifedsync_mu, replace_one_dp_sgd_epsilon

    _check_delta(delta)
    mu = prifedsync_mu(sigma, batch_size, records, local_steps, rounds)
    payload: dict[str, Any] = {
        "epsilon": gdp_epsilon(mu, delta),
        "delta": delta,
        "accountant": "gdp-clt (asymptotic)",
        "mu": mu,
        "c": batch_size / records * math.sqrt(local_steps * rounds),
    }
    if clients is not None:
        strong = federated_mu(mu, clients, strong=True)
        payload["mu_strong"] = strong
        payload["epsilon_strong"] = gdp_epsilon(strong, delta)
    if with_pld:
        with _noise_named("sigma"):
            payload["epsilon_pld"] = replace_one_dp_sgd_epsilon(
                sigma, batch_size / records, local_steps * rounds, delta
            )
    text = f"μ = {mu:.4f} (CLT), ε = {payload['epsilon']:.4f} at δ = {delta:g}"
    if with_pld:
        text += f"; PLD (replace-one, Poisson B/n) ε = {payload['epsilon_pld']:.4f}"
    _emit(payload, as_json, text)
