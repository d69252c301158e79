"""One run lifecycle: plan → execute → measure, used by run, compare, sweep, label and the Flower server.

* :func:`build_config` — settings (``fedvote run``'s flags, or :func:`fedvote.run`'s
  keywords, by the same names) turned into a validated :class:`~fedvote.config.RunConfig`:
  one path, one set of defaults (:data:`FEDERATION_SETTINGS`, :data:`RUN_SETTINGS`) and
  one set of refusals for the command line and the Python API (defined in the light
  :mod:`fedvote.settings`, which the command line reads without importing torch;
  re-exported here);
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
import time
from contextlib import nullcontext
from typing import Any

import numpy as np

from fedvote._meta import __version__
from fedvote.analysis import collect_analysis, diagnostic_test_sample, release_data_dependent_epsilon
from fedvote.config import RunConfig
from fedvote.data.attributes import AttributeTask
from fedvote.data.datasets import (
    documents_balanced_classes,
    has_official_test_split,
    load_dataset,
    load_splits,
)
from fedvote.data.federation import (
    Federation,
    PublicMetadata,
    ServerData,
    build_domain_federation,
    build_federation,
    dataset_names,
)
from fedvote.data.validation import provide_validation
from fedvote.errors import ConfigError
from fedvote.methods import Method, MethodOutcome, check_method
from fedvote.methods.registry import method_option_specs as method_option_specs
from fedvote.methods.registry import noise_source
from fedvote.models.input_features import resolve_input_features, with_input_features
from fedvote.models.training import predict_labels
from fedvote.privacy.accountant import PLDTooLarge, accountant_for, bounded_epsilon, check_pld_accountable
from fedvote.privacy.calibrate import memoised_calibration
from fedvote.privacy.events import LevelEvents
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.privacy.run_ledger import CHARGE_NOTE_PREFIX as CHARGE_NOTE_PREFIX
from fedvote.privacy.run_ledger import charge_note as charge_note
from fedvote.privacy.run_ledger import charge_note_of as charge_note_of
from fedvote.privacy.run_ledger import check_budget as check_budget
from fedvote.privacy.run_ledger import federation_content_key as federation_content_key
from fedvote.privacy.run_ledger import federation_fingerprint as federation_fingerprint
from fedvote.privacy.run_ledger import ledger_details as run_ledger_details
from fedvote.privacy.run_ledger import note_charge as note_charge
from fedvote.privacy.run_ledger import open_ledger as open_ledger
from fedvote.privacy.run_ledger import persistent_ledger as persistent_ledger
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.results import LevelPrivacy, PrivacyReport, PrivacyStatement, RunResult, finite_or_none

# The settings → RunConfig path lives in the light fedvote.settings (the command
# line reads it without importing torch); build_config (docs/python.md) and the two
# settings lists stay importable from here too.
from fedvote.settings import FEDERATION_SETTINGS as FEDERATION_SETTINGS
from fedvote.settings import RUN_SETTINGS as RUN_SETTINGS
from fedvote.settings import build_config as build_config
from fedvote.transport.base import Transport
from fedvote.transport.capabilities import SimulationDiagnostics, check_capabilities
from fedvote.transport.local import LocalTransport

# Queries asked when the user gives none (:func:`default_queries`): one per
# POOL_POINTS_PER_QUERY pool points, at least DEFAULT_MIN_QUERIES and at most
# DEFAULT_MAX_QUERIES, never more than the pool. Fewer queries buy less noise per query (σ
# grows as √Q at fixed ε); more spread the student's labels over more of the pool. Digits'
# 270-point pool gets 100; MNIST's 3,000-point pool 200 (measured there: docs/defaults.md).
DEFAULT_MIN_QUERIES = 100
DEFAULT_MAX_QUERIES = 200
POOL_POINTS_PER_QUERY = 15
# ...unless the target ε is so small that the calibrated σ at that Q exceeds this share of
# the vote mass N: then the default is DEFAULT_MIN_QUERIES (σ √2 smaller at Q = 200 → 100).
# Measured on the voting paper's MNIST federation (N = 100; experiments/voting_mnist_curve.py):
# at ε = 1, Q = 200 calibrates σ = 36.4 and PATE-FL scored 0.750 ± 0.063, Q = 100 σ = 25.7 and
# 0.916 ± 0.058 (both with CNN teachers); at ε = 2, Q = 200 has σ = 20.4 and scored 0.956
# (Q = 100, MLP teachers: 0.955). docs/defaults.md, "How many queries".
MAX_DEFAULT_VOTE_NOISE_SHARE = 0.25


def default_queries(pool_size: int) -> int:
    """Q from the pool's size alone (public): ⌊pool / 15⌋ clipped to [100, 200], at most the pool."""
    per_pool = min(max(pool_size // POOL_POINTS_PER_QUERY, DEFAULT_MIN_QUERIES), DEFAULT_MAX_QUERIES)
    return min(pool_size, per_pool)

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

    An unknown dataset, a target that is one of the sources, a source named twice and
    several sources without a target are refused before anything is loaded
    (:func:`~fedvote.data.federation.dataset_names`).
    """
    return check_agents_data(with_documented_prior(_built_federation(config), config))


def with_documented_prior(federation: Federation, config: RunConfig) -> Federation:
    """``federation`` with the pool's class shares its dataset documents (uniform), if it documents them.

    The pool is drawn from the target's training split (``--target``) or from the dataset's
    official test split; a dataset without an official test split (the pool drawn from its
    only split) documents nothing here. Public knowledge, not read from any record.
    """
    fed = config.federation
    names, target_name = dataset_names(fed.dataset, fed.target, fed.data_dir)
    source = target_name if target_name is not None else names[0]
    pool_from_one_split = target_name is None and not has_official_test_split(source)
    if pool_from_one_split or not documents_balanced_classes(source):
        return federation
    classes = federation.num_classes
    return dataclasses.replace(federation, pool_class_prior=(1.0 / classes,) * classes)


def _built_federation(config: RunConfig) -> Federation:
    """:func:`make_federation` before its checks."""
    fed = config.federation
    if not 0.0 < fed.test_fraction < 1.0:  # refused wherever given, used or not (official test splits)
        raise ConfigError("test_fraction", f"must lie in (0, 1), got {fed.test_fraction}")
    names, target_name = dataset_names(fed.dataset, fed.target, fed.data_dir)
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
    try:
        target = load_splits(target_name, fed.data_dir, label_column=fed.label_column)
    except ConfigError as error:  # the loaders name --dataset; this file was given as --target
        if error.argument != "dataset":
            raise
        raise type(error)("target", error.detail) from error
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


def check_agents_data(federation: Federation) -> Federation:
    """``federation``, refused (naming ``--dataset``) when its agents' records cannot teach anything.

    Every method learns a classifier from the agents' records and every vote ranks at least
    two classes (the noisy top-two gap, the argmax): records of a single class would train,
    charge the releases, then fail (issue 47, item 1). Checked when the federation is built,
    before anything is trained or charged. (Too few records for the agents is refused by the
    partitioner; a method's own needs, e.g. k neighbours, by the method's plan.)
    """
    labels = np.concatenate([np.asarray(agent.labels).reshape(-1) for agent in federation.agents])
    present = np.unique(labels)
    if federation.num_classes < 2 or present.size < 2:
        which = f" (class {int(present[0])})" if present.size else ""
        raise ConfigError(
            "dataset",
            f"the agents' {labels.size} records all hold the same label{which}; voting and "
            "training a classifier need records of at least two classes",
        )
    return federation


def prepare_public(config: RunConfig, federation: Federation, progress: Progress = NO_PROGRESS) -> Federation:
    """``federation`` with what the method asked of the public side, seen through the input features.

    Methods never receive the federation: they declare their needs
    (:meth:`~fedvote.methods.base.Method.validation_need`, a labelled validation set) and the
    runner provides them; then every record is mapped through the run's public input
    features (``--input-features``, :mod:`fedvote.models.input_features`). Idempotent.
    """
    method = check_method(config)
    federation = provide_validation(federation, method.validation_need(config), config.seed)
    return with_input_features(federation, input_features_kind(config), seed=config.seed, progress=progress)


def input_features_kind(config: RunConfig) -> str:
    """``--input-features`` resolved for ``config`` (``auto``: by the dataset and the method; public)."""
    fed = config.federation
    return resolve_input_features(fed.input_features, fed.dataset, check_method(config).auto_patch_datasets)


def plan(config: RunConfig, public: PublicMetadata) -> Method:
    """The configured method, planned from public metadata alone: σ given, or calibrated to the target ε.

    Everything is refused here, before anything is trained or charged: an unknown method
    or option, Q beyond the pool, t beyond N, a target ε the method cannot meet. A server
    that never holds the agents' data (a Flower deployment) plans from the same metadata.
    Without ``--queries``, Q is the method's own :meth:`~fedvote.methods.base.Method.default_queries`
    where it has one; else :func:`default_queries` of the pool, or
    :data:`DEFAULT_MIN_QUERIES` where the target ε would calibrate a voting method's σ above
    :data:`MAX_DEFAULT_VOTE_NOISE_SHARE` of the N agents' vote mass.
    """
    if config.queries is not None:
        return _planned(config, public, config.queries)
    queries, fewer = default_queries(public.pool_size), min(public.pool_size, DEFAULT_MIN_QUERIES)
    method = _planned(config, public, queries)
    wanted = method.default_queries(public.pool_size)  # the method's own rule, if it has one
    if wanted is not None:
        return method if wanted == queries else _planned(config, public, wanted)
    noisy = method.sigma > MAX_DEFAULT_VOTE_NOISE_SHARE * public.num_agents
    calibrated = config.privacy.target_epsilon is not None and config.privacy.sigma is None
    if type(method).votes_with_unit_mass and calibrated and noisy and queries > fewer:
        return _planned(config, public, fewer)  # a small target ε: fewer, less noisy queries
    return method


def _planned(config: RunConfig, public: PublicMetadata, queries: int) -> Method:
    """:func:`plan` at ``queries`` queries."""
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
    target = method.calibration_target(privacy.target_epsilon) if level is not None else None
    if target is not None and level is not None:
        calibrated = memoised_calibration(
            lambda m, s: m.with_sigma(s).planned_events().at(level), target, privacy.delta, privacy.accountant
        )
        method = method.with_calibrated_settings(calibrated)  # e.g. DP-FedAvg's q
        method = method.with_sigma(calibrated(method))
    _check_accountable(method, config)
    return method


def _check_accountable(method: Method, config: RunConfig) -> None:
    """Refuse, before anything is trained, a σ too small for the PLD to account the run's own level.

    The run's own level is the one ``--epsilon`` calibrates (:func:`calibration_level`, also
    when ``--sigma`` is given): its headline must be the accountant's. Such a run would
    otherwise train, then fail to report its ε; its ε is far beyond any useful budget anyway
    (:class:`~fedvote.privacy.accountant.PLDTooLarge`). The *other* level is never refused:
    a run whose noise is set at the instance level (FedAUXfdp, FedD+P, FedAVG+P: per head,
    from their own ε flags; no level calibrated here, and their Gaussian releases are
    accountable at any μ) may leave the agent level far too little noised for a PLD, and that
    level is then reported by its closed form, RDP's upper bound of the same events, or ∞
    (:func:`privacy_report`, :func:`~fedvote.privacy.accountant.bounded_epsilon`).
    """
    level = calibration_level(config, method)
    if config.privacy.accountant != "pld" or level is None:
        return
    try:
        check_pld_accountable(method.planned_events().at(level))
    except PLDTooLarge as error:
        flag = "sigma" if config.privacy.sigma is not None else "epsilon"
        raise ConfigError(
            flag, f"at σ = {method.sigma:.4g}, {level} level: {error.detail} (the level this run calibrates)"
        ) from error


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
    with progress.step("loading and splitting the data", total=1) as bar:
        if federation is None:
            federation = make_federation(config)
        records = federation  # the ledger's key: these agents' records
        bar.advance()
    timings["data_s"] = time.perf_counter() - started
    mark = time.perf_counter()
    # what the method asked of the public side, then the records seen through the input features
    federation = prepare_public(config, federation, progress)
    timings["input_features_s"] = time.perf_counter() - mark

    mark = time.perf_counter()
    with progress.step("planning (σ from the public sizes)", total=1) as bar:
        method = plan(config, federation.public_metadata())
        bar.advance()
    timings["calibration_s"] = time.perf_counter() - mark

    if transport is None:
        transport = LocalTransport(
            federation,
            seed=config.seed,
            noise_seed=config.privacy.noise_seed,
            secure_sum=config.privacy.secure_sum,
            secure_noise=config.privacy.secure_noise,
        )
    check_capabilities(method, transport)  # before the ledger is opened, anything trained or charged
    # A ledger of the caller's stays open; the run's own is closed once the method has run.
    opened = open_ledger(config, records) if ledger is None else nullcontext(ledger)
    try:
        with opened as charged:
            mark = time.perf_counter()
            outcome = execute(method, federation.server_data(), transport, charged, progress)
            timings["method_s"] = time.perf_counter() - mark
            ledger_details = run_ledger_details(charged)
        with progress.step("evaluating and accounting", total=1) as bar:
            result = measure(
                config,
                method,
                outcome,
                transport=transport,
                ledger=charged,
                server=federation.server_data(),
                federation=federation,
                timings=timings,
                started=started,
                details=ledger_details,
            )
            bar.advance()
        return result
    except BaseException as error:  # an error or Ctrl-C after the ledger opened: say what it holds
        note_charge(error, config, charged)
        raise


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
    predicted = predict_labels(outcome.student, test.features)  # (T,)
    accuracy = float(np.mean(predicted == test.labels))
    attribute_scores: dict[str, Any] = {}
    if server.attribute_names:  # a multi-label dataset: mean attribute accuracy (bitmask labels)
        task = AttributeTask.of(server.attribute_names, server.num_classes)
        accuracy = task.accuracy(predicted, test.labels)
        attribute_scores = attribute_details(task, predicted, test.labels)
    if federation is not None:
        public_labels = federation.public.labels
    label_accuracy: float | None = None
    if public_labels is not None and outcome.query_indices.size:
        label_accuracy = float(np.mean(outcome.pseudo_labels == public_labels[outcome.query_indices]))
        if server.attribute_names:
            label_accuracy = task.accuracy(outcome.pseudo_labels, public_labels[outcome.query_indices])
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
        diagnostics["teacher_kind"] = method.agent_models  # what the report calls them
    level = calibration_level(config, method)
    accounting = time.perf_counter()
    privacy = privacy_report(
        config,
        ledger,
        instance_bound=method.instance_bound,
        instance_adjacency=method.instance_adjacency,
        calibrated=(method.calibration_target(config.privacy.target_epsilon), level) if level else None,
    )
    timings["accounting_s"] = time.perf_counter() - accounting  # the ledger's ε, both levels; in evaluation_s
    analysis = None
    if federation is not None:
        analysis = collect_analysis(federation, transport, outcome, teacher_accuracies, teacher_test_points)
        privacy, released = release_data_dependent_epsilon(
            privacy, ledger, analysis, float(method.sigma), config.privacy.noise_seed
        )
        diagnostics.update(released)  # the clean data-dependent figure: a diagnostic, never privacy
    privacy = with_statements(privacy, outcome.statements)
    privacy = dataclasses.replace(privacy, agent_groups=outcome.agent_groups)  # --agent-budgets
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
            **attribute_scores,
            **(details or {}),
            **method.planned_details(),
            **transport_details,
            "public_pool": int(server.public_features.shape[0]),
            "input_features_used": input_features_kind(config),  # --input-features resolved
            "test_size": len(test),
            "agent_records": transport.record_counts().tolist(),
        },
        version=__version__,
        analysis=analysis,
        diagnostics=diagnostics,
    )


def attribute_details(task: AttributeTask, predicted: np.ndarray, true: np.ndarray) -> dict[str, Any]:
    """result.json's keys of a multi-label run: each attribute's accuracy and the exact-match rate."""
    per_attribute = task.attribute_accuracy(predicted, true)  # (A,)
    return {
        "attribute_accuracy": {n: float(v) for n, v in zip(task.attribute_names, per_attribute, strict=True)},
        "exact_match_accuracy": float(np.mean(predicted == true)),
        "accuracy_metric": "mean attribute accuracy",
    }


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
            accountant = entry.accountant if entry.accountant_fallback else privacy.accountant
            kept.append(
                PrivacyStatement(
                    name=f"{accountant} accountant, the same releases",
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


def planned_release(config: RunConfig, federation: Federation) -> LevelEvents:
    """What a run of ``config`` on ``federation`` will charge, planned without training anything.

    A compare or sweep sums these over all its runs and checks the sum against the
    budget before its first release (:func:`check_budget`).
    """
    return plan(config, prepare_public(config, federation).public_metadata()).planned_events()


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
        # the run's accountant; at a level whose PLD cannot be built, RDP's bound or ∞ (labelled)
        bounded = bounded_epsilon(ledger.event(level), privacy.delta, privacy.accountant)
        adjacency = ADJACENCY[level]
        if level == "instance" and instance_adjacency is not None:
            adjacency = instance_adjacency
        levels[level] = LevelPrivacy(
            epsilon=finite_or_none(bounded.epsilon),
            sensitivity=ledger.sensitivity(level),
            adjacency=adjacency,
            bound=instance_bound if level == "instance" else None,
            accountant=bounded.accountant,
            accountant_fallback=bounded.fallback,
        )
    private = any(entry.epsilon is not None for entry in levels.values())
    target, calibrated_level = calibrated if calibrated is not None else (None, None)
    return PrivacyReport(
        private=private,
        delta=privacy.delta,
        accountant=accountant_for(ledger.event("agent"), privacy.accountant),
        agent=levels["agent"],
        instance=levels["instance"],
        noise_source=noise_source(
            config.method, secure=privacy.secure_noise, seeded=privacy.noise_seed is not None
        ),
        calibrated_to_epsilon=target,
        calibrated_level=calibrated_level if target is not None else None,
    )
