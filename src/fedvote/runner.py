"""One run from a config: federation → method → ledger → RunResult."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time

import numpy as np

from fedvote import __version__
from fedvote.analysis import collect_analysis, with_data_dependent_epsilon
from fedvote.config import RunConfig
from fedvote.data.datasets import has_official_test_split, load_dataset, load_splits
from fedvote.data.federation import (
    Federation,
    build_domain_federation,
    build_federation,
    check_distinct_datasets,
)
from fedvote.errors import ConfigError
from fedvote.methods import Method, check_method
from fedvote.methods.prifedsync import PriFedSync
from fedvote.methods.private_knn_fl import PrivateKnnFL
from fedvote.models.training import predict_labels
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.calibrate import calibrate_sigma
from fedvote.privacy.events import LevelEvents
from fedvote.privacy.ledger import LedgerSession, PersistentLedger, PrivacyLedger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.results import LevelPrivacy, PrivacyReport, RunResult
from fedvote.transport.base import Transport
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
        seed=config.seed,
    )


def make_method(config: RunConfig, federation: Federation) -> Method:
    """The configured method with σ given, or calibrated to the target ε at the chosen level."""
    return method_for(
        config,
        pool_size=len(federation.public),
        num_agents=federation.num_agents,
        agent_records=federation.agent_sizes(),
    )


def method_for(
    config: RunConfig, *, pool_size: int, num_agents: int, agent_records: np.ndarray | None
) -> Method:
    """:func:`make_method` from the federation's public shape alone.

    For a server that never holds the agents' data (a Flower deployment): the public
    pool's size, the number of agents N and, when known, their record counts (public
    metadata; Private-kNN-FL plans a fractional k with them, else with k_min = 1).
    """
    queries = config.queries if config.queries is not None else min(pool_size, DEFAULT_MAX_QUERIES)
    if queries > pool_size:
        raise ConfigError("queries", f"{queries} queries asked but the public pool holds {pool_size}")
    privacy = config.privacy
    min_responders = privacy.min_responders or num_agents
    if min_responders > num_agents:
        raise ConfigError(
            "min_responders", f"t = {min_responders} exceeds the {num_agents} agents"
        )
    method = check_method(config).from_config(
        config,
        sigma=privacy.sigma if privacy.sigma is not None else 1.0,
        queries=queries,
        min_responders=min_responders,
    )
    if isinstance(method, PrivateKnnFL) and agent_records is not None:  # k_min: agents' (public) sizes
        method = method.with_agent_records(agent_records)
    if isinstance(method, PriFedSync) and agent_records is not None:  # Theorem 2's μ_max: smallest n_j
        method = method.with_agent_records(agent_records)
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
    return method


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
    """Carry out one run as ``config`` says and measure it.

    ``federation`` reuses an already built federation (it must be the one ``config``
    describes; :mod:`fedvote.compare` runs several methods on one). ``transport`` runs
    the agents somewhere else than a fresh in-process :class:`LocalTransport` (a sweep's
    :class:`~fedvote.sweep.ReusedVotesTransport`, a Flower deployment); it must hold
    ``federation``'s agents. ``ledger`` charges the run to a ledger its caller holds (a
    :class:`~fedvote.privacy.ledger.LedgerSession` of a compare's or sweep's shared
    ledger, checked against the budget up front); else the run opens its own
    (:func:`open_ledger`) on the federation's content key.
    """
    started = time.perf_counter()
    timings: dict[str, float] = {}

    # The method and its options, refused (by name) before any data is loaded or anything trained.
    method_type = check_method(config)
    if federation is None:
        federation = make_federation(config)
    records = federation  # the ledger's key: these agents' records
    # The method's own view of the data (weighted-pate: a labelled validation slice of the pool).
    federation = method_type.prepare_federation(config, federation)
    timings["data_s"] = time.perf_counter() - started

    mark = time.perf_counter()
    method = make_method(config, federation)
    timings["calibration_s"] = time.perf_counter() - mark

    if transport is None:
        transport = LocalTransport(
            federation,
            seed=config.seed,
            noise_seed=config.privacy.noise_seed,
            secure_sum=config.privacy.secure_sum,
        )
    own_ledger = ledger is None
    if ledger is None:
        ledger = open_ledger(config, records)
    try:
        check_budget(ledger, [method.planned_events()])  # refuse before any training or release
        mark = time.perf_counter()
        outcome = method.run(federation.server_data(), transport, ledger, progress)
        timings["method_s"] = time.perf_counter() - mark
        ledger_details = _ledger_details(ledger)
    finally:
        if own_ledger and isinstance(ledger, PersistentLedger):
            ledger.close()

    mark = time.perf_counter()
    test = federation.test
    accuracy = float(np.mean(predict_labels(outcome.student, test.features) == test.labels))
    label_accuracy: float | None = None
    teacher_accuracies: np.ndarray | None = None  # (N,)
    # Simulation diagnostics: noiseless functions of private data, computed after the
    # method has finished, so none of its decisions can depend on them.
    diagnostics: dict[str, object] = dict(outcome.details.get("diagnostics", {}))
    if outcome.query_indices.size:  # voting methods: pseudo-labels and teachers to judge
        true_query_labels = federation.public.labels[outcome.query_indices]
        label_accuracy = float(np.mean(outcome.pseudo_labels == true_query_labels))
        teacher_accuracies = transport.teacher_accuracies(test)
        diagnostics["teacher_accuracy"] = float(np.mean(teacher_accuracies))
    level = calibration_level(config, method)
    privacy = privacy_report(
        config,
        ledger,
        instance_bound=outcome.details.get("bound"),
        instance_adjacency=outcome.details.get("instance_adjacency_of_epsilon"),
        calibrated=(config.privacy.target_epsilon, level) if level is not None else None,
    )
    analysis = collect_analysis(federation, transport, outcome, teacher_accuracies)
    privacy = with_data_dependent_epsilon(privacy, ledger, analysis, float(method.sigma))
    privacy = method.stated_privacy(privacy)  # a method's own statement of its ε (FedAUXfdp)
    if "privacy_record" in outcome.details:  # record-level federated f-DP (PriFedSync)
        privacy = dataclasses.replace(privacy, record=outcome.details["privacy_record"])
    timings["evaluation_s"] = time.perf_counter() - mark
    timings["total_s"] = time.perf_counter() - started

    return RunResult(
        method=config.method,
        dataset=config.federation.dataset,
        agents=federation.num_agents,
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
            **{k: v for k, v in outcome.details.items() if k not in ("privacy_record", "diagnostics")},
            **ledger_details,
            "public_pool": len(federation.public),
            "test_size": len(federation.test),
            "agent_records": federation.agent_sizes().tolist(),
        },
        version=__version__,
        analysis=analysis,
        diagnostics=diagnostics,
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


def open_ledger(config: RunConfig, federation: Federation | None = None) -> PrivacyLedger:
    """The run's ledger: persisted in ``config.privacy.ledger`` when given, else in memory.

    The federation is keyed by :func:`federation_content_key` of ``federation`` (its
    agents' records), with the config's legacy :func:`federation_fingerprint` as an alias
    so that charges and budgets of older ledgers still count. Without ``federation`` (a
    Flower server, which never holds the agents' records) the key is the fingerprint.
    ``config.privacy.budget_epsilon`` is stored for a new federation and must match the
    stored budget otherwise (:class:`~fedvote.privacy.ledger.PersistentLedger`).
    """
    privacy = config.privacy
    if privacy.ledger is None:
        return PrivacyLedger()
    fingerprint = federation_fingerprint(config)
    key = federation_content_key(federation) if federation is not None else fingerprint
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
    prepared = check_method(config).prepare_federation(config, federation)
    return make_method(config, prepared).planned_events()


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
            "spent_agent_epsilon": spent["agent"] if math.isfinite(spent["agent"]) else None,
            "spent_instance_epsilon": spent["instance"] if math.isfinite(spent["instance"]) else None,
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
            epsilon=epsilon if math.isfinite(epsilon) else None,
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
