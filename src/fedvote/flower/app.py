"""fedvote as a Flower App: ``server_app`` drives a voting method, ``client_app`` is an agent.

The components of the Flower App project ``fedvote deploy`` writes (``flwr run``
builds it into a FAB; the code itself is the installed ``fedvote`` package on every
node)::

    [tool.flwr.app.components]
    serverapp = "fedvote.flower.app:server_app"
    clientapp = "fedvote.flower.app:client_app"

The ServerApp reads its run config (``[tool.flwr.app.config]``, overridden by
``flwr run --run-config``): ``config`` (run.json), ``server-data`` (server.npz), ``out``
(where result.json goes), ``round-timeout``, ``train-timeout``, ``connect-timeout``, ``clip-sigmas``,
``record-votes``, ``query-batch-size`` (queries per SecAgg+ round; 0: the method's
default). It runs PATE-FL or Private-kNN-FL through :class:`FlowerTransport`
exactly as ``fedvote run`` does through the local transport.

The ClientApp wraps :class:`fedvote.agents.Agent`. Flower handles every message in a
fresh process; what an agent must keep between messages — its teacher's weights, φ, the
state of a seeded noise stream — stays in the node-local ``context.state`` and never
leaves the node. The agent's data file comes from the SuperNode's node config
(``data="…/agent-0.npz"``) or, under the simulation engine, from the run config's
``agent-data`` template with ``{partition-id}`` filled in.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import FitRes, ndarrays_to_parameters
from flwr.compat.common import recorddict_compat as compat
from flwr.serverapp import Grid, ServerApp

from fedvote._meta import __version__
from fedvote.errors import ConfigError
from fedvote.flower.protocol import RECORD
from fedvote.models.threads import apply_host_policy

# Flower handles every message in a fresh process: this module imports only Flower and
# NumPy, so the three SecAgg+ stages that never reach fedvote's code start fast. torch
# and the rest of fedvote are imported inside the handlers that use them.

# Flower, not fedvote's command line, starts that process: set fedvote's host policy here, before
# torch loads OpenMP (OpenMP threads sleep while they wait; torch takes the CPUs others leave
# idle). Without it, mapping 20,000 records through φ on a busy 2-core host took 105 s of CPU
# (OpenMP spinning) against 17 s. Variables the user (or ``fedvote deploy agent``) set win.
if "torch" not in sys.modules:
    apply_host_policy()
if TYPE_CHECKING:
    from fedvote.agents.agent import Agent
    from fedvote.flower.agent_budget import AgentBudget
    from fedvote.flower.files import AgentFile
    from fedvote.flower.transport import FlowerTransport, RunFailed
    from fedvote.results import RunResult



# The run config every fedvote Flower App declares (``[tool.flwr.app.config]``).
RUN_CONFIG_DEFAULTS: dict[str, str | float | bool] = {
    "config": "",
    "server-data": "",
    "out": "",
    "agent-data": "",
    "round-timeout": 120.0,
    "train-timeout": 600.0,
    "connect-timeout": 300.0,
    "clip-sigmas": 20.0,  # fedvote.flower.secagg.DEFAULT_CLIP_SIGMAS
    "record-votes": False,
    "query-batch-size": 0,
    "secure-noise": True,  # fedvote deploy's default: exact discrete Gaussian shares, integer sums
}

APP_PYPROJECT = """\
# A Flower App whose code is the installed fedvote package (pip install "fedvote[deploy]"
# on the SuperLink's and every SuperNode's machine). `flwr run DIR CONNECTION` builds it.
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fedvote-app"
version = "{version}"
description = "fedvote PATE-FL and Private-kNN-FL on Flower, vote sums through SecAgg+"
license = "Apache-2.0"
dependencies = []

[tool.flwr.app]
publisher = "fedvote"

[tool.flwr.app.components]
serverapp = "fedvote.flower.app:server_app"
clientapp = "fedvote.flower.app:client_app"

[tool.flwr.app.config]
{config}
"""


def app_pyproject() -> str:
    """The pyproject.toml of fedvote's Flower App (components and run-config defaults)."""
    lines = []
    for key, value in RUN_CONFIG_DEFAULTS.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, float):
            text = repr(value)
        else:
            text = json.dumps(value)
        lines.append(f"{key} = {text}")
    return APP_PYPROJECT.format(version=__version__, config="\n".join(lines))


def write_app_project(directory: str | Path, *, overwrite: bool = False) -> Path:
    """Write the Flower App project (one pyproject.toml) into ``directory``; returns the file.

    An empty ``directory`` (which would be the current one) and, unless ``overwrite`` (fedvote's
    own project in its Flower home), an existing ``pyproject.toml`` there — another project's,
    perhaps — are refused (:class:`ConfigError` naming ``directory``), nothing written.
    """
    from fedvote.results import write_atomic

    if not str(directory).strip():
        raise ConfigError("directory", "is empty; name the directory for the project (. for the current one)")
    path = Path(directory)
    target = path / "pyproject.toml"
    if not overwrite and (target.exists() or target.is_symlink()):
        message = f"{target} exists; fedvote will not overwrite it: name another directory"
        raise ConfigError("directory", message)
    path.mkdir(parents=True, exist_ok=True)
    return write_atomic(target, app_pyproject())


# --- ServerApp ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerSettings:
    """The ServerApp's run config, checked."""

    config: Path
    server_data: Path
    out: Path
    round_timeout: float
    train_timeout: float
    connect_timeout: float
    clip_sigmas: float
    record_votes: bool
    query_batch_size: int
    secure_noise: bool = True

    @classmethod
    def from_run_config(cls, run_config: dict[str, Any]) -> ServerSettings:
        """Read the keys of :data:`RUN_CONFIG_DEFAULTS`; paths must be given."""
        values = {**RUN_CONFIG_DEFAULTS, **run_config}
        for key in ("config", "server-data", "out"):
            if not values[key]:
                raise ConfigError(key, "the ServerApp needs it in its run config (flwr run --run-config)")
        return cls(
            config=Path(str(values["config"])),
            server_data=Path(str(values["server-data"])),
            out=Path(str(values["out"])),
            round_timeout=float(values["round-timeout"]),
            train_timeout=float(values["train-timeout"]),
            connect_timeout=float(values["connect-timeout"]),
            clip_sigmas=float(values["clip-sigmas"]),
            record_votes=bool(values["record-votes"]),
            query_batch_size=int(values["query-batch-size"]),
            secure_noise=bool(values["secure-noise"]),
        )


server_app = ServerApp()


@server_app.main()
def _serve(grid: Grid, context: Context) -> None:
    from fedvote.flower.transport import RegistrationRefused, RunFailed
    from fedvote.results import fallback_message, write_or_fallback, write_result

    settings = ServerSettings.from_run_config(dict(context.run_config))
    try:
        result = run_on_flower(settings, grid, context)
    except RegistrationRefused as refusal:  # before anything was trained, released or charged
        _say(f"error: {refusal}; nothing was trained, released or charged")
        return
    except RunFailed as ended:  # an expected end without a result: one line, no traceback
        _say(f"error: {failure_line(ended, simulation=bool(context.run_config.get('agent-data')))}")
        return
    # The releases are charged: a result that cannot go to --out goes beside the ledger or to /tmp.
    ledger = result.config.get("privacy", {}).get("ledger")
    path, failure = write_or_fallback(lambda directory: write_result(result, directory), settings.out, ledger)
    if failure is None:
        _say(f"wrote {path}")
    else:
        _say(f"error: {fallback_message('--out', settings.out, failure, path)}")


def _say(line: str) -> None:
    print(f"fedvote: {line}", flush=True)


# What to do about each RunFailed kind, on a deployment (fedvote deploy server, or flwr run by hand).
_REMEDIES = {
    "connect": "start every agent (fedvote deploy agent --id I --data agent-I.npz --superlink HOST:PORT), "
    "check that each one's --superlink reaches this SuperLink with the server's TLS setting, or give them "
    "longer (fedvote deploy server --connect-timeout)",
    "silent": "see the agents' terminals for why; on a slow machine give them longer "
    "(fedvote deploy server --train-timeout)",
    "unreleased": "keep the agents running for the whole run, give a slow machine longer "
    "(fedvote deploy server --round-timeout), or lower privacy.min_responders (t) in the run's config",
}
# The same under Flower's simulation engine (fedvote deploy simulate), whose agents are virtual.
_SIMULATION_REMEDIES = {
    "connect": "the simulation engine did not start every virtual agent: see the SuperLink's log "
    "(Ray may lack the CPUs: lower fedvote deploy simulate --cpus-per-agent)",
    "silent": "see the SuperLink's log for the agents' errors",
    "unreleased": "see the SuperLink's log for the agents' errors, or lower privacy.min_responders (t) "
    "in the split's run.json",
}


def failure_line(failure: RunFailed, *, simulation: bool) -> str:
    """One line for a run that failed as deployments can: the cause, what to do, what was spent."""
    remedy = (_SIMULATION_REMEDIES if simulation else _REMEDIES)[failure.kind]
    if failure.kind == "unreleased":
        spent = "nothing was released or charged to the server's ledger (the agents' own ledgers keep theirs)"
    elif failure.trained:
        spent = "nothing was released or charged"
    else:
        spent = "nothing was trained, released or charged"
    return f"{failure.cause}: {remedy}; {spent}"


def run_on_flower(settings: ServerSettings, grid: Grid, context: Context) -> RunResult:
    """One voting run with the agents on Flower nodes, through the runner's one lifecycle.

    The server holds only the public pool, the test set and the agents' record counts:
    the method is planned from them (:func:`~fedvote.flower.files.planned_method`, which
    also checks the SecAgg+ clipping range), executed against a
    :class:`~fedvote.flower.transport.FlowerTransport` with every release charged first
    (:func:`fedvote.runner.execute`) and measured (:func:`fedvote.runner.measure`); the
    transport adds its own account of what it released (SecAgg+'s slack,
    :meth:`~fedvote.flower.transport.FlowerTransport.stated_privacy`).
    """
    from fedvote.config import load_run_config
    from fedvote.flower.files import deployed_config, load_server_file, planned_method
    from fedvote.flower.transport import FlowerTransport
    from fedvote.privacy.run_ledger import federation_fingerprint, ledger_details, open_ledger
    from fedvote.runner import measure

    started = time.perf_counter()
    config = deployed_config(load_run_config(settings.config), secure_noise=settings.secure_noise)
    files = load_server_file(settings.server_data)
    fingerprint = federation_fingerprint(config)
    if files.fingerprint != fingerprint:
        raise ConfigError("server-data", f"{settings.server_data} is another federation's than config's")
    server = files.server
    num_agents = config.federation.agents
    method = planned_method(
        config, files, clip_sigmas=settings.clip_sigmas, query_batch_size=settings.query_batch_size
    )
    timings = {"calibration_s": time.perf_counter() - started}
    transport = FlowerTransport(
        grid,
        context,
        num_agents=num_agents,
        num_classes=server.num_classes,
        fingerprint=fingerprint,
        input_features=files.input_features,
        round_timeout=settings.round_timeout,
        train_timeout=settings.train_timeout,
        connect_timeout=settings.connect_timeout,
        clip_sigmas=settings.clip_sigmas,
        record_votes=settings.record_votes,
        report=_say,
        secure_noise=config.privacy.secure_noise,
    )
    _say(f"{method.name}: {num_agents} agents, σ = {method.sigma:.4g}, t = {method.min_responders}")
    # the agents' records, as dealt: their key and their hashes (the budget binds by record)
    with open_ledger(config, content_key=files.ledger_key, record_hashes=files.record_hashes) as ledger:
        mark = time.perf_counter()
        outcome = _executed(method, server, transport, ledger)
        timings["method_s"] = time.perf_counter() - mark
        details = ledger_details(ledger)
    result = measure(
        config,
        method,
        outcome,
        transport=transport,
        ledger=ledger,
        server=server,
        public_labels=files.public_labels,
        timings=timings,
        started=started,
        details=details,
    )
    released = [r for r in transport.rounds if r.released]
    _say(
        f"done: {len(released)} of {len(transport.rounds)} vote rounds released, "
        f"dropped agents {transport.dropped_agents or 'none'}"
    )
    return result


def _executed(method: Any, server: Any, transport: FlowerTransport, ledger: Any) -> Any:
    """:func:`fedvote.runner.execute`; a run whose every vote round was refused ends as :class:`RunFailed`.

    Told apart by the transport's rounds (all of them refused for fewer than t responders), not
    by the method's message; any other error propagates with its traceback.
    """
    from fedvote.flower.transport import RunFailed
    from fedvote.runner import execute

    try:
        return execute(method, server, transport, ledger)
    except RuntimeError as error:
        rounds = transport.rounds
        if isinstance(error, RunFailed) or not rounds or any(entry.released for entry in rounds):
            raise
        t = method.min_responders
        cause = (
            f"no vote round was released: all {len(rounds)} had fewer than t = {t} agents' votes "
            f"(the last {rounds[-1].responders})"
        )
        raise RunFailed("unreleased", cause, trained=True) from error


# --- ClientApp ---------------------------------------------------------------------------

client_app = ClientApp()

if TYPE_CHECKING:
    from fedvote.agents.knn_votes import KnnVoter

_AGENT_STATE = "fedvote.agent"  # ConfigRecord: training config, φ, a seeded noise stream's state
_TEACHER_STATE = "fedvote.teacher"  # ArrayRecord: the teacher's weights


@client_app.train("register")
def _register(message: Message, context: Context) -> Message:
    """Before anything is trained: which agent this node runs (id, records, fingerprint, φ kind)."""
    return _reply(message, _agent_file(context))


@client_app.train("teacher")
def _train_teacher(message: Message, context: Context) -> Message:
    """Algorithm 1, line 2: train f_i on the private records; keep it on this node."""
    from fedvote.models.training import TrainingConfig

    file = _agent_file(context)
    agent, _ = _agent(file, context)
    training = str(message.content.config_records[RECORD]["training"])
    agent.train_teacher(TrainingConfig(**json.loads(training)))
    context.state.array_records[_TEACHER_STATE] = ArrayRecord(agent.teacher_checkpoint())
    _node_state(context)["training"] = training
    return _reply(message, file)


@client_app.train("knn")
def _prepare_knn(message: Message, context: Context) -> Message:
    """Algorithm 2: take φ, embed the private records, answer with k (public metadata)."""
    file = _agent_file(context)
    request = message.content.config_records[RECORD]
    state = _node_state(context)
    for key in ("phi", "normalize", "k", "k-fraction"):
        state[f"knn-{key}"] = request[key]
    voter = _knn_voter(_agent(file, context)[0], file, state)
    return _reply(message, file, k=voter.k)


@client_app.train(mods=[secaggplus_mod])
def _vote(message: Message, context: Context) -> Message:
    """The agent's vote on the queries plus its noise share; ``secaggplus_mod`` masks it."""
    from fedvote.agents import teacher_votes
    from fedvote.flower.transport import status_ok
    from fedvote.models.training import TrainingConfig
    from fedvote.models.zoo import build_model

    instructions = compat.recorddict_to_fitins(message.content, keep_input=True)
    kind = str(instructions.config["kind"])
    queries = np.frombuffer(bytes(instructions.config["queries"]), dtype=np.int64)  # type: ignore[arg-type]
    noise_std = float(instructions.config["noise-std"])
    secure = bool(instructions.config.get("secure-noise", False))
    stated_t = instructions.config.get("min-responders")  # None from a server that does not state t
    min_responders = None if stated_t is None else int(stated_t)  # type: ignore[arg-type]
    file = _agent_file(context)
    agent, rng = _agent(file, context, secure=secure)
    state = _node_state(context)
    budget = _agent_budget(context, file)
    if kind == "pate":
        # charged to the agent's own ledger first
        _admit(budget, kind, queries, noise_std, secure, min_responders=min_responders)
        training = TrainingConfig(**json.loads(str(state["training"])))
        teacher = build_model(
            training.model, tuple(file.data.features.shape[1:]), file.num_classes
        )
        teacher.load_state_dict(context.state.array_records[_TEACHER_STATE].to_torch_state_dict())
        agent.install_teacher(teacher)
        votes = teacher_votes.noisy_votes(agent, queries, noise_std)  # (Q, C), through the agent's exit
    elif kind == "knn":
        voter = _knn_voter(agent, file, state)
        _admit(budget, kind, queries, noise_std, secure, k=voter.k, min_responders=min_responders)
        votes = voter.noisy_votes(queries, noise_std)  # (Q, C), likewise
    else:
        raise ValueError(f"unknown vote kind {kind!r}")
    if file.noise_seed is not None and not secure:  # a seeded stream continues in the next message
        state[_RNG_KEY] = json.dumps(rng.bit_generator.state)
    result = FitRes(status_ok(), ndarrays_to_parameters([votes]), num_examples=1, metrics={})
    return Message(compat.fitres_to_recorddict(result, keep_input=False), reply_to=message)


def _agent_budget(context: Context, file: AgentFile) -> AgentBudget | None:
    """The agent's own ledger named in its node config (``fedvote deploy agent``), else None."""
    from fedvote.flower.agent_budget import AgentBudget

    return AgentBudget.from_node_config(context.node_config, file.agent_id, file.fingerprint, file.num_agents)


def _admit(
    budget: AgentBudget | None,
    kind: str,
    queries: np.ndarray,
    noise_std: float,
    secure: bool,
    k: int | None = None,
    min_responders: int | None = None,
) -> None:
    """Charge a vote request to the agent's own ledger before anything is computed, or refuse it.

    The refusal (:class:`~fedvote.flower.agent_budget.AgentRefusal`) leaves as the ClientApp's
    error reply: the server's SecAgg+ round counts this agent out (its dropout path).
    """
    if budget is None:  # no ledger named in the node config (a simulation, a bare Flower node)
        return
    from fedvote.flower.agent_budget import AgentRefusal

    try:
        events = budget.request_events(
            kind, int(queries.shape[0]), noise_std, secure=secure, k=k, min_responders=min_responders
        )
        spent = budget.admit(events, what=f"a vote request of {queries.shape[0]} queries")
    except AgentRefusal as refusal:
        print(f"fedvote: {refusal}", file=sys.stderr, flush=True)
        raise
    answered = f"fedvote: agent {budget.agent_id} answers {queries.shape[0]} queries; ledger ε {spent:.4g}"
    print(answered, file=sys.stderr, flush=True)


def _agent_file(context: Context) -> AgentFile:
    """The node's agent file: node config ``data``, else the run config's ``agent-data``.

    Its records are mapped through its φ once per file content and reused by later messages
    (:mod:`fedvote.flower.agent_cache`; on disk in the node config's ``records-cache``, if any).
    """
    from fedvote.flower.agent_cache import cached_agent_file

    path = context.node_config.get("data")
    if not path:
        template = str(context.run_config.get("agent-data", ""))
        if not template:
            raise ConfigError("data", "the SuperNode needs --node-config 'data=\"PATH\"' (its agent file)")
        path = template.replace("{partition-id}", str(context.node_config.get("partition-id", "")))
    cache = context.node_config.get("records-cache")
    return cached_agent_file(str(path), str(cache) if cache else None)


_RNG_KEY = "noise-state"


def _agent(file: AgentFile, context: Context, *, secure: bool = False) -> tuple[Agent, np.random.Generator]:
    """The :class:`Agent` of ``file`` and its noise generator: OS entropy, or its seeded stream.

    ``secure`` (the server's vote message asks for it): exact discrete Gaussian shares from
    the OS CSPRNG and a generator seeded by ``os.urandom``, whatever seed the file holds.
    """
    from fedvote.agents.agent import Agent
    from fedvote.aggregation.secure_noise import csprng_seeded_generator
    from fedvote.transport.base import agent_noise_seeds

    if secure:
        rng = csprng_seeded_generator()
    elif file.noise_seed is None:
        rng = np.random.default_rng()  # deployment: fresh OS entropy in every process
    else:  # reproducible simulation: continue the stream where the last message left it
        rng = np.random.default_rng(agent_noise_seeds(file.noise_seed, file.agent_id))
        saved = _node_state(context).get(_RNG_KEY)
        if saved:
            rng.bit_generator.state = json.loads(str(saved))
    agent = Agent(
        agent_id=file.agent_id,
        data=file.data,
        public_features=file.public_features,
        num_classes=file.num_classes,
        noise_rng=rng,
        seed=file.seed,
        secure_noise=secure,
    )
    return agent, rng


def _knn_voter(agent: Agent, file: AgentFile, state: ConfigRecord) -> KnnVoter:
    """The agent's kNN state from the φ and k this node keeps: its records embedded, its k fixed."""
    from fedvote.agents.knn_votes import KnnVoter
    from fedvote.flower.transport import load_extractor

    extractor = load_extractor(
        bytes(state["knn-phi"]),  # type: ignore[arg-type]
        file.public_features,
        normalize=bool(state["knn-normalize"]),
    )
    k = int(state["knn-k"])  # type: ignore[arg-type]
    fraction = float(state["knn-k-fraction"])  # type: ignore[arg-type]
    return KnnVoter.prepare(agent, extractor, k=None if k < 0 else k, k_fraction=fraction)


def _node_state(context: Context) -> ConfigRecord:
    if _AGENT_STATE not in context.state.config_records:
        context.state.config_records[_AGENT_STATE] = ConfigRecord({})
    return context.state.config_records[_AGENT_STATE]


def _reply(message: Message, file: AgentFile, *, k: int | None = None) -> Message:
    answer: dict[str, int | str] = {
        "agent-id": file.agent_id,
        "records": len(file.data),
        "fingerprint": file.fingerprint,
        "input-features": file.input_features,
    }
    if k is not None:
        answer["k"] = int(k)
    return Message(RecordDict({RECORD: ConfigRecord(answer)}), reply_to=message)  # type: ignore[arg-type]

