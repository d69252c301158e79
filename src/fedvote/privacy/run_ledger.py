"""A run's ledger: keyed by its federation's content, opened one way, and what it holds when a run stops.

Every command (run, compare, sweep, label, the Flower server) opens its ledger with
:func:`open_ledger` and checks a plan against the budget with :func:`check_budget` before
anything is trained or charged; a run that stops after a charge says what it charged in one
line (:func:`charge_note`, attached to the error by :func:`note_charge`). Moved here from
:mod:`fedvote.runner`, which re-exports these names.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from fedvote.config import RunConfig
from fedvote.data.federation import Federation
from fedvote.data.record_hashes import sorted_hashes_of
from fedvote.privacy.accountant import bounded_epsilon
from fedvote.privacy.events import LevelEvents
from fedvote.privacy.ledger import LedgerSession, PersistentLedger, PrivacyLedger
from fedvote.results import finite_or_none

CHARGE_NOTE_PREFIX = "fedvote charge: "


def charge_note(config: RunConfig, ledger: PrivacyLedger) -> str:
    """One line saying what ``ledger`` holds of this run and where it is recorded.

    For a run that stopped (an error, an interrupt) before its result was written: its
    releases up to there were charged, and the user must learn what they cost — ε at both
    levels at the run's δ and accountant — and where the charge lives (the ledger file and
    federation, or in memory only). Never raises: a figure that cannot be computed says so.
    """
    charges = len(ledger.charges)
    if not charges:
        return "nothing was charged (no release happened)"
    privacy = config.privacy
    figures = []
    for level in ("agent", "instance"):
        try:
            bounded = bounded_epsilon(ledger.event(level), privacy.delta, privacy.accountant)
            epsilon = finite_or_none(bounded.epsilon)
            shown = "unbounded" if epsilon is None else f"{epsilon:.4f}"
            if bounded.fallback is not None:
                shown += f" [{bounded.accountant}: no pld]"
        except Exception as error:  # noqa: BLE001 - the note must come out whatever failed
            shown = f"not computed ({type(error).__name__})"
        figures.append(f"{level}-level ε {shown}")
    persistent = persistent_ledger(ledger)
    where = (
        f"recorded in the ledger {persistent.path} (federation {persistent.federation})"
        if persistent is not None
        else "in memory only, nothing recorded (no --ledger)"
    )
    return (
        f"{charges} release(s) were charged before it stopped: {', '.join(figures)} "
        f"at δ = {privacy.delta:g} [{privacy.accountant}], {where}"
    )


def note_charge(error: BaseException, config: RunConfig, ledger: PrivacyLedger) -> None:
    """Attach :func:`charge_note` to ``error`` (a PEP 678 note, shown under its traceback).

    The command line prints it as one line in place of a traceback or a bare "aborted"
    (:func:`charge_note_of`). A note already attached (an inner run of a compare) is kept.
    """
    if charge_note_of(error) is None:
        error.add_note(CHARGE_NOTE_PREFIX + charge_note(config, ledger))


def charge_note_of(error: BaseException | None) -> str | None:
    """The charge note attached to ``error`` or to an exception it was raised from, if any."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        for note in getattr(error, "__notes__", ()):
            if isinstance(note, str) and note.startswith(CHARGE_NOTE_PREFIX):
                return note.removeprefix(CHARGE_NOTE_PREFIX)
        error = error.__cause__ or error.__context__
    return None


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
    config: RunConfig,
    federation: Federation | None = None,
    *,
    content_key: str | None = None,
    record_hashes: np.ndarray | None = None,
) -> PrivacyLedger:
    """The run's ledger: persisted in ``config.privacy.ledger`` when given, else in memory.

    The federation is keyed by :func:`federation_content_key` of ``federation`` (its
    agents' records) — or ``content_key``, the same key computed where the records were
    (a Flower server reads it from the deployment's server file) — with the config's
    legacy :func:`federation_fingerprint` as an alias so that charges and budgets of older
    ledgers still count. With neither (a server file written before the key existed) the
    key is the fingerprint. The budget binds by record: the sorted 64-bit hashes of the
    agents' records' features (:func:`~fedvote.data.record_hashes.sorted_hashes_of`, or
    ``record_hashes`` computed where the records were) are stored with the federation, and
    every stored federation sharing a record with it counts
    (:class:`~fedvote.privacy.ledger.PersistentLedger`). ``config.privacy.budget_epsilon``
    is stored for a new federation and must match the stored budget otherwise.

    Every command opens it as a context manager, ``with open_ledger(config, federation) as
    ledger:``; leaving the block closes a persisted ledger's file (every charge is already
    committed) and an error inside it leaves the block the same way.
    """
    privacy = config.privacy
    if privacy.ledger is None:
        return PrivacyLedger()
    fingerprint = federation_fingerprint(config)
    key = federation_content_key(federation) if federation is not None else (content_key or fingerprint)
    if federation is not None:
        record_hashes = sorted_hashes_of(agent.features for agent in federation.agents)
    return PersistentLedger(
        privacy.ledger,
        federation=key,
        budget_epsilon=privacy.budget_epsilon,
        delta=privacy.delta,
        level="agent",
        accountant=privacy.accountant,
        aliases=(fingerprint,),
        records=record_hashes,
        command=config.method,
    )


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


def ledger_details(ledger: PrivacyLedger) -> dict[str, object]:
    """The persisted ledger's state after a run: its federation, its records' spend, the budgets that bind.

    The spend composes the charges of every federation sharing a record with this one
    (what a run on it is checked against); ``overlaps`` names those federations.
    """
    persistent = persistent_ledger(ledger)
    if persistent is None:
        return {}
    spent = {level: persistent.spent(level) for level in ("agent", "instance")}
    budgets = persistent.effective_budgets()
    instance_budget = budgets.get("instance")
    agent_budget = budgets.get("agent")
    details: dict[str, object] = {
        "path": str(persistent.path),
        "federation": persistent.federation,
        "spent_agent_epsilon": finite_or_none(spent["agent"]),
        "spent_instance_epsilon": finite_or_none(spent["instance"]),
        "budget_epsilon": agent_budget.epsilon if agent_budget is not None else None,
        "budget_instance_epsilon": instance_budget.epsilon if instance_budget is not None else None,
    }
    if persistent.overlaps:
        details["overlaps"] = [
            {"federation": key, "shared_records": count} for key, count in sorted(persistent.overlaps.items())
        ]
    return {"ledger": details}
