"""Run configuration: frozen dataclasses, validated at construction, JSON round-trippable.

Nothing here knows the methods: a run's method and its own settings (``RunConfig.options``,
the fields of the method's ``options_type``) are validated where the method is resolved
(:func:`fedvote.methods.check_method`, called by the CLI and by :func:`fedvote.runner.run`
before anything is loaded or trained).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import numbers
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedvote.data.framing import FRAMINGS
from fedvote.data.partition import PartitionSpec
from fedvote.data.query_selection import QUERY_SELECTIONS
from fedvote.errors import ConfigError
from fedvote.models.config import INPUT_FEATURES, TrainingConfig, check_student_training
from fedvote.privacy.config import ACCOUNTANTS, SIGMA_CEILING

# With neither --sigma nor --epsilon, σ is calibrated to this agent-level ε (the
# operating point of the voting paper's Table 1).
DEFAULT_EPSILON = 4.0


# The largest side --image-size resamples to (the memory the images take is checked too).
MAX_IMAGE_SIZE = 4096
# Seeds: --seed reaches scikit-learn and torch generators, which take 32 bits; --noise-seed
# only NumPy's SeedSequence, but is recorded and derived (privacy.noise_seeds) as a
# non-negative int64.
MAX_SEED = 2**32 - 1
MAX_NOISE_SEED = 2**63 - 1


def _finite(value: float) -> float:
    """``value``, or NaN (which fails every comparison) when it is infinite."""
    return value if math.isfinite(value) else math.nan


def _check_seed(name: str, value: int | None, largest: int) -> None:
    if value is None and name == "noise_seed":
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value <= largest:
        raise ConfigError(name, f"must be an integer from 0 to {largest}, got {value!r}")


@dataclass(frozen=True)
class FederationConfig:
    """Which data, how many agents, how it is split.

    ``dataset`` names the agents' data (several, comma-separated, with ``target``);
    ``target`` the domain of the public pool and the test set (None: the same dataset).
    ``public_fraction`` (default by scenario, see :func:`fedvote.runner.make_federation`)
    and ``test_fraction`` size the pool and the test set; agents split the rest by
    ``partition``. ``image_size`` resamples all images to a square of that side.
    ``framing`` frames digit images as MNIST's are (:mod:`fedvote.data.framing`):
    ``auto`` when a target's grey images differ in size from the sources'.
    ``input_features`` is what every record is seen through (:data:`INPUT_FEATURES`,
    :mod:`fedvote.models.input_features`): a public map fitted on the pool alone; ``auto``
    is the patch features for CIFAR-10 and Fashion-MNIST (for the methods that do not fit
    their own PCA: :func:`fedvote.runner.input_features_kind`), the records as they are otherwise.
    """

    dataset: str = "digits"
    data_dir: str | None = None
    agents: int = 50
    partition: PartitionSpec = field(default_factory=PartitionSpec)
    public_fraction: float | None = None
    test_fraction: float = 0.15
    target: str | None = None
    image_size: int | None = None
    label_column: str = "label"
    framing: str = "auto"
    input_features: str = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.dataset, str) or not any(name.strip() for name in self.dataset.split(",")):
            raise ConfigError("dataset", f"must name a dataset, got {self.dataset!r}")
        if self.agents < 1:
            raise ConfigError("agents", f"must be at least 1, got {self.agents}")
        if self.image_size is not None and not 1 <= self.image_size <= MAX_IMAGE_SIZE:
            raise ConfigError("image_size", f"must be from 1 to {MAX_IMAGE_SIZE}, got {self.image_size}")
        if self.framing not in FRAMINGS:
            raise ConfigError("framing", f"must be one of {', '.join(FRAMINGS)}, got {self.framing!r}")
        if self.input_features not in INPUT_FEATURES:
            raise ConfigError(
                "input_features", f"must be one of {', '.join(INPUT_FEATURES)}, got {self.input_features!r}"
            )


@dataclass(frozen=True)
class PrivacyConfig:
    """Noise and accounting.

    Give ``sigma`` (aggregate noise std; 0 = non-private reference) *or* ``epsilon``
    (σ is calibrated so the ε at ``delta`` at ``calibrate_level`` — by default the
    method's own, agent level for voting and DP-FedAvg — does not exceed it). With
    neither, ``epsilon`` defaults to :data:`DEFAULT_EPSILON`.

    ``min_responders`` is t (default: all agents). ``noise_seed`` seeds the privacy
    noise for a reproducible simulation; ``None`` draws it from OS entropy.

    ``ledger`` is a SQLite file where every release is charged before it happens,
    accumulating across runs on the same federation; ``budget_epsilon`` caps that
    federation's agent-level ε there (a run that would exceed it stops before releasing).

    ``secure_sum`` routes the in-process vote sums through the pairwise-mask secure-sum
    protocol (:mod:`fedvote.aggregation.secure_sum`); it changes what the simulated server
    sees, not ε.

    ``secure_noise`` draws the privacy noise for deployment (``docs/privacy.md``, "Secure
    noise"): integer votes get exact discrete Gaussian noise from a CSPRNG, real-valued
    releases Gaussians from CSPRNG-seeded generators. It contradicts ``noise_seed``.
    """

    sigma: float | None = None
    epsilon: float | None = None
    delta: float = 1e-3
    accountant: str = "pld"
    min_responders: int | None = None
    noise_seed: int | None = None
    ledger: str | None = None
    budget_epsilon: float | None = None
    calibrate_level: str | None = None
    secure_sum: bool = False
    secure_noise: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.secure_sum, bool):
            raise ConfigError("secure_sum", f"must be true or false, got {self.secure_sum!r}")
        if not isinstance(self.secure_noise, bool):
            raise ConfigError("secure_noise", f"must be true or false, got {self.secure_noise!r}")
        if self.secure_noise and self.noise_seed is not None:
            raise ConfigError(
                "secure_noise", "draws from the OS CSPRNG, which cannot be seeded: drop --noise-seed"
            )
        if self.calibrate_level not in (None, "agent", "instance"):
            raise ConfigError(
                "calibrate_level", f"must be 'agent' or 'instance', got {self.calibrate_level!r}"
            )
        if self.budget_epsilon is not None and self.ledger is None:
            raise ConfigError("budget_epsilon", "a budget needs a ledger to keep it: add --ledger PATH")
        if self.budget_epsilon is not None and not _finite(self.budget_epsilon) > 0:
            raise ConfigError("budget_epsilon", f"must be a finite number > 0, got {self.budget_epsilon}")
        if self.sigma is not None and self.epsilon is not None:
            raise ConfigError("sigma", "give either sigma or epsilon, not both")
        if self.sigma is not None and not _finite(self.sigma) >= 0:
            raise ConfigError("sigma", f"must be a finite number >= 0, got {self.sigma}")
        if self.sigma is not None and self.sigma > SIGMA_CEILING:
            raise ConfigError(
                "sigma",
                f"must be at most {SIGMA_CEILING:g} (noise that drowns every release: ε ≈ 0, nothing "
                f"is learned), got {self.sigma:g}",
            )
        if self.epsilon is not None and not _finite(self.epsilon) > 0:
            raise ConfigError("epsilon", f"must be a finite number > 0, got {self.epsilon}")
        if not 0.0 < self.delta < 1.0:
            raise ConfigError("delta", f"must lie in (0, 1), got {self.delta}")
        if self.accountant not in ACCOUNTANTS:
            raise ConfigError(
                "accountant",
                f"unknown accountant {self.accountant!r}; choose from {', '.join(ACCOUNTANTS)}",
            )
        if self.min_responders is not None and self.min_responders < 1:
            raise ConfigError("min_responders", f"must be at least 1, got {self.min_responders}")
        _check_seed("noise_seed", self.noise_seed, MAX_NOISE_SEED)

    @property
    def target_epsilon(self) -> float | None:
        """The ε that σ is calibrated to, or None when σ is given."""
        if self.sigma is not None:
            return None
        return self.epsilon if self.epsilon is not None else DEFAULT_EPSILON


# The sections of result.json before kNN and gradient settings became method options
# (``knn``, ``gradient``): each key with its value then by default, and the option it is now.
# A legacy value equal to that default was not given (it is the option's default too) and
# is dropped; any other value becomes the option of that name (refused, by name, at run
# time by a method that does not take it).
_LEGACY_SECTIONS: dict[str, dict[str, tuple[Any, str]]] = {
    "knn": {
        "k": (None, "k"),
        "k_fraction": (0.05, "k_fraction"),
        "features": ("pca", "features"),
        "feature_dim": (50, "feature_dim"),
        "feature_module": (None, "feature_module"),
        "normalize": (False, "normalize"),
        "bound": ("tight", "bound"),
    },
    "gradient": {
        **{
            name: (None, name)
            for name in (
                "rounds", "sampling_rate", "local_steps", "clip_norm", "per_sample_clip",
                "learning_rate", "lr_decay", "batch_size", "batch_sampling_rate",
            )
        },  # fmt: skip
        "noise": ("distributed", "noise"),
        "model": ("mlp", "gradient_model"),
    },
}


def _legacy_options(data: dict[str, Any]) -> dict[str, Any]:
    """The options that a config's legacy ``knn``/``gradient`` sections (popped from ``data``) set."""
    options: dict[str, Any] = {}
    for section, fields in _LEGACY_SECTIONS.items():
        values = data.pop(section, None)
        if values is None:
            continue
        if not isinstance(values, dict):
            raise ConfigError(section, f"expected an object, got {values!r}")
        for key, value in values.items():
            if key not in fields:
                raise ConfigError(section, f"unknown setting {key!r}")
            default, option = fields[key]
            if value != default or type(value) is not type(default):
                options[option] = value
    return options


@dataclass(frozen=True)
class RunConfig:
    """Everything needed to rerun a run: method, federation, privacy, training, seed."""

    method: str = "pate-fl"
    federation: FederationConfig = field(default_factory=FederationConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    # "auto" and no epochs: chosen from public metadata when the method is planned
    # (fedvote.models.config.teacher_training); the student trains for its epochs as given.
    teacher: TrainingConfig = field(default_factory=lambda: TrainingConfig(model="auto", epochs=None))
    # "auto" precision: bfloat16 products for images of at least 16x16 where the CPU has them
    # (fedvote.models.precision).
    student: TrainingConfig = field(default_factory=lambda: TrainingConfig(model="auto", precision="auto"))
    queries: int | None = None
    query_selection: str = "auto"
    self_training_rounds: int = 2
    semi_supervised: str = "auto"
    seed: int = 0
    # The method's own settings (the fields of its ``options_type``: kNN, gradient, voting
    # settings, …), validated where the method is resolved (fedvote.methods.check_method).
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.method, str) or not self.method:
            raise ConfigError("method", f"must name a method, got {self.method!r}")
        if not isinstance(self.options, dict) or not all(isinstance(k, str) for k in self.options):
            raise ConfigError("options", f"must map option names to values, got {self.options!r}")
        if self.self_training_rounds < 0:
            raise ConfigError(
                "self_training_rounds", f"must be >= 0, got {self.self_training_rounds}"
            )
        check_student_training(self.semi_supervised)
        if self.teacher.precision != "float32":
            raise ConfigError(
                "teacher.precision",
                f"teachers train in float32 (the batched ensemble), got {self.teacher.precision!r}",
            )
        if self.student.epochs is None:
            raise ConfigError("student_epochs", "must be given (only the teachers' epochs are planned)")
        if self.queries is not None and self.queries < 1:
            raise ConfigError("queries", f"must be at least 1, got {self.queries}")
        if self.query_selection not in QUERY_SELECTIONS:
            choices = ", ".join(QUERY_SELECTIONS)
            raise ConfigError("query_selection", f"must be one of {choices}, got {self.query_selection!r}")
        _check_seed("seed", self.seed, MAX_SEED)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready nested dict (the ``config`` key of result.json)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Rebuild a config from :meth:`to_dict` output (unknown keys are refused).

        A file without ``semi_supervised`` (written before the consistency students)
        reruns with the student it had, ``"self-training"``; one whose student has no
        ``precision`` (before bfloat16 students) reruns it in float32. Older result.json files kept
        the kNN and gradient settings in sections of their own
        (``knn``, ``gradient``); their given values become options of the same names (the
        gradient ``model`` is ``gradient_model``). An option both there and in ``options``
        is refused. A value of the wrong JSON type, a section that is not an object and an
        unknown field are refused naming the field (``federation.agents must be an integer,
        got "ten"``), as the ``config`` argument; so is a value a section refuses
        (``teacher.learning_rate: must be > 0, got -1``), by its key, not by a flag's name.

        Those rules are for *recorded* configs (:func:`is_recorded`). A config written by hand
        with only the keys to change takes today's defaults for every key it leaves out, in
        each section too (``{"teacher": {"epochs": 10}}`` keeps the planned ``auto`` model), as
        ``fedvote run`` with no flags would.
        """
        data = dict(_section(data, "config"))
        if not is_recorded(data):
            data = _with_todays_defaults(data)
        # A run recorded before ``semi_supervised`` existed self-trained its student: rerun it so.
        data.setdefault("semi_supervised", "self-training")
        # ... and before ``query_selection`` existed chose its queries at random.
        data.setdefault("query_selection", "random")
        legacy = _legacy_options(data)
        options = dict(_section(data.pop("options", None) or {}, "options"))
        for name in legacy:
            if name in options and options[name] != legacy[name]:
                raise ConfigError(name, "given twice: in the legacy section and in options")
        federation = dict(_section(data.pop("federation", {}), "federation"))
        # A run recorded before ``framing`` existed resampled its domains plainly: rerun it so.
        federation.setdefault("framing", "none")
        # ... and before ``input_features`` existed saw the records as they are.
        federation.setdefault("input_features", "none")
        partition_values = _section(federation.pop("partition", {}), "federation.partition")
        _check_types(PartitionSpec, partition_values, "federation.partition.")
        _check_types(FederationConfig, federation, "federation.")
        for name, section_type in _SECTIONS.items():
            if name in data and name != "federation":
                _check_types(section_type, _section(data[name], name), f"{name}.")
        _check_types(cls, data, "")
        with _keyed("federation.partition.", _PARTITION_KEYS):
            partition = PartitionSpec(**partition_values)
        with _keyed("federation."):
            federation_config = FederationConfig(partition=partition, **federation)
        with _keyed("privacy."):
            privacy = PrivacyConfig(**data.pop("privacy", {}))
        with _keyed("teacher."):
            teacher = TrainingConfig(**data.pop("teacher", {}))
        with _keyed("student."):
            student = TrainingConfig(**data.pop("student", {}))
        with _keyed("", _RUN_KEYS):
            return cls(
                federation=federation_config,
                privacy=privacy,
                teacher=teacher,
                student=student,
                options={**legacy, **options},
                **data,
            )


# The arguments a section's refusals name that are not its keys: the flags' names (the
# settings of fedvote.settings) where they differ from the config's.
_PARTITION_KEYS = {"partition": "scheme", "dirichlet_alpha": "alpha"}
_RUN_KEYS = {"student_epochs": "student.epochs"}


@contextlib.contextmanager
def _keyed(prefix: str, keys: dict[str, str] | None = None) -> Iterator[None]:
    """A refusal raised in a section of a config being read names its key (``teacher.learning_rate``).

    The value came from the config, not from a flag: :meth:`RunConfig.from_dict` refuses it as
    the ``config`` argument, ``<key>: <detail>`` (``teacher.learning_rate: must be > 0, got -1``),
    as it refuses a value of the wrong type. A refusal already naming ``config`` passes as it is.
    """
    try:
        yield
    except ConfigError as error:
        if error.argument == "config":
            raise
        key = (keys or {}).get(error.argument, error.argument)
        key = key if "." in key else prefix + key
        raise ConfigError("config", f"{key}: {error.detail}") from error


# What every config fedvote has recorded holds (RunConfig.to_dict, since its first version), at
# the top and in its federation section; a config written by hand with only the keys to change
# does not hold them all.
_RECORDED_KEYS = frozenset({"method", "federation", "privacy", "teacher", "student", "queries", "seed"})
_RECORDED_FEDERATION_KEYS = frozenset(
    {"dataset", "data_dir", "agents", "partition", "public_fraction", "test_fraction"}
)


def is_recorded(data: dict[str, Any]) -> bool:
    """Whether ``data`` is a config fedvote recorded, not one written by hand with only the keys to change.

    Recorded: a result.json's ``config``, ``deploy split``'s run.json. A recorded config holds
    every key :meth:`RunConfig.to_dict` has written since its first version; its missing keys
    are fields added since, and it reruns as the run did before them.
    """
    federation = data.get("federation")
    return (
        _RECORDED_KEYS <= data.keys()
        and isinstance(federation, dict)
        and _RECORDED_FEDERATION_KEYS <= federation.keys()
    )


def _with_todays_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """``data``, a config written by hand, completed with :class:`RunConfig`'s defaults section by section."""
    defaults = RunConfig().to_dict()
    completed = {**defaults, **data}
    for name in _SECTIONS:
        if isinstance(data.get(name), dict):
            completed[name] = {**defaults[name], **data[name]}
    given = data.get("federation")
    if isinstance(given, dict) and isinstance(given.get("partition"), dict):  # a section within a section
        completed["federation"]["partition"] = {**defaults["federation"]["partition"], **given["partition"]}
    return completed


# A config's sections and the dataclass of each (for type checks and "did you mean").
_SECTIONS: dict[str, type] = {
    "federation": FederationConfig,
    "privacy": PrivacyConfig,
    "teacher": TrainingConfig,
    "student": TrainingConfig,
}


def _section(value: Any, name: str) -> dict[str, Any]:
    """``value``, a section of a config, refused by name unless it is a JSON object."""
    if not isinstance(value, dict):
        raise ConfigError("config", f"{name} must be an object, got {_shown(value)}")
    return value


def _check_types(cls: type, values: dict[str, Any], prefix: str) -> None:
    """Refuse, naming the field (``prefix`` + its name), a value of the wrong JSON type for ``cls``.

    Integers pass for floats (JSON does not tell 4 from 4.0); booleans pass for nothing
    but booleans. A key that is not a field is refused too, with the section that has it.
    """
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        if name not in hints:
            owners = [f"{section}.{name}" for section, kind in _SECTIONS.items() if name in _fields(kind)]
            hint = f" (did you mean {' or '.join(owners)}?)" if owners and not prefix else ""
            raise ConfigError("config", f"unknown field {prefix}{name}{hint}")
        expected = _type_mismatch(value, hints[name])
        if expected is not None:
            raise ConfigError("config", f"{prefix}{name} must be {expected}, got {_shown(value)}")


def _fields(cls: type) -> set[str]:
    return {item.name for item in dataclasses.fields(cls)}


# The JSON values a field of each type accepts, and how a message names them.
_JSON_TYPES: dict[type, tuple[type, ...]] = {
    bool: (bool,),
    int: (int,),
    float: (int, float),
    str: (str,),
    dict: (dict,),
}
_JSON_KINDS: dict[type, str] = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    dict: "an object",
}


def _type_mismatch(value: Any, hint: Any) -> str | None:
    """What ``value`` should have been for a field annotated ``hint`` (None: it fits, or is not checked)."""
    union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    kinds = [typing.get_origin(arg) or arg for arg in (typing.get_args(hint) if union else (hint,))]
    if value is None:
        return None if type(None) in kinds else _describe_kinds(kinds)
    for kind in kinds:
        if kind is type(None):
            continue
        if kind not in _JSON_TYPES:
            return None  # a type this check does not know: the constructor's to judge
        if isinstance(value, bool) == (kind is bool) and isinstance(value, _JSON_TYPES[kind]):
            return None
    return _describe_kinds(kinds)


def _describe_kinds(kinds: list[Any]) -> str:
    names = [_JSON_KINDS[kind] for kind in kinds if kind in _JSON_KINDS]
    return " or ".join(names + (["null"] if type(None) in kinds else []))


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def load_run_config(path: str | Path, *, one_run: bool = False) -> RunConfig:
    """The RunConfig stored in ``path``: a result.json (its ``config``) or a bare config.

    Refused, naming ``config``: a config without its ``federation`` section (it would run on
    the default federation, not the one recorded) and, with ``one_run`` (``fedvote run``), a
    ``compare.json``, whose config holds one method of several: rerunning it would run that
    one alone.
    """
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError) as error:  # ValueError: not UTF-8, not JSON
        raise ConfigError("config", f"cannot read {path}: {error}") from error
    if not isinstance(data, dict):
        raise ConfigError("config", f"{path} does not hold a JSON object")
    if one_run and "rows" in data and "config" in data:
        raise ConfigError(
            "config",
            f"{path} is a compare.json (several methods); fedvote run reruns one run's result.json: "
            f"use fedvote compare --config {path}",
        )
    recorded = data.get("config", data)
    try:
        config = RunConfig.from_dict(recorded)
    except TypeError as error:
        raise ConfigError("config", f"{path} is not a fedvote config: {error}") from error
    except ConfigError as error:
        if error.argument != "config":
            raise
        raise ConfigError("config", f"{path}: {error.detail}") from error
    if isinstance(recorded, dict) and "federation" not in recorded:
        raise ConfigError(
            "config",
            f"{path} has no federation section: it would run on the default federation, not the "
            "one recorded; give a result.json, or its whole 'config' object",
        )
    return config
