"""From flat settings to RunConfigs: one path for ``fedvote run``'s flags and :func:`fedvote.run`'s keywords.

One list of settings (:data:`FEDERATION_SETTINGS`, :data:`RUN_SETTINGS`, every method's
options on top), one set of defaults, one set of refusals: :func:`build_config` (the
Python API) and the command line (:func:`configs_from_settings`, via
:mod:`fedvote.cli.run_options`) build the same validated :class:`~fedvote.config.RunConfig`.
Each method's options are validated as the method builds them
(:func:`fedvote.methods.registry.check_options`) without importing the method: this
module imports nothing heavy, so ``fedvote run --agents 0`` is refused at once. Re-exported
by :mod:`fedvote.runner`. A package of its own (issue 44): a run setting is no method's
concern; the command line (:mod:`fedvote.cli.run_options`) and :func:`fedvote.run` both read it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import numbers
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from fedvote.config import FederationConfig, PrivacyConfig, RunConfig
from fedvote.data.datasets import DATA_ENV
from fedvote.data.framing import FRAMINGS
from fedvote.data.partition import PARTITION_SCHEMES, PartitionSpec
from fedvote.data.query_selection import QUERY_SELECTIONS
from fedvote.errors import ConfigError
from fedvote.methods.registry import check_options, check_secure_noise, method_option_specs, option_names
from fedvote.models.config import (
    DEFAULT_EPOCHS,
    INPUT_FEATURES,
    MODEL_NAMES,
    PRECISIONS,
    STUDENT_TRAINING,
    TrainingConfig,
)
from fedvote.privacy.config import ACCOUNTANTS
from fedvote.settings.ledger_path import absolute_ledger, probe_ledger


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
    Setting("input_features", str, "auto", INPUT_FEATURES),
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
    Setting("query_selection", str, "auto", QUERY_SELECTIONS),
    Setting("min_responders", int),
    Setting("teacher_model", str, "auto", tuple(MODEL_NAMES)),
    Setting("student_model", str, "auto", tuple(MODEL_NAMES)),
    Setting("epochs", int),
    Setting("student_epochs", int),
    Setting("augment_shift", int, 0),
    Setting("self_training_rounds", int, 2),
    Setting("semi_supervised", str, "auto", STUDENT_TRAINING),
    Setting("student_precision", str, "auto", PRECISIONS),
    Setting("seed", int, 0),
    Setting("noise_seed", int),
    Setting("ledger", str),
    Setting("budget_epsilon", float),
    Setting("secure_sum", bool, False),
    Setting("secure_noise", bool, False),
)

# Settings naming a file or directory: a ``pathlib.Path`` is taken as its string.
_PATH_SETTINGS = frozenset({"data_dir", "ledger"})
# The federation settings that make its ``PartitionSpec``.
_PARTITION = frozenset({"partition", "dirichlet_alpha", "classes_per_agent", "shards_per_agent"})


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
        _refuse_a_file(DATA_ENV, federation_values["data_dir"])
    else:
        _refuse_a_file("data_dir", federation_values["data_dir"])
    specs = method_option_specs()
    # Every flag is a keyword of the same name, also where a field is named otherwise
    # (--knn-bound: knn_bound or bound; --normalize-features: normalize_features or normalize).
    by_flag = {spec.flag.removeprefix("--").replace("-", "_"): spec.name for spec in specs.values()}
    for flag_name, field_name in by_flag.items():
        if flag_name != field_name and flag_name in settings:
            if field_name in settings:
                raise ConfigError(flag_name, f"given twice: as {flag_name} and as {field_name}")
            settings[field_name] = settings.pop(flag_name)
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


def _refuse_a_file(argument: str, data_dir: str | None) -> None:
    """Refuse a data directory that is a file, naming ``argument``: ``data_dir``, or ``FEDVOTE_DATA``.

    ``FEDVOTE_DATA`` when the value came from the environment; as ``--data-dir``'s check does
    (``fedvote.cli.options.check_data_dir``).
    """
    if not data_dir or not os.path.exists(os.path.expanduser(data_dir)):
        return
    if os.path.isdir(os.path.expanduser(data_dir)):
        return
    fix = (
        f"set {DATA_ENV} to the directory holding the datasets (or unset it), or give data_dir"
        if argument == DATA_ENV
        else "give the directory holding the datasets"
    )
    raise ConfigError(argument, f"{data_dir} is a file, not a directory; {fix}")


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
    options are validated as its method validates them
    (:func:`~fedvote.methods.registry.check_options`) before anything is loaded or
    imported for training. ``fedvote run``/``sweep``/``label`` and :func:`build_config`
    come through here. The ledger path is made absolute against the working directory
    (:func:`~fedvote.settings.ledger_path.absolute_ledger`: result.json records where the
    charges went) and probed (:func:`~fedvote.settings.ledger_path.probe_ledger`: a path no
    run could charge to is refused, naming ``ledger``, before any data is loaded).
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
        check_options(config)
        check_secure_noise(config)
    probe_ledger(configs[0].privacy.ledger)  # the same for every method: before anything is loaded
    return configs


def _config_of(
    method: str, federation: FederationConfig, f: Mapping[str, Any], options: dict[str, Any]
) -> RunConfig:
    """The RunConfig the settings ``f`` describe for ``method``."""
    with _named_as({"model": "teacher_model"}):
        teacher = TrainingConfig(model=f["teacher_model"], epochs=f["epochs"])
    student_epochs = "student_epochs" if f["student_epochs"] is not None else "epochs"
    with _named_as({"model": "student_model", "epochs": student_epochs, "precision": "student_precision"}):
        student = TrainingConfig(
            model=f["student_model"],
            epochs=next(e for e in (f["student_epochs"], f["epochs"], DEFAULT_EPOCHS) if e is not None),
            augment_shift=f["augment_shift"],
            precision=f["student_precision"],
        )
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
            ledger=absolute_ledger(f["ledger"]),  # absolute: a rerun elsewhere charges the same ledger
            budget_epsilon=f["budget_epsilon"],
            calibrate_level=f["calibrate_level"],
            secure_sum=f["secure_sum"],
            secure_noise=f["secure_noise"],
        ),
        teacher=teacher,
        student=student,
        queries=f["queries"],
        query_selection=f["query_selection"],
        self_training_rounds=f["self_training_rounds"],
        semi_supervised=f["semi_supervised"],
        seed=f["seed"],
        options=options,
    )


@contextlib.contextmanager
def _named_as(settings: Mapping[str, str]) -> Iterator[None]:
    """A refusal of a :class:`TrainingConfig` field names the setting (the flag) that gave its value.

    ``TrainingConfig`` names its own fields (``epochs``, ``model``); the student's epochs came
    from ``--student-epochs`` when it was given, its model from ``--student-model``.
    """
    try:
        yield
    except ConfigError as error:
        if error.argument not in settings:
            raise
        raise ConfigError(settings[error.argument], error.detail) from error


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
