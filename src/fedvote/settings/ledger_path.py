"""A run's ledger path: made absolute once, where settings become a RunConfig, and probed before a run.

A ledger keeps one federation's spend; a relative path recorded in a result.json would name
another file when the config is rerun from another directory, and the federation's spend
would be split across two ledgers. So the path is made absolute where the flags, keywords or
a hand-written config become a :class:`~fedvote.config.RunConfig` (:func:`absolute_ledger`),
and a recorded config whose ledger is missing is refused (:func:`refuse_missing_recorded_ledger`).
Light: the probe's SQLite checks (:func:`fedvote.privacy.ledger_store.probe`) are imported
only when a ledger is given.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path

from fedvote.config import RunConfig
from fedvote.errors import ConfigError


def absolute_ledger(path: str | None) -> str | None:
    """``path`` made absolute against the working directory (None stays None).

    Taken as the system would open it: the working directory joined in front, and ``..``
    resolved only where the path holds one (through symbolic links, as the system does);
    otherwise it stays as typed. An empty path is refused.
    """
    if path is None:
        return None
    if not path:
        raise ConfigError("ledger", "must name a file (got an empty path)")
    absolute = Path(path).absolute()
    if ".." in absolute.parts:
        absolute = absolute.resolve()
    return os.fspath(absolute)


def with_absolute_ledger(config: RunConfig) -> RunConfig:
    """``config`` with its ledger path absolute (:func:`absolute_ledger`); itself when already so."""
    ledger = absolute_ledger(config.privacy.ledger)
    if ledger == config.privacy.ledger:
        return config
    return dataclasses.replace(config, privacy=dataclasses.replace(config.privacy, ledger=ledger))


def refuse_missing_recorded_ledger(recorded: str | None, source: str) -> None:
    """Refuse rerunning a recorded config (from ``source``) whose ledger ``recorded`` does not exist.

    Running it would open a new, empty ledger with the recorded budget and charge there: the
    federation's spend would be split across two files and its budget bypassed. Nothing is
    created or run. A config written by hand may still start a new ledger. Refused as the
    ``config`` argument, naming ``source`` and its key ``privacy.ledger``: the path came from the file.
    """
    if recorded is None:
        return
    where = absolute_ledger(recorded)
    if where is not None and not os.path.lexists(where):
        shown = recorded if recorded == where else f"{recorded} (here {where})"
        raise ConfigError(
            "config",
            f"{source}: privacy.ledger: the ledger recorded, {shown}, is missing: rerunning would start a "
            "new ledger and split the federation's spend, so nothing was run; put the ledger back there (or "
            "run from the directory the run was recorded in), or rerun from a config whose privacy.ledger "
            "names where the ledger is now",
        )


def with_checked_ledger(
    config: RunConfig, path: str, *, typed_ledger: bool = False, methods: Sequence[str] | None = None
) -> RunConfig:
    """``config`` (read from ``path``) with its ledger absolute and probed; a missing recorded ledger refused.

    A *recorded* config (:func:`~fedvote.config.is_recorded`: a result.json's) whose ledger does
    not exist is refused (:func:`refuse_missing_recorded_ledger`) unless the ledger was typed
    on the command line (``typed_ledger``: the user names where the spend goes). Every command
    that reruns a config file (run, compare, label) goes through here before anything is loaded.
    A value the file gave is refused as the ``config`` argument, naming ``path`` and its key
    (``privacy.ledger``, ``options.rounds``, ``federation.target``): its method options
    (:func:`check_options`) and dataset names (:func:`check_dataset_names`) are checked here too;
    for ``fedvote compare``'s ``methods``, each method's options as its row takes them.
    """
    from fedvote.config import is_recorded

    data = json.loads(Path(path).read_text())  # already read and checked by load_run_config
    recorded = data.get("config", data) if isinstance(data, dict) else None
    if not typed_ledger and isinstance(recorded, dict) and is_recorded(recorded):
        refuse_missing_recorded_ledger(config.privacy.ledger, path)
    check_options(config, path, methods)  # the file's method options, by their keys, before anything loads
    check_dataset_names(config, path)
    try:
        config = with_absolute_ledger(config)
        probe_ledger(config.privacy.ledger)
    except ConfigError as error:
        if typed_ledger or error.argument != "ledger":
            raise
        raise ConfigError("config", f"{path}: privacy.ledger: {error.detail}") from error
    return config


def check_dataset_names(config: RunConfig, path: str | Path) -> None:
    """Refuse a config file's unknown dataset names by their keys (``federation.target``) and the file.

    As :func:`fedvote.data.federation.dataset_names` refuses them (a source named twice, a target
    among the sources, an unknown name), but as the ``config`` argument: the names came from
    the file, not from ``--dataset``/``--target``.
    """
    from fedvote.data.federation import dataset_names

    federation = config.federation
    try:
        dataset_names(federation.dataset, federation.target, federation.data_dir)
    except ConfigError as error:
        if error.argument not in ("dataset", "target"):
            raise
        raise ConfigError("config", f"{path}: federation.{error.argument}: {error.detail}") from error


def check_options(
    config: RunConfig, path: str | Path | None = None, methods: Sequence[str] | None = None
) -> None:
    """Refuse a config file's bad method options naming their keys (``options.learning_rate``) and the file.

    :func:`fedvote.methods.registry.check_options` names the option as a flag would
    (``learning_rate``, printed ``--learning-rate``); a value read from a file is refused as
    the ``config`` argument: ``PATH: options.learning_rate: must be > 0, got -1``. Light: the
    registry imports no method. With ``methods`` (``fedvote compare``), each of them is checked
    with the options its row takes, as :func:`fedvote.compare` hands each row those (a recorded
    config holds every gradient setting; the rows take what applies to them).
    """
    from fedvote.methods.registry import check_options as check_method_options
    from fedvote.methods.registry import option_names

    rows = [config] if methods is None else [
        dataclasses.replace(
            config, method=name, options={k: v for k, v in config.options.items() if k in option_names(name)}
        )
        for name in methods
    ]
    try:
        for row in rows:
            check_method_options(row)
    except ConfigError as error:
        if error.argument == "config":
            raise
        key = "method" if error.argument == "method" else f"options.{error.argument}"
        where = f"{path}: " if path is not None else ""
        raise ConfigError("config", f"{where}{key}: {error.detail}") from error


def probe_ledger(path: str | None) -> None:
    """Refuse, naming ``--ledger``, a ledger path no run could charge to, before anything is loaded.

    :func:`fedvote.privacy.ledger_store.probe`: cheap, leaves nothing behind.
    """
    if path is None:
        return
    from fedvote.privacy.ledger_store import probe  # lazy: dp_accounting, only when a ledger is given

    probe(path)
