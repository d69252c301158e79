"""``fedvote deploy``: run PATE-FL / Private-kNN-FL on Flower, one agent per node.

Register with ``cli.add_command(deploy)``. The commands wrap Flower's own executables
(``flower-superlink``, ``flower-supernode``, ``flwr run``) with the flags fedvote needs;
nothing here does networking itself. Walk-through: ``docs/deploy.md``.

* ``split``     build the federation of a config and write one file per agent + the server's;
* ``agent``     start agent i as a Flower SuperNode holding its file;
* ``superlink`` start a Flower SuperLink (for users who keep one running);
* ``server``    submit the run to a SuperLink (started here unless ``--superlink``) and wait;
* ``app``       write the Flower App project for ``flwr run`` by hand;
* ``simulate``  run the same ServerApp/ClientApp under Flower's simulation engine (Ray).

TLS is the default: ``--insecure`` is for loopback tests only.
"""

from __future__ import annotations

import json
import math
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from fedvote.cli.flower_processes import LogKept, background, flower_home, run_foreground
from fedvote.cli.options import flag_for, refuse_empty_out
from fedvote.config import RunConfig, load_run_config
from fedvote.errors import ConfigError
from fedvote.flower.address import check_superlink
from fedvote.results import check_writable

FLOWER_MISSING = 'Flower is not installed; install it with: pip install "fedvote[deploy]"'
DEFAULT_SUPERLINK_PORT = 9093
CONNECTION = "fedvote"  # the SuperLink connection name in the private Flower config
DEFAULT_CLIP_SIGMAS = 20.0  # fedvote.flower.secagg.DEFAULT_CLIP_SIGMAS (not imported: fast --help)
SECURE_NOISE_HELP = (
    "Exact discrete Gaussian shares on integer votes from the OS CSPRNG; SecAgg+ sums the integers "
    "unrounded, so the headline (ε, δ) carries no rounding slack (docs/privacy.md, \"Secure noise\"). "
    "--no-secure-noise: Gaussian shares from NumPy (needed for a seeded config, private-knn-fl "
    "or weighted-pate)."
)
CLIP_SIGMAS_HELP = (
    "k in SecAgg+'s clipping range c = 1 + k·σ/√t; the run is refused when clipping could add "
    "more than 1 % to δ (docs/privacy.md, \"Clipping range\")."
)



def _argument(parameter: click.Parameter) -> str:
    return str(parameter.name or "value")


def _positive_finite(context: click.Context, parameter: click.Parameter, value: float | None) -> float | None:
    """Callback: a finite number > 0 (seconds, --clip-sigmas), refused in one line while flags are parsed."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ConfigError(_argument(parameter), f"must be a finite number > 0, got {value:g}")
    return value


def _port(context: click.Context, parameter: click.Parameter, value: int | None) -> int | None:
    """Callback: a TCP port, 1 to 65535 (Flower would print its usage text for another)."""
    if value is not None and not 1 <= value <= 65535:
        raise ConfigError("port", f"must be a TCP port from 1 to 65535, got {value}")  # every --port
    return value


def _not_negative(context: click.Context, parameter: click.Parameter, value: int) -> int:
    """Callback: an integer >= 0 (--query-batch-size: 0 is the method's default)."""
    if value < 0:
        raise ConfigError(_argument(parameter), f"must be >= 0 (0: the method's default), got {value}")
    return value


class _Missing(click.ClickException):
    """A part of the installation is missing (Flower, Ray): one line naming what to install, exit 2."""

    exit_code = 2


@contextmanager
def _settings_named(config_file: str | Path, renamed: dict[str, str] | None = None) -> Iterator[None]:
    """Refusals of the run's settings inside the block, named by what this command lets the user change.

    A deploy command reads the run from a config file, not from flags: a refusal naming a setting
    that is no flag of this command (``agents`` would print ``--agents``) names ``--config``, the
    file and the setting's key in it (``federation.agents``). ``renamed`` maps arguments to
    another of the command's flags (simulate: ``config`` and ``data`` are files in ``--data-dir``).
    """
    from fedvote.flower.files import config_key

    try:
        yield
    except ConfigError as error:
        context = click.get_current_context(silent=True)
        flags = {flag for parameter in (context.command.params if context else []) for flag in parameter.opts}
        if renamed and error.argument in renamed:
            raise ConfigError(renamed[error.argument], error.detail) from None
        if flag_for(error.argument) in flags or error.argument == "config":
            raise
        # data/files.py's advice for fedvote run names its --data-dir flag: here it is the config's key
        detail = error.detail.replace("--data-dir DIR", "federation.data_dir")
        raise ConfigError("config", f"{config_file}: {config_key(error.argument)}: {detail}") from None


@click.group()
def deploy() -> None:
    """Run PATE-FL / Private-kNN-FL on Flower: each agent on its own node, sums by SecAgg+."""


# --- split / app -------------------------------------------------------------------------


@deploy.command()
@click.option("--config", "config_file", required=True, type=click.Path(dir_okay=False),
              help="The run's config (a run.json or a result.json); as for fedvote run --config.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), callback=refuse_empty_out,
              help="Directory for agent-<i>.npz, server.npz and run.json (none there yet).")
def split(config_file: str, out_dir: str) -> None:
    """Build the config's federation and write each agent's file and the server's."""
    from fedvote.flower.files import check_split, write_deployment_files
    from fedvote.progress import RichProgress

    with _settings_named(config_file):
        config = load_run_config(config_file)
        check_split(config, out_dir)  # a method Flower does not run, an earlier split in --out: one line
        check_writable(out_dir)  # before the federation is built
        progress = RichProgress(log_lines=True, prefix="fedvote deploy split")
        written = write_deployment_files(config, out_dir, progress)
    for path in written:
        click.echo(f"wrote {path}")


@deploy.command()
@click.argument("directory", type=click.Path(file_okay=False))
def app(directory: str) -> None:
    """Write fedvote's Flower App project (a pyproject.toml) into DIRECTORY, for flwr run.

    Refuses an empty DIRECTORY (the current one would be meant by accident) and a DIRECTORY
    that already holds a pyproject.toml.
    """
    if not directory.strip():
        raise click.BadParameter("is empty; name the directory for the project (. for the current one)",
                                 param_hint="DIRECTORY")
    try:
        check_writable(directory, "directory")
    except ConfigError as error:
        raise click.BadParameter(error.detail, param_hint="DIRECTORY") from None
    from fedvote.flower.app import write_app_project

    try:
        written = write_app_project(directory)
    except ConfigError as error:  # a pyproject.toml there already
        raise click.BadParameter(error.detail, param_hint="DIRECTORY") from None
    click.echo(f"wrote {written}")


# --- TLS options ---------------------------------------------------------------------------


def _tls_server_options(command: Any) -> Any:
    for option in reversed(
        [
            click.option("--insecure", is_flag=True,
                         help="No TLS: unencrypted traffic. For loopback tests only."),
            click.option("--ssl-certfile", type=click.Path(dir_okay=False, exists=True), default=None,
                         help="The SuperLink's TLS certificate (PEM)."),
            click.option("--ssl-keyfile", type=click.Path(dir_okay=False, exists=True), default=None,
                         help="The SuperLink's TLS private key (PEM)."),
            click.option("--ssl-ca-certfile", type=click.Path(dir_okay=False, exists=True), default=None,
                         help="The CA certificate that signed it (PEM)."),
        ]
    ):
        command = option(command)
    return command


def _release_options(command: Any) -> Any:
    """--clip-sigmas and --secure-noise: how votes are released, for the server and the simulation alike."""
    for option in reversed(
        [
            click.option("--clip-sigmas", type=float, default=DEFAULT_CLIP_SIGMAS, show_default=True,
                         callback=_positive_finite, help=CLIP_SIGMAS_HELP),
            click.option("--secure-noise/--no-secure-noise", default=True, show_default=True,
                         help=SECURE_NOISE_HELP),
        ]
    ):
        command = option(command)
    return command


def _superlink_tls_flags(
    insecure: bool, certfile: str | None, keyfile: str | None, ca_certfile: str | None
) -> list[str]:
    given = [v for v in (certfile, keyfile, ca_certfile) if v is not None]
    if insecure:
        if given:
            raise ConfigError("insecure", "give either --insecure or the --ssl-* files, not both")
        return ["--insecure"]
    if len(given) != 3:
        raise ConfigError(
            "ssl_certfile", "TLS needs --ssl-certfile, --ssl-keyfile and --ssl-ca-certfile (or --insecure)"
        )
    assert certfile is not None and keyfile is not None and ca_certfile is not None
    return [
        "--ssl-certfile", str(Path(certfile).resolve()),
        "--ssl-keyfile", str(Path(keyfile).resolve()),
        "--ssl-ca-certfile", str(Path(ca_certfile).resolve()),
    ]


def _client_tls(insecure: bool, root_certificates: str | None) -> list[str]:
    if insecure and root_certificates is not None:
        raise ConfigError("insecure", "give either --insecure or --root-certificates, not both")
    if insecure:
        return ["--insecure"]
    if root_certificates is None:
        raise ConfigError("root_certificates", "TLS needs --root-certificates CA.pem (or --insecure)")
    return ["--root-certificates", str(Path(root_certificates).resolve())]


# --- agent -----------------------------------------------------------------------------------


@deploy.command()
@click.option("--id", "agent_id", required=True, type=int, help="This agent's index i.")
@click.option("--data", "data_file", required=True, type=click.Path(dir_okay=False),
              help="The agent's file (agent-<i>.npz from fedvote deploy split).")
@click.option("--superlink", default=f"127.0.0.1:{DEFAULT_SUPERLINK_PORT}", show_default=True,
              help="The SuperLink's address host:port.")
@click.option("--insecure", is_flag=True, help="No TLS: unencrypted traffic. For loopback tests only.")
@click.option("--root-certificates", type=click.Path(dir_okay=False, exists=True), default=None,
              help="CA certificate (PEM) that signed the SuperLink's certificate.")
@click.option("--port", "runtime_port", type=int, default=None, callback=_port,
              help="Local port of the SuperNode's runtime API [default: a free port].")
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Flower's home for this node (FLWR_HOME) [default: a temporary directory].")
@click.option("--ledger", "ledger_file", type=click.Path(dir_okay=False), default=None,
              help="The agent's own privacy ledger: every vote request it answers is charged there "
                   "first [default: <data file>.ledger.sqlite].")
@click.option("--budget-epsilon", type=float, default=None,
              help="Refuse a vote request that would take this agent's ε above this (its own ledger; "
                   "the first budget stored binds).")
@click.option("--budget-delta", type=float, default=1e-3, show_default=True,
              help="The δ of the agent's own ledger.")
@click.option("--assume-honest", type=int, default=1, show_default=True,
              help="Honest noise shares (its own included) the agent counts on in each sum: 1 trusts "
                   "nobody; the run's t makes the server's assumption.")
def agent(
    agent_id: int,
    data_file: str,
    superlink: str,
    insecure: bool,
    root_certificates: str | None,
    runtime_port: int | None,
    workdir: str | None,
    ledger_file: str | None,
    budget_epsilon: float | None,
    budget_delta: float,
    assume_honest: int,
) -> None:
    """Start agent i as a Flower SuperNode; it serves runs until stopped (Ctrl-C).

    It keeps its own ledger and, with ``--budget-epsilon``, refuses what would exceed it
    (docs/deploy.md, "Each agent's own ledger").
    """
    from fedvote.flower.agent_budget import AgentBudget, default_ledger_path
    from fedvote.flower.files import load_agent_file

    file = load_agent_file(data_file, map_records=_as_dealt)  # its id, N, fingerprint: φ comes later
    if file.agent_id != agent_id:
        raise ConfigError("id", f"{data_file} holds agent {file.agent_id}, not agent {agent_id}")
    tls = _client_tls(insecure, root_certificates)
    check_superlink(superlink)  # an unresolvable host: one line now, not Flower's retries for 45 s
    budget = AgentBudget(
        path=Path(ledger_file or default_ledger_path(data_file)).resolve(),
        agent_id=agent_id,
        fingerprint=file.fingerprint,
        budget_epsilon=budget_epsilon,
        delta=budget_delta,
        assume_honest=assume_honest,
        num_agents=file.num_agents,  # h > N shares cannot exist: refused before the node starts
    )
    spent = budget.check_ready()  # a bad ledger file or another budget than the stored one: one line
    port = runtime_port if runtime_port is not None else free_port()
    data = str(Path(data_file).resolve())
    ledger_config = " ".join(f"{key}={_toml(value)}" for key, value in budget.node_config().items())
    executable = _flower_executable("flower-supernode")
    with flower_home(workdir, "fedvote-agent-") as home:
        cache = home / "mapped-records"  # φ(records), mapped once here, read by every message's process
        _map_records_once(data_file, cache, file)
        node = f"agent-id={agent_id} data={json.dumps(data)} records-cache={json.dumps(str(cache))}"
        command = [
            executable,
            *tls,
            "--superlink", superlink,
            "--port", str(port),
            "--node-config", f"{node} {ledger_config}",
        ]
        click.echo(f"fedvote: agent {agent_id} ({len(file.data)} records) joins {superlink}", err=True)
        limit = "no budget" if budget_epsilon is None else f"budget {budget_epsilon:g}"
        click.echo(f"fedvote: agent {agent_id}'s ledger {budget.path}: ε {spent:.4g}, {limit}", err=True)
        sys.exit(run_foreground(command, home))


def _as_dealt(input_map: Any, features: Any) -> Any:
    """``load_agent_file``'s mapping for a look at the file's metadata: the records as dealt."""
    return features


def _map_records_once(data_file: str, cache: Path, file: Any) -> None:
    """Map the agent's records through its file's φ now, into ``cache``: each message reads them there.

    ``file`` is the agent file read as dealt (its id, record count and input features).
    """
    from fedvote.flower.agent_cache import cached_agent_file

    if file.input_features != "none":
        click.echo(f"fedvote: agent {file.agent_id} maps its {len(file.data)} records through the "
                   f"{file.input_features} features once (kept on this node for every message)", err=True)
        cached_agent_file(data_file, cache)


# --- superlink -------------------------------------------------------------------------------


@deploy.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=DEFAULT_SUPERLINK_PORT, show_default=True, type=int, callback=_port,
              help="Port of the SuperLink (fleet, control and runtime APIs).")
@_tls_server_options
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Flower's home for the SuperLink (FLWR_HOME) [default: a temporary directory].")
def superlink(
    host: str,
    port: int,
    insecure: bool,
    ssl_certfile: str | None,
    ssl_keyfile: str | None,
    ssl_ca_certfile: str | None,
    workdir: str | None,
) -> None:
    """Start a Flower SuperLink that runs fedvote's ServerApp; serves until stopped (Ctrl-C)."""
    tls = _superlink_tls_flags(insecure, ssl_certfile, ssl_keyfile, ssl_ca_certfile)
    with flower_home(workdir, "fedvote-superlink-") as home:
        sys.exit(run_foreground(_superlink_command(host, port, tls), home))


def _superlink_command(host: str, port: int, tls: list[str]) -> list[str]:
    return [
        _flower_executable("flower-superlink"),
        *tls,
        "--host", host,
        "--port", str(port),
        # fedvote is installed on the node; never let Flower install an app's dependencies
        "--disable-runtime-dependency-installation",
    ]


# --- server ----------------------------------------------------------------------------------


@deploy.command()
@click.option("--config", "config_file", required=True, type=click.Path(dir_okay=False, exists=True),
              help="The run's config (run.json from fedvote deploy split).")
@click.option("--data", "server_file", required=True, type=click.Path(dir_okay=False, exists=True),
              help="The server's file (server.npz from fedvote deploy split).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), callback=refuse_empty_out,
              help="Directory for result.json.")
@click.option("--superlink", "superlink_address", default=None,
              help="Submit to this running SuperLink (host:port) instead of starting one here.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Without --superlink: address the SuperLink started here listens on.")
@click.option("--port", default=DEFAULT_SUPERLINK_PORT, show_default=True, type=int, callback=_port,
              help="Without --superlink: port of the SuperLink started here.")
@_tls_server_options
@click.option("--root-certificates", type=click.Path(dir_okay=False, exists=True), default=None,
              help="With --superlink over TLS: CA certificate (PEM) of the SuperLink's certificate.")
@click.option("--round-timeout", type=float, callback=_positive_finite, default=120.0, show_default=True,
              help="Seconds to wait for the agents' replies in each round; later ones have dropped out.")
@click.option("--train-timeout", type=float, callback=_positive_finite, default=600.0, show_default=True,
              help="Seconds to wait for the agents to train their teachers (or embed their records).")
@click.option("--connect-timeout", type=float, callback=_positive_finite, default=600.0, show_default=True,
              help="Seconds to wait for all agents to connect before the first round.")
@click.option("--record-votes", is_flag=True, help="Write every released vote sum into result.json.")
@click.option("--query-batch-size", type=int, default=0, callback=_not_negative,
              help="Queries per vote round (one SecAgg+ round each) [default: the method's].")
@_release_options
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Flower's home for the SuperLink and flwr (FLWR_HOME) [default: a temporary directory].")
def server(
    config_file: str,
    server_file: str,
    out_dir: str,
    superlink_address: str | None,
    host: str,
    port: int,
    insecure: bool,
    ssl_certfile: str | None,
    ssl_keyfile: str | None,
    ssl_ca_certfile: str | None,
    root_certificates: str | None,
    round_timeout: float,
    train_timeout: float,
    connect_timeout: float,
    record_votes: bool,
    query_batch_size: int,
    clip_sigmas: float,
    secure_noise: bool,
    workdir: str | None,
) -> None:
    """Run the config on the agents' nodes: start a SuperLink (or use one), submit, wait, report."""
    # Refuse a bad config, method or clipping range before anything starts.
    check_writable(out_dir)  # before Flower starts: the agents' releases are charged
    with _settings_named(config_file):
        check_plan(load_run_config(config_file), server_file, clip_sigmas, query_batch_size, secure_noise)
    overrides = {
        "config": str(Path(config_file).resolve()),
        "server-data": str(Path(server_file).resolve()),
        "out": str(Path(out_dir).resolve()),
        "round-timeout": float(round_timeout),
        "train-timeout": float(train_timeout),
        "connect-timeout": float(connect_timeout),
        "record-votes": bool(record_votes),
        "query-batch-size": int(query_batch_size),
        "clip-sigmas": float(clip_sigmas),
        "secure-noise": bool(secure_noise),
    }
    if superlink_address is None:  # start a SuperLink here; flwr reaches it with its CA
        tls = _superlink_tls_flags(insecure, ssl_certfile, ssl_keyfile, ssl_ca_certfile)
        local = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)  # all interfaces
        address = f"[{local}]:{port}" if ":" in local else f"{local}:{port}"
        ca_file = ssl_ca_certfile
    else:
        tls = _client_tls(insecure, root_certificates)
        check_superlink(superlink_address)
        address, ca_file = superlink_address, root_certificates
    connection: dict[str, Any] = {"address": address}
    if insecure:
        connection["insecure"] = True
    else:
        connection["root-certificates"] = str(Path(str(ca_file)).resolve())
    result_file = Path(out_dir) / "result.json"
    earlier = _stamp(result_file)  # an earlier result stays until the new one replaces it
    with flower_home(workdir, "fedvote-server-") as home:
        app_dir = _write_flwr_files(home, connection, overrides)
        command = _superlink_command(host, port, tls) if superlink_address is None else None
        with background(command, home) as link:
            if superlink_address is None:
                _wait_for_port(local, port, timeout=120.0, process=link, log=home / "superlink.log")
                click.echo(f"fedvote: SuperLink on {host}:{port} (log: {home / 'superlink.log'})", err=True)
            click.echo(f"fedvote: submitting the run to {connection['address']}", err=True)
            code = run_foreground(
                [
                    _flower_executable("flwr"), "run", str(app_dir), CONNECTION,
                    "--run-config", str(home / "run-config.toml"), "--stream",
                ],
                home,
            )
        if not _replaced(result_file, earlier):  # inside the block: a failure keeps Flower's home and its log
            where = (
                f"the SuperLink's log (with the ServerApp's output) is kept at {home / 'superlink.log'}"
                if superlink_address is None
                else f"see flwr run's output above and the log of the SuperLink at {superlink_address}"
            )
            failed = f"the run wrote no result (flwr run exited with {code}){_kept(earlier)}; {where}"
            raise LogKept(failed) if superlink_address is None else click.ClickException(failed)
    click.echo(deployment_summary(json.loads(result_file.read_text())))
    click.echo(f"wrote {result_file}", err=True)


def check_plan(
    config: RunConfig, server_file: str, clip_sigmas: float, query_batch_size: int, secure_noise: bool = True
) -> None:
    """Refuse here, before Flower starts, what the ServerApp would refuse before its first round.

    The method must be one Flower runs, the server file the config's federation's, the
    noise as ``secure_noise`` asks (:func:`fedvote.flower.files.deployed_config`), and the
    clipping range ``clip_sigmas`` tight enough on δ for the planned run
    (:func:`fedvote.flower.files.planned_method`).
    """
    from fedvote.flower.files import deployed_config, load_server_file, planned_method

    planned_method(
        deployed_config(config, secure_noise=secure_noise),
        load_server_file(server_file),
        clip_sigmas=clip_sigmas,
        query_batch_size=query_batch_size,
    )


def _stamp(path: Path) -> tuple[int, int, int, int] | None:
    """Identity of the file at ``path`` (device, inode, mtime, size), None when there is none.

    The ServerApp writes result.json atomically (a new file renamed over the old one), so a
    new result has another inode: comparing stamps tells a new result from an earlier one
    without removing the earlier one first (its budget was spent; it must survive a failed run).
    """
    try:
        status = path.stat()
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino, status.st_mtime_ns, status.st_size


def _replaced(path: Path, earlier: tuple[int, int, int, int] | None) -> bool:
    """Whether the run wrote a result at ``path``: a file is there and it is not the earlier one."""
    return path.is_file() and _stamp(path) != earlier


def _kept(earlier: tuple[int, int, int, int] | None) -> str:
    return "" if earlier is None else "; the earlier result.json in --out is kept as it was"


def deployment_summary(result: dict[str, Any]) -> str:
    """A few lines from a deployment's result.json: accuracy, ε per level, rounds, dropouts."""
    flower = result.get("flower", {})
    lines = [
        f"fedvote {result['method']} on Flower: {result['agents']} agents, {result['queries']} queries "
        f"released, σ = {result['sigma']:.4g}",
        f"  student accuracy      {result['accuracy']:.3f}   (test set)",
    ]
    if result.get("label_accuracy") is not None:
        lines.append(f"  pseudo-label accuracy {result['label_accuracy']:.3f}")
    privacy = result["privacy"]
    for level in ("agent", "instance"):
        epsilon = privacy[level]["epsilon"]
        text = "unbounded (not private)" if epsilon is None else f"{epsilon:.4f} at δ = {privacy['delta']:g}"
        lines.append(f"  {'ε (' + level + '-level)':<22}{text}")
    secagg = flower.get("secagg") or {}
    if secagg.get("epsilon_slack") is not None and secagg.get("delta_slack") is not None:
        lines.append(
            f"  {'SecAgg+ slack':<22}ε + {secagg['epsilon_slack']:.3g}, δ + {secagg['delta_slack']:.3g} "
            "(clipping and rounding; included above)"
        )
    lines.append(
        f"  vote rounds           {flower.get('released_rounds', 0)} released, "
        f"{flower.get('refused_rounds', 0)} refused (fewer than t responders)"
    )
    dropped = flower.get("dropped_agents") or []
    lines.append(f"  dropped agents        {', '.join(map(str, dropped)) if dropped else 'none'}")
    return "\n".join(lines)


def _write_flwr_files(home: Path, connection: dict[str, Any], overrides: dict[str, Any]) -> Path:
    """The Flower App project, the run-config overrides and the SuperLink connection in ``home``."""
    from fedvote.flower.app import write_app_project
    from fedvote.results import write_atomic

    app_dir = home / "app"
    write_app_project(app_dir, overwrite=True)  # fedvote's own, in its Flower home (--workdir reused)
    write_atomic(home / "run-config.toml", "".join(f"{k} = {_toml(v)}\n" for k, v in overrides.items()))
    lines = ["[superlink]", f'default = "{CONNECTION}"', "", f"[superlink.{CONNECTION}]"]
    lines += [f"{k} = {_toml(v)}" for k, v in connection.items()]
    write_atomic(home / "config.toml", "\n".join(lines) + "\n")
    return app_dir


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))  # a TOML basic string is a JSON string


# --- simulate -------------------------------------------------------------------------------


@deploy.command()
@click.option("--data-dir", required=True, type=click.Path(file_okay=False, exists=True),
              help="The directory fedvote deploy split wrote (run.json, server.npz, agent-<i>.npz).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), callback=refuse_empty_out,
              help="Directory for result.json.")
@click.option("--cpus-per-agent", type=click.IntRange(min=1), default=1, show_default=True,
              help="CPUs Ray reserves for each ClientApp (fewer: more agents at once).")
@_release_options
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Flower's home (FLWR_HOME) [default: a temporary directory].")
def simulate(
    data_dir: str,
    out_dir: str,
    cpus_per_agent: int,
    clip_sigmas: float,
    secure_noise: bool,
    workdir: str | None,
) -> None:
    """Run the same ServerApp/ClientApp under Flower's simulation engine (needs fedvote[simulation])."""
    check_writable(out_dir)  # before anything starts: the agents' releases are charged
    try:
        import ray  # noqa: F401
    except ImportError as error:
        message = 'Flower\'s simulation engine needs Ray: pip install "fedvote[simulation]"'
        raise _Missing(message) from error
    data = Path(data_dir).resolve()
    with _settings_named(data / "run.json", renamed={"config": "data_dir", "data": "data_dir"}):
        config = load_run_config(data / "run.json")
        check_plan(config, str(data / "server.npz"), clip_sigmas, 0, secure_noise)
    overrides = {
        "config": str(data / "run.json"),
        "server-data": str(data / "server.npz"),
        "out": str(Path(out_dir).resolve()),
        "agent-data": str(data / "agent-{partition-id}.npz"),
        "clip-sigmas": float(clip_sigmas),
        "secure-noise": bool(secure_noise),
    }
    result_file = Path(out_dir) / "result.json"
    earlier = _stamp(result_file)  # an earlier result stays until the new one replaces it
    port = free_port()
    with flower_home(workdir, "fedvote-simulation-") as home:
        app_dir = _write_flwr_files(home, {"address": f"127.0.0.1:{port}", "insecure": True}, overrides)
        simulation_link = [*_superlink_command("127.0.0.1", port, ["--insecure"]), "--simulation"]
        with background(simulation_link, home) as link:  # a SuperLink of our own, in simulation mode
            _wait_for_port("127.0.0.1", port, timeout=120.0, process=link, log=home / "superlink.log")
            code = run_foreground(
                [
                    _flower_executable("flwr"), "run", str(app_dir), CONNECTION,
                    "--run-config", str(home / "run-config.toml"),
                    "--federation-config",
                    f"num-supernodes={config.federation.agents} client-resources-num-cpus={cpus_per_agent}",
                    "--stream",
                ],
                home,
            )
        if not _replaced(result_file, earlier):  # inside the block: a failure keeps Flower's home and its log
            raise LogKept(
                f"the simulation wrote no result (flwr run exited with {code}){_kept(earlier)}; the "
                f"SuperLink's log (with the ServerApp's output) is kept at {home / 'superlink.log'}"
            )
    click.echo(deployment_summary(json.loads(result_file.read_text())))
    click.echo(f"wrote {result_file}", err=True)


# --- processes --------------------------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _flower_executable(name: str) -> str:
    """Flower's ``name`` beside this Python (the same environment), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise _Missing(FLOWER_MISSING)
    return found


def _wait_for_port(
    host: str,
    port: int,
    timeout: float,
    process: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
) -> None:
    """Wait until ``host:port`` accepts connections; fail early if ``process`` exits.

    Either failure names ``log`` (kept: :class:`LogKept`) when there is one.
    """
    kept = f" (its log is kept at {log})" if log is not None else ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log is not None and log.is_file() else ""
            raise LogKept(f"the SuperLink exited with status {process.returncode}{kept}:\n{tail}")
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.3)
    raise LogKept(f"the SuperLink did not start listening on {host}:{port} within {timeout:g} s{kept}")
