"""One run from a config: federation → method → ledger → RunResult."""

from __future__ import annotations

import hashlib
import json
import math
import time

import numpy as np

from fedvote import __version__
from fedvote.config import RunConfig
from fedvote.data.datasets import load_dataset
from fedvote.data.federation import Federation, build_federation
from fedvote.errors import ConfigError
from fedvote.methods import METHODS, Method
from fedvote.models.training import predict_labels
from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.calibrate import calibrate_sigma
from fedvote.privacy.ledger import PersistentLedger, PrivacyLedger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.results import LevelPrivacy, PrivacyReport, RunResult
from fedvote.transport.local import LocalTransport

# Queries asked when the user gives none: the whole pool, up to this many. Fewer
# queries buy less noise per query (σ grows as √Q at fixed ε); 100 suits teachers
# trained on a few dozen records each (digits, 50 agents). Raise it when teachers agree
# more (the paper labels 500 USPS points with 200 agents of 1000-3000 records).
DEFAULT_MAX_QUERIES = 100

ADJACENCY = {
    "agent": "zero-out: one agent's votes replaced by zeros (it still adds its noise share)",
    "instance": "replace-one: one record of one agent replaced",
}


def make_federation(config: RunConfig) -> Federation:
    """Load the dataset and split it as ``config.federation`` says."""
    fed = config.federation
    dataset = load_dataset(fed.dataset, fed.data_dir)
    return build_federation(
        dataset,
        num_agents=fed.agents,
        partition=fed.partition,
        public_fraction=fed.public_fraction,
        test_fraction=fed.test_fraction,
        seed=config.seed,
    )


def make_method(config: RunConfig, federation: Federation) -> Method:
    """The configured method with σ given, or calibrated to the target ε (agent level)."""
    pool_size = len(federation.public)
    queries = config.queries if config.queries is not None else min(pool_size, DEFAULT_MAX_QUERIES)
    if queries > pool_size:
        raise ConfigError("queries", f"{queries} queries asked but the public pool holds {pool_size}")
    privacy = config.privacy
    min_responders = privacy.min_responders or federation.num_agents
    if min_responders > federation.num_agents:
        raise ConfigError(
            "min_responders", f"t = {min_responders} exceeds the {federation.num_agents} agents"
        )
    method = METHODS[config.method].from_config(
        config,
        sigma=privacy.sigma if privacy.sigma is not None else 1.0,
        queries=queries,
        min_responders=min_responders,
    )
    target = privacy.target_epsilon
    if target is not None:
        sigma = calibrate_sigma(
            lambda s: method.with_sigma(s).planned_events().agent,
            target,
            privacy.delta,
            privacy.accountant,
        )
        method = method.with_sigma(sigma)
    return method


def run(config: RunConfig, progress: Progress = NO_PROGRESS) -> RunResult:
    """Carry out one run as ``config`` says and measure it."""
    started = time.perf_counter()
    timings: dict[str, float] = {}

    federation = make_federation(config)
    timings["data_s"] = time.perf_counter() - started

    mark = time.perf_counter()
    method = make_method(config, federation)
    timings["calibration_s"] = time.perf_counter() - mark

    transport = LocalTransport(federation, seed=config.seed, noise_seed=config.privacy.noise_seed)
    ledger = open_ledger(config)
    try:
        if isinstance(ledger, PersistentLedger):
            ledger.check(method.planned_events())  # refuse before any training or release
        mark = time.perf_counter()
        outcome = method.run(federation.server_data(), transport, ledger, progress)
        timings["method_s"] = time.perf_counter() - mark
        ledger_details = _ledger_details(ledger)
    finally:
        if isinstance(ledger, PersistentLedger):
            ledger.close()

    mark = time.perf_counter()
    test = federation.test
    accuracy = float(np.mean(predict_labels(outcome.student, test.features) == test.labels))
    true_query_labels = federation.public.labels[outcome.query_indices]
    label_accuracy = float(np.mean(outcome.pseudo_labels == true_query_labels))
    teacher_accuracy = float(np.mean(transport.teacher_accuracies(test)))
    privacy = privacy_report(config, ledger)
    timings["evaluation_s"] = time.perf_counter() - mark
    timings["total_s"] = time.perf_counter() - started

    return RunResult(
        method=config.method,
        dataset=config.federation.dataset,
        agents=federation.num_agents,
        seed=config.seed,
        accuracy=accuracy,
        label_accuracy=label_accuracy,
        teacher_accuracy=teacher_accuracy,
        queries=int(outcome.query_indices.shape[0]),
        sigma=float(method.sigma),
        privacy=privacy,
        communication=transport.communication.as_dict(),
        timings={k: round(v, 4) for k, v in timings.items()},
        config=config.to_dict(),
        details={
            **outcome.details,
            **ledger_details,
            "public_pool": len(federation.public),
            "test_size": len(federation.test),
            "agent_records": federation.agent_sizes().tolist(),
        },
        version=__version__,
    )


def federation_fingerprint(config: RunConfig) -> str:
    """A stable name for the federation: a hash of everything that fixes the agents' data."""
    fed = config.federation
    identity = {
        "dataset": fed.dataset,
        "agents": fed.agents,
        "partition": config.to_dict()["federation"]["partition"],
        "public_fraction": fed.public_fraction,
        "test_fraction": fed.test_fraction,
        "seed": config.seed,
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    return f"{fed.dataset}-{fed.agents}-{digest}"


def open_ledger(config: RunConfig) -> PrivacyLedger:
    """The run's ledger: persisted in ``config.privacy.ledger`` when given, else in memory."""
    privacy = config.privacy
    if privacy.ledger is None:
        return PrivacyLedger()
    return PersistentLedger(
        privacy.ledger,
        federation=federation_fingerprint(config),
        budget_epsilon=privacy.budget_epsilon,
        delta=privacy.delta,
        level="agent",
        accountant=privacy.accountant,
    )


def _ledger_details(ledger: PrivacyLedger) -> dict[str, object]:
    if not isinstance(ledger, PersistentLedger):
        return {}
    spent = ledger.spent()
    return {
        "ledger": {
            "path": str(ledger.path),
            "federation": ledger.federation,
            "spent_agent_epsilon": spent if math.isfinite(spent) else None,
            "budget_epsilon": ledger.budget_epsilon,
        }
    }


def privacy_report(config: RunConfig, ledger: PrivacyLedger) -> PrivacyReport:
    """ε at both levels of everything in ``ledger``, at the configured δ and accountant."""
    privacy = config.privacy
    levels = {}
    for level in ("agent", "instance"):
        epsilon = epsilon_for(ledger.event(level), privacy.delta, privacy.accountant)
        levels[level] = LevelPrivacy(
            epsilon=epsilon if math.isfinite(epsilon) else None,
            sensitivity=ledger.sensitivity(level),
            adjacency=ADJACENCY[level],
        )
    private = levels["agent"].epsilon is not None
    return PrivacyReport(
        private=private,
        delta=privacy.delta,
        accountant=privacy.accountant,
        agent=levels["agent"],
        instance=levels["instance"],
        noise_source="seeded (simulation)" if privacy.noise_seed is not None else "os-entropy",
        calibrated_to_epsilon=privacy.target_epsilon,
    )
