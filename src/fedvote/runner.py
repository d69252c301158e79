"""One run lifecycle: plan → execute → measure, used by run, compare, sweep, label and the Flower server.

* :func:`build_config` — settings (``fedvote run``'s flags, or :func:`fedvote.run`'s
  keywords, by the same names) turned into a validated :class:`~fedvote.config.RunConfig`:
  one path, one set of defaults (:data:`FEDERATION_SETTINGS`, :data:`RUN_SETTINGS`) and
  one set of refusals for the command line and the Python API;
* :func:`plan` — the method from the config and the federation's *public* metadata
  (σ given or calibrated); everything is validated before anything is trained or charged;
* :func:`execute` — the transport's capabilities checked against the method's needs, the
  plan checked against the ledger's budget, then the method run, every release charged
  to the ledger before it happens;
* :func:`measure` — the :class:`~fedvote.results.RunResult`: accuracy, the ledger's ε at
  both levels, the method's typed privacy statements, the transport's own account of
  what it released, simulation diagnostics apart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import numbers
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedvote import __version__
from fedvote.analysis import collect_analysis, diagnostic_test_sample, with_data_dependent_epsilon
from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.data.datasets import DATA_ENV, has_official_test_split, load_dataset, load_splits
from fedvote.data.federation import (
    Federation,
    PublicMetadata,
    ServerData,
    build_domain_federation,
    build_federation,
    check_distinct_datasets,
)
from fedvote.data.framing import FRAMINGS
from fedvote.data.partition import PARTITION_SCHEMES, PartitionSpec
from fedvote.data.validation import provide_validation
from fedvote.errors import ConfigError
from fedvote.methods import METHODS, Method, MethodOutcome, check_method, option_names
from fedvote.methods.options import OptionSpec, option_specs
from fedvote.models.student import STUDENT_TRAINING
from fedvote.models.training import TrainingConfig, predict_labels
from fedvote.models.zoo import MODEL_NAMES
from fedvote.privacy.accountant import ACCOUNTANTS, PLDTooLarge, epsilon_for, pld_discretization
from fedvote.privacy.calibrate import calibrate_sigma
from fedvote.privacy.events import LevelEvents
from fedvote.privacy.ledger import LedgerSession, PersistentLedger, PrivacyLedger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.results import LevelPrivacy, PrivacyReport, PrivacyStatement, RunResult, finite_or_none
from fedvote.transport.base import Transport
from fedvote.transport.capabilities import SimulationDiagnostics, check_capabilities
from fedvote.transport.local import LocalTransport

# Queries asked when the user gives none: the whole pool, up to this many. Fewer
# queries buy less noise per query (σ grows as √Q at fixed ε); 100 suits teachers
# trained on a few dozen records each (digits, 50 agents). Raise it when teachers agree
# more (the paper labels 500 USPS points with 200 agents of 1000-3000 records).
DEFAULT_MAX_QUERIES = 100

ADJACENCY = {
    "agent": "zero-out: one agent's contribution (votes or update) replaced by zeros; its noise share stays",
    "instance": "replace-one: one record of one agent replaced",
}


def make_federation(config: RunConfig) -> Federation:
    """Load the data and split it as ``config.federation`` says.

    Three scenarios, by what the data offers:

    * one dataset without an official test split (digits, npz, csv): a random
      ``public_fraction`` forms the pool, ``test_fraction`` the test set, agents split
      the rest;
    * one dataset with an official test split (MNIST, USPS): agents split the training
      split; ``public_fraction`` of the test split (default 0.3, as the voting paper)
      forms the pool, the rest is the test set;
    * ``target`` given (domain shift, e.g. MNIST → USPS): agents split the source
      dataset(s) (``dataset`` may name several, comma-separated); the pool is
      ``public_fraction`` (default all) of the target's training split and the test set
      is the target's test split (or ``test_fraction`` of the target without one).

    A target that is one of the sources, or a source named twice, is refused before
    anything is loaded (:func:`check_distinct_datasets`).
    """
    fed = config.federation
    names = [name.strip() for name in fed.dataset.split(",") if name.strip()]
    target_name = fed.target.strip() if fed.target is not None else None
    check_distinct_datasets(names, target_name, fed.data_dir)
    image_size = (fed.image_size, fed.image_size) if fed.image_size is not None else None
    if target_name is None and len(names) == 1 and not has_official_test_split(names[0]):
        dataset = load_dataset(names[0], fed.data_dir, label_column=fed.label_column)
        if image_size is not None:
            dataset = dataset.resized(image_size)
        return build_federation(
            dataset,
            num_agents=fed.agents,
            partition=fed.partition,
            public_fraction=fed.public_fraction if fed.public_fraction is not None else 0.15,
            test_fraction=fed.test_fraction,
            seed=config.seed,
        )
    if target_name is None:
        if len(names) > 1:
            raise ConfigError("target", "several source datasets need a --target domain")
        splits = load_splits(names[0], fed.data_dir, label_column=fed.label_column)
        assert splits.test is not None
        pool_share = fed.public_fraction if fed.public_fraction is not None else 0.3
        if not 0.0 < pool_share < 1.0:
            raise ConfigError("public_fraction", f"must lie in (0, 1), got {pool_share}")
        return build_domain_federation(
            [splits.train],
            splits.test,
            num_agents=fed.agents,
            partition=fed.partition,
            test_fraction=1.0 - pool_share,
            image_size=image_size,
            seed=config.seed,
        )
    sources = [load_splits(name, fed.data_dir, label_column=fed.label_column).train for name in names]
    target = load_splits(target_name, fed.data_dir, label_column=fed.label_column)
    return build_domain_federation(
        sources,
        target.train,
        num_agents=fed.agents,
        partition=fed.partition,
        target_test=target.test,
        public_fraction=fed.public_fraction if fed.public_fraction is not None else 1.0,
        test_fraction=None if target.test is not None else fed.test_fraction,
        image_size=image_size,
        framing=fed.framing,
        seed=config.seed,
    )


def prepare_public(config: RunConfig, federation: Federation) -> Federation:
    """``federation`` with what the configured method asked of the public side (a labelled validation set).

    Methods never receive the federation: they declare their needs
    (:meth:`~fedvote.methods.base.Method.validation_need`) and the runner provides them.
    Idempotent.
    """
    need = check_method(config).validation_need(config)
    return provide_validation(federation, need, config.seed)


def plan(config: RunConfig, public: PublicMetadata) -> Method:
    """The configured method, planned from public metadata alone: σ given, or calibrated to the target ε.

    Everything is refused here, before anything is trained or charged: an unknown method
    or option, Q beyond the pool, t beyond N, a target ε the method cannot meet. A server
    that never holds the agents' data (a Flower deployment) plans from the same metadata.
    """
    queries = config.queries if config.queries is not None else min(public.pool_size, DEFAULT_MAX_QUERIES)
    if queries > public.pool_size:
        raise ConfigError("queries", f"{queries} queries asked but the public pool holds {public.pool_size}")
    privacy = config.privacy
    min_responders = privacy.min_responders or public.num_agents
    if min_responders > public.num_agents:
        raise ConfigError(
            "min_responders", f"t = {min_responders} exceeds the {public.num_agents} agents"
        )
    method = check_method(config).from_config(
        config,
        sigma=privacy.sigma if privacy.sigma is not None else 1.0,
        queries=queries,
        min_responders=min_responders,
    ).with_public(public)
    level = calibration_level(config, method)
    target = privacy.target_epsilon if level is not None else None
    if target is not None and level is not None:
        sigma = calibrate_sigma(
            lambda s: method.with_sigma(s).planned_events().at(level),
            target,
            privacy.delta,
            privacy.accountant,
        )
        method = method.with_sigma(sigma)
    _check_accountable(method, config)
    return method


def _check_accountable(method: Method, config: RunConfig) -> None:
    """Refuse, before anything is trained, a σ too small for the PLD to account a level's releases.

    Such a run would otherwise train, then fail to report its ε; its ε is far beyond any
    useful budget anyway (:class:`~fedvote.privacy.accountant.PLDTooLarge`).
    """
    if config.privacy.accountant != "pld":
        return
    events = method.planned_events()
    for level in ("agent", "instance"):
        try:
            pld_discretization(events.at(level))
        except PLDTooLarge as error:
            flag = "sigma" if config.privacy.sigma is not None else "epsilon"
            raise ConfigError(flag, f"at σ = {method.sigma:.4g}, {level} level: {error.detail}") from error


def make_method(config: RunConfig, federation: Federation) -> Method:
    """:func:`plan` from a (prepared) federation's public metadata."""
    return plan(config, federation.public_metadata())


def calibration_level(config: RunConfig, method: Method) -> str | None:
    """The level ``--epsilon`` targets: the user's choice, else the method's own.

    None for a method with nothing to calibrate (FedAvg), which refuses an explicit ε.
    """
    if method.calibration_level is None:
        if config.privacy.epsilon is not None:
            raise ConfigError("epsilon", f"{method.name} is not private; drop --epsilon (or use --sigma 0)")
        return None
    return config.privacy.calibrate_level or method.calibration_level


def run(
    config: RunConfig,
    progress: Progress = NO_PROGRESS,
    federation: Federation | None = None,
    transport: Transport | None = None,
    ledger: PrivacyLedger | None = None,
) -> RunResult:
    """One run of ``config``, simulated in process: :func:`plan`, :func:`execute`, :func:`measure`.

    ``federation`` reuses an already built federation (it must be the one ``config``
    describes; :mod:`fedvote.compare` runs several methods on one). ``transport`` runs
    the agents somewhere else than a fresh in-process :class:`LocalTransport` (a sweep's
    :class:`~fedvote.transport.reused_votes.ReusedVotesTransport`); it must hold
    ``federation``'s agents. ``ledger`` charges the run to a ledger its caller holds (a
    :class:`~fedvote.privacy.ledger.LedgerSession` of a compare's or sweep's shared
    ledger, checked against the budget up front); else the run opens its own
    (:func:`open_ledger`) on the federation's content key.
    """
    started = time.perf_counter()
    timings: dict[str, float] = {}

    # The method and its options, refused (by name) before any data is loaded or anything trained.
    check_method(config)
    if federation is None:
        federation = make_federation(config)
    records = federation  # the ledger's key: these agents' records
    federation = prepare_public(config, federation)  # what the method asked of the public side
    timings["data_s"] = time.perf_counter() - started

    mark = time.perf_counter()
    method = plan(config, federation.public_metadata())
    timings["calibration_s"] = time.perf_counter() - mark

    if transport is None:
        transport = LocalTransport(
            federation,
            seed=config.seed,
            noise_seed=config.privacy.noise_seed,
            secure_sum=config.privacy.secure_sum,
        )
    check_capabilities(method, transport)  # before the ledger is opened, anything trained or charged
    own_ledger = ledger is None
    if ledger is None:
        ledger = open_ledger(config, records)
    try:
        mark = time.perf_counter()
        outcome = execute(method, federation.server_data(), transport, ledger, progress)
        timings["method_s"] = time.perf_counter() - mark
        ledger_details = _ledger_details(ledger)
    finally:
        if own_ledger and isinstance(ledger, PersistentLedger):
            ledger.close()
    return measure(
        config,
        method,
        outcome,
        transport=transport,
        ledger=ledger,
        server=federation.server_data(),
        federation=federation,
        timings=timings,
        started=started,
        details=ledger_details,
    )


def execute(
    method: Method,
    server: ServerData,
    transport: Transport,
    ledger: PrivacyLedger,
    progress: Progress = NO_PROGRESS,
) -> MethodOutcome:
    """Carry ``method`` out against ``transport``, every release charged to ``ledger`` before it happens.

    Refused before anything is trained or charged: a transport that cannot serve what the
    method requires (:func:`~fedvote.transport.capabilities.check_capabilities`), and a
    plan that would overrun the ledger's budget.
    """
    check_capabilities(method, transport)
    check_budget(ledger, [method.planned_events()])
    return method.run(server, transport, ledger, progress)


def measure(
    config: RunConfig,
    method: Method,
    outcome: MethodOutcome,
    *,
    transport: Transport,
    ledger: PrivacyLedger,
    server: ServerData,
    federation: Federation | None = None,
    public_labels: np.ndarray | None = None,
    timings: dict[str, float] | None = None,
    started: float | None = None,
    details: dict[str, Any] | None = None,
) -> RunResult:
    """The :class:`RunResult` of an executed method: accuracy, privacy at both levels, diagnostics.

    ``federation`` is the simulated federation (None on a server that never holds the
    agents' data): only then are simulation diagnostics computed, after the method has
    finished, so none of its decisions can depend on them; the teachers' accuracies are on a
    seeded sample of at most :data:`~fedvote.analysis.DIAGNOSTIC_TEST_SAMPLE` test points
    (``diagnostics["teacher_accuracy_test_points"]``), the student's on the whole test set.
    ``public_labels`` are the pool's true labels where the server has them without a
    federation (a Flower test deployment).
    The privacy report is the ledger's, then the method's typed statements
    (:func:`with_statements`), then the transport's own account of what it released
    (:meth:`~fedvote.transport.base.Transport.stated_privacy`).
    """
    timings = dict(timings or {})
    mark = time.perf_counter()
    test = server.test
    accuracy = float(np.mean(predict_labels(outcome.student, test.features) == test.labels))
    if federation is not None:
        public_labels = federation.public.labels
    label_accuracy: float | None = None
    if public_labels is not None and outcome.query_indices.size:
        label_accuracy = float(np.mean(outcome.pseudo_labels == public_labels[outcome.query_indices]))
    diagnostics: dict[str, Any] = dict(outcome.diagnostics)
    teacher_accuracies: np.ndarray | None = None  # (N,)
    teacher_test_points: int | None = None
    if federation is not None and outcome.query_indices.size and isinstance(transport, SimulationDiagnostics):
        # On a seeded sample of at most DIAGNOSTIC_TEST_SAMPLE test points, stated beside
        # the figure (the student's accuracy above is on the whole test set).
        sample = diagnostic_test_sample(test, config.seed)
        teacher_accuracies = transport.teacher_accuracies(sample)
        teacher_test_points = len(sample)
        diagnostics["teacher_accuracy"] = float(np.mean(teacher_accuracies))
        diagnostics["teacher_accuracy_test_points"] = teacher_test_points
    level = calibration_level(config, method)
    privacy = privacy_report(
        config,
        ledger,
        instance_bound=method.instance_bound,
        instance_adjacency=method.instance_adjacency,
        calibrated=(config.privacy.target_epsilon, level) if level is not None else None,
    )
    analysis = None
    if federation is not None:
        analysis = collect_analysis(federation, transport, outcome, teacher_accuracies, teacher_test_points)
        privacy = with_data_dependent_epsilon(privacy, ledger, analysis, float(method.sigma))
    privacy = with_statements(privacy, outcome.statements)
    privacy, transport_details = transport.stated_privacy(privacy)
    timings["evaluation_s"] = time.perf_counter() - mark
    timings["total_s"] = time.perf_counter() - (mark if started is None else started)
    return RunResult(
        method=config.method,
        dataset=config.federation.dataset,
        agents=transport.num_agents,
        seed=config.seed,
        accuracy=accuracy,
        label_accuracy=label_accuracy,
        queries=int(outcome.query_indices.shape[0]),
        sigma=float(method.sigma),
        privacy=privacy,
        communication=transport.communication.as_dict(),
        timings={k: round(v, 4) for k, v in timings.items()},
        config=config.to_dict(),
        details={
            **outcome.details,
            **(details or {}),
            **transport_details,
            "public_pool": int(server.public_features.shape[0]),
            "test_size": len(test),
            "agent_records": transport.record_counts().tolist(),
        },
        version=__version__,
        analysis=analysis,
        diagnostics=diagnostics,
    )


def with_statements(privacy: PrivacyReport, statements: tuple[PrivacyStatement, ...]) -> PrivacyReport:
    """``privacy`` with a method's typed statements; a headline statement replaces its level's ε.

    A headline may only loosen what the ledger's events prove: one below the accountant's
    ε at that level is a bug and is refused (AssertionError), never reported. The
    accountant's figure stays beside it as a statement of its own.
    """
    if not statements:
        return privacy
    kept = list(privacy.statements)
    levels = {"agent": privacy.agent, "instance": privacy.instance}
    for statement in statements:
        if statement.headline:
            entry = levels[statement.level]
            proven = entry.epsilon
            claimed = statement.epsilon
            if claimed is not None and (proven is None or claimed < proven - 1e-9 * max(1.0, proven)):
                raise AssertionError(
                    f"{statement.name}: headline ε {claimed} at the {statement.level} level is below the "
                    f"ε {proven} the ledger's events prove"
                )
            kept.append(
                PrivacyStatement(
                    name=f"{privacy.accountant} accountant, the same releases",
                    level=statement.level,
                    epsilon=proven,
                    delta=privacy.delta,
                    source="the ledger's events (tighter than the stated composition)",
                )
            )
            levels[statement.level] = dataclasses.replace(entry, epsilon=claimed)
        kept.append(statement)
    return dataclasses.replace(
        privacy, agent=levels["agent"], instance=levels["instance"], statements=tuple(kept)
    )


def federation_fingerprint(config: RunConfig) -> str:
    """The config's name for its dealing: a hash of the flags and seed that deal the agents' data.

    Names a Flower deployment's files (agents and server check they belong together) and
    was the ledger's federation key before :func:`federation_content_key`; the ledger
    still counts charges and budgets stored under it as the same federation's.
    """
    fed = config.federation
    identity = {
        "dataset": fed.dataset,
        "agents": fed.agents,
        "partition": config.to_dict()["federation"]["partition"],
        "public_fraction": fed.public_fraction,
        "test_fraction": fed.test_fraction,
        "target": fed.target,
        "image_size": fed.image_size,
        "seed": config.seed,
    }
    if fed.framing != "auto":  # fingerprints of configs made before --framing stay as they were
        identity["framing"] = fed.framing
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    return f"{fed.dataset}-{fed.agents}-{digest}"


def federation_content_key(federation: Federation) -> str:
    """The ledger's name for a federation: a hash of its agents' records, not of how they were dealt.

    Each record (its features' dtype, shape and bytes, and its label) is hashed; the
    sorted multiset of these hashes is hashed again. Re-dealing the same records among
    the agents (another ``--seed``, partition or agent count) gives the same key, so the
    same people's data meets the same budget; any record changed gives another key.
    """
    records: list[bytes] = []
    for agent in federation.agents:
        features = np.ascontiguousarray(agent.features)
        header = f"{features.dtype.str}{features.shape[1:]}".encode()
        for row, label in zip(features, np.asarray(agent.labels, dtype=np.int64), strict=True):
            tail = int(label).to_bytes(8, "little", signed=True)
            records.append(hashlib.sha256(header + row.tobytes() + tail).digest())
    digest = hashlib.sha256(b"".join(sorted(records))).hexdigest()[:32]
    return f"records-{digest}"


def open_ledger(
    config: RunConfig, federation: Federation | None = None, *, content_key: str | None = None
) -> PrivacyLedger:
    """The run's ledger: persisted in ``config.privacy.ledger`` when given, else in memory.

    The federation is keyed by :func:`federation_content_key` of ``federation`` (its
    agents' records) — or ``content_key``, the same key computed where the records were
    (a Flower server reads it from the deployment's server file) — with the config's
    legacy :func:`federation_fingerprint` as an alias so that charges and budgets of older
    ledgers still count. With neither (a server file written before the key existed) the
    key is the fingerprint. ``config.privacy.budget_epsilon`` is stored for a new
    federation and must match the stored budget otherwise
    (:class:`~fedvote.privacy.ledger.PersistentLedger`).
    """
    privacy = config.privacy
    if privacy.ledger is None:
        return PrivacyLedger()
    fingerprint = federation_fingerprint(config)
    key = federation_content_key(federation) if federation is not None else (content_key or fingerprint)
    return PersistentLedger(
        privacy.ledger,
        federation=key,
        budget_epsilon=privacy.budget_epsilon,
        delta=privacy.delta,
        level="agent",
        accountant=privacy.accountant,
        aliases=(fingerprint,),
    )


def planned_release(config: RunConfig, federation: Federation) -> LevelEvents:
    """What a run of ``config`` on ``federation`` will charge, planned without training anything.

    A compare or sweep sums these over all its runs and checks the sum against the
    budget before its first release (:func:`check_budget`).
    """
    return plan(config, prepare_public(config, federation).public_metadata()).planned_events()


def check_budget(ledger: PrivacyLedger, releases: list[LevelEvents], what: str = "this run") -> None:
    """Refuse (:class:`~fedvote.privacy.ledger.PrivacyBudgetExceeded`) releases that overrun the budget.

    Nothing to refuse for an in-memory ledger (no budget). Writes nothing.
    """
    persistent = persistent_ledger(ledger)
    if persistent is not None:
        persistent.check_all(releases, what)


def persistent_ledger(ledger: PrivacyLedger) -> PersistentLedger | None:
    """The persisted ledger behind ``ledger`` (itself, or a session's parent), if any."""
    while isinstance(ledger, LedgerSession):
        ledger = ledger.parent
    return ledger if isinstance(ledger, PersistentLedger) else None


def _ledger_details(ledger: PrivacyLedger) -> dict[str, object]:
    persistent = persistent_ledger(ledger)
    if persistent is None:
        return {}
    spent = {level: persistent.spent(level) for level in ("agent", "instance")}
    instance_budget = persistent.budgets.get("instance")
    return {
        "ledger": {
            "path": str(persistent.path),
            "federation": persistent.federation,
            "spent_agent_epsilon": finite_or_none(spent["agent"]),
            "spent_instance_epsilon": finite_or_none(spent["instance"]),
            "budget_epsilon": persistent.budget_epsilon,
            "budget_instance_epsilon": instance_budget.epsilon if instance_budget is not None else None,
        }
    }


def privacy_report(
    config: RunConfig,
    ledger: PrivacyLedger,
    instance_bound: str | None = None,
    instance_adjacency: str | None = None,
    calibrated: tuple[float | None, str] | None = None,
) -> PrivacyReport:
    """ε at both levels of everything in ``ledger``, at the configured δ and accountant.

    ``instance_bound`` names the instance-level sensitivity bound used (Private-kNN-FL:
    ``"tight"`` or ``"paper"``), reported as ``privacy.instance.bound``;
    ``instance_adjacency`` states the instance adjacency more precisely where a method
    needs it (PriFedSync: replace-one record of one client, federated DP); every instance
    level is replace-one. ``calibrated`` is (target ε, level) when σ was calibrated. A run
    is private when either level's ε is finite.
    """
    privacy = config.privacy
    levels = {}
    for level in ("agent", "instance"):
        epsilon = epsilon_for(ledger.event(level), privacy.delta, privacy.accountant)
        adjacency = ADJACENCY[level]
        if level == "instance" and instance_adjacency is not None:
            adjacency = instance_adjacency
        levels[level] = LevelPrivacy(
            epsilon=finite_or_none(epsilon),
            sensitivity=ledger.sensitivity(level),
            adjacency=adjacency,
            bound=instance_bound if level == "instance" else None,
        )
    private = any(entry.epsilon is not None for entry in levels.values())
    target, calibrated_level = calibrated if calibrated is not None else (None, None)
    return PrivacyReport(
        private=private,
        delta=privacy.delta,
        accountant=privacy.accountant,
        agent=levels["agent"],
        instance=levels["instance"],
        noise_source="seeded (simulation)" if privacy.noise_seed is not None else "os-entropy",
        calibrated_to_epsilon=target,
        calibrated_level=calibrated_level if target is not None else None,
    )


# --- settings → RunConfig: the one path from flags or keywords to a config --------------------------


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting of a run: its name (the flag without ``--``, ``_`` for ``-``), type, default, choices.

    ``default`` None means "not given" (the config's own default, or a value derived from
    the others, applies). ``fedvote run``'s flags have the same defaults (a test holds them
    equal).
    """

    name: str
    kind: type
    default: Any = None
    choices: tuple[str, ...] | None = None


# The federation settings (``FederationConfig`` and its ``PartitionSpec``); ``data_dir``
# defaults to ``$FEDVOTE_DATA``.
FEDERATION_SETTINGS: tuple[Setting, ...] = (
    Setting("dataset", str, "digits"),
    Setting("target", str),
    Setting("image_size", int),
    Setting("framing", str, "auto", FRAMINGS),
    Setting("label_column", str, "label"),
    Setting("data_dir", str),
    Setting("agents", int, 50),
    Setting("partition", str, "iid", tuple(PARTITION_SCHEMES)),
    Setting("dirichlet_alpha", float, 0.5),
    Setting("classes_per_agent", int, 2),
    Setting("shards_per_agent", int, 2),
    Setting("public_fraction", float),
    Setting("test_fraction", float, 0.15),
)

# Privacy, training, queries and seeds; every method's own options come on top
# (:func:`method_option_specs`).
RUN_SETTINGS: tuple[Setting, ...] = (
    Setting("sigma", float),
    Setting("epsilon", float),
    Setting("delta", float, 1e-3),
    Setting("accountant", str, "pld", tuple(ACCOUNTANTS)),
    Setting("calibrate_level", str, None, ("agent", "instance")),
    Setting("queries", int),
    Setting("min_responders", int),
    Setting("teacher_model", str, "mlp", tuple(MODEL_NAMES)),
    Setting("student_model", str, "auto", tuple(MODEL_NAMES)),
    Setting("epochs", int, 40),
    Setting("student_epochs", int),
    Setting("augment_shift", int, 0),
    Setting("self_training_rounds", int, 2),
    Setting("semi_supervised", str, "auto", STUDENT_TRAINING),
    Setting("seed", int, 0),
    Setting("noise_seed", int),
    Setting("ledger", str),
    Setting("budget_epsilon", float),
    Setting("secure_sum", bool, False),
)

# Settings naming a file or directory: a ``pathlib.Path`` is taken as its string.
_PATH_SETTINGS = frozenset({"data_dir", "ledger"})
# The federation settings that make its ``PartitionSpec``.
_PARTITION = frozenset({"partition", "dirichlet_alpha", "classes_per_agent", "shards_per_agent"})


def method_option_specs() -> dict[str, OptionSpec]:
    """Every registered method's options by name (two methods may share a name of one type)."""
    specs: dict[str, OptionSpec] = {}
    for name in sorted(METHODS):
        options_type = METHODS[name].options_type
        if options_type is not None:
            for spec in option_specs(options_type):
                specs.setdefault(spec.name, spec)
    return specs


def build_config(method: str = "pate-fl", **settings: Any) -> RunConfig:
    """The :class:`~fedvote.config.RunConfig` that ``fedvote run --method METHOD --flag value ...`` builds.

    ``settings`` are named as the flags (``--teacher-model`` is ``teacher_model``, a
    method option by its field name: ``--knn-bound`` is ``bound``); a setting left out
    takes the flag's default (``data_dir``: ``$FEDVOTE_DATA``), and a method option set to
    None counts as not given. Refused with :class:`~fedvote.errors.ConfigError` naming the
    setting, before anything is loaded: an unknown name, a value of the wrong type or
    outside its choices, an option the method does not take, and everything the config
    and the method refuse (:func:`configs_from_settings`).
    """
    federation_values: dict[str, Any] = {}
    run_values: dict[str, Any] = {}
    for table, values in ((FEDERATION_SETTINGS, federation_values), (RUN_SETTINGS, run_values)):
        for setting in table:
            given = settings.pop(setting.name, setting.default)
            values[setting.name] = _checked(setting.name, given, setting.kind, setting.choices)
    if federation_values["data_dir"] is None:
        federation_values["data_dir"] = os.environ.get(DATA_ENV) or None
    specs = method_option_specs()
    options: dict[str, Any] = {}
    for name, value in settings.items():
        spec = specs.get(name)
        if spec is None:
            raise ConfigError(name, "no such setting (they are fedvote run's flags; see docs/python.md)")
        if value is not None:
            options[name] = _checked(name, value, spec.value_type, spec.choices)
    if not isinstance(method, str):
        raise ConfigError("method", f"must name a method, got {method!r}")
    (config,) = configs_from_settings([method], federation_config(federation_values), run_values, options)
    return config


def federation_config(values: Mapping[str, Any]) -> FederationConfig:
    """The :class:`~fedvote.config.FederationConfig` of the :data:`FEDERATION_SETTINGS` ``values``."""
    partition = PartitionSpec(
        scheme=values["partition"],
        alpha=values["dirichlet_alpha"],
        classes_per_agent=values["classes_per_agent"],
        shards_per_agent=values["shards_per_agent"],
    )
    return FederationConfig(
        partition=partition,
        **{name: values[name] for name in (s.name for s in FEDERATION_SETTINGS) if name not in _PARTITION},
    )



def configs_from_settings(
    methods: Sequence[str],
    federation: FederationConfig,
    values: Mapping[str, Any],
    method_options: Mapping[str, Any],
) -> list[RunConfig]:
    """One RunConfig per method of ``methods``, each with the ``method_options`` that are its own.

    ``values`` holds every :data:`RUN_SETTINGS` name. A method option (``k``, ``rounds``,
    ``release``, …) that none of the methods takes is refused by name; each config's
    options are validated by its method (:func:`fedvote.methods.check_method`) before
    anything is loaded. ``fedvote run``/``sweep``/``label`` and :func:`build_config` come
    through here.
    """
    if not methods:
        raise ConfigError("method", "name at least one method")
    owned = {name: option_names(name) for name in methods}  # refuses an unknown method
    for option in method_options:
        if not any(option in owned[name] for name in methods):
            raise ConfigError(option, f"is not an option of method {' or '.join(map(repr, methods))}")
    configs = [
        _config_of(name, federation, values, {k: v for k, v in method_options.items() if k in owned[name]})
        for name in methods
    ]
    for config in configs:
        check_method(config)
    return configs


def _config_of(
    method: str, federation: FederationConfig, f: Mapping[str, Any], options: dict[str, Any]
) -> RunConfig:
    """The RunConfig the settings ``f`` describe for ``method``."""
    return RunConfig(
        method=method,
        federation=federation,
        privacy=PrivacyConfig(
            sigma=f["sigma"],
            epsilon=f["epsilon"],
            delta=f["delta"],
            accountant=f["accountant"],
            min_responders=f["min_responders"],
            noise_seed=f["noise_seed"],
            ledger=f["ledger"],
            budget_epsilon=f["budget_epsilon"],
            calibrate_level=f["calibrate_level"],
            secure_sum=f["secure_sum"],
        ),
        teacher=TrainingConfig(model=f["teacher_model"], epochs=f["epochs"]),
        student=TrainingConfig(
            model=f["student_model"],
            epochs=f["student_epochs"] if f["student_epochs"] is not None else f["epochs"],
            augment_shift=f["augment_shift"],
        ),
        queries=f["queries"],
        self_training_rounds=f["self_training_rounds"],
        semi_supervised=f["semi_supervised"],
        seed=f["seed"],
        options=options,
    )


def _checked(name: str, value: Any, kind: type, choices: Sequence[str] | None) -> Any:
    """``value`` as a ``kind`` (an int as a float, a path as its string), or a ConfigError naming ``name``.

    None passes (not given); the checks the command line's option types make, for values
    given from Python.
    """
    if value is None:
        return None
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(name, f"must be True or False, got {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ConfigError(name, f"must be an integer, got {value!r}")
        return int(value)
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ConfigError(name, f"must be a number, got {value!r}")
        try:
            return float(value)
        except OverflowError as error:
            raise ConfigError(name, f"is too large for a float: {value!r}") from error
    if name in _PATH_SETTINGS and isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise ConfigError(name, f"must be a string, got {value!r}")
    if choices is not None and value not in choices:
        raise ConfigError(name, f"must be one of {', '.join(choices)}; got {value!r}")
    return value
