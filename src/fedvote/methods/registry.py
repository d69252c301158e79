"""Every method by name, with its options dataclass: what the command line needs of the methods.

``fedvote run --help`` lists ``--method``'s choices and one flag per method option, and a
config is refused (an unknown method, an option the method does not take, a bad value)
before anything runs. Neither needs the methods' code, which imports torch, scipy and
dp_accounting; so each method is registered here by its name and its options dataclass
(kept in the light :mod:`fedvote.methods.options` package), and this module imports
nothing heavy: ``fedvote --help`` answers in well under a second.

The classes themselves are still discovered (:data:`fedvote.methods.METHODS`), and the
discovery refuses a method missing here or registered with other options (``TypeError``),
so this table cannot drift from the code.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from fedvote.errors import ConfigError
from fedvote.methods.options import OptionSpec, build_options, option_specs
from fedvote.methods.options.fedaux import FedAuxOptions
from fedvote.methods.options.gradient import (
    DpFedAvgOptions,
    DpFedSgdOptions,
    DpFtrlOptions,
    FedAvgOptions,
    PriFedSyncOptions,
)
from fedvote.methods.options.multilabel import MultiLabelOptions
from fedvote.methods.options.voting import (
    KnnOptions,
    MajorityVoteOptions,
    PateFLOptions,
    WeightedVotingOptions,
)

if TYPE_CHECKING:
    from fedvote.config import RunConfig

# Each method's name and its options dataclass (``Method.options_type``; None: it has none).
OPTIONS: dict[str, type | None] = {
    "dp-fedavg": DpFedAvgOptions,
    "dp-fedavg-multilabel": DpFedAvgOptions,
    "dp-fedsgd": DpFedSgdOptions,
    "dp-ftrl": DpFtrlOptions,
    "fedaux-f": FedAuxOptions,
    "fedaux-fdp": FedAuxOptions,
    "fedavg": FedAvgOptions,
    "fedavg-p": FedAuxOptions,
    "fedd-p": FedAuxOptions,
    "majority-vote": MajorityVoteOptions,
    "pate-fl": PateFLOptions,
    "pate-fl-multilabel": MultiLabelOptions,
    "prifedsync": PriFedSyncOptions,
    "private-knn-fl": KnnOptions,
    "weighted-pate": WeightedVotingOptions,
}

METHOD_NAMES: tuple[str, ...] = tuple(sorted(OPTIONS))

# --secure-noise: each method on the secure path, with the result.json ``noise_source`` of
# its privacy noise (fedvote.aggregation.secure_noise), and why each other method refuses it.
SECURE_NOISE_SOURCES: dict[str, str] = {
    "pate-fl": "csprng-discrete-gaussian",
    "private-knn-fl": "csprng-discrete-gaussian",
    "weighted-pate": "csprng-discrete-gaussian",
    "dp-fedavg": "csprng-distributed-discrete-gaussian",
    "dp-fedsgd": "csprng-seeded-torch",
}
_NO_SECURE_NOISE: dict[str, str] = {
    "majority-vote": "adds no noise",
    "fedavg": "adds no noise",
    "dp-ftrl": "its tree's noise is added by the server from the run's generator, not from agents' shares",
    "prifedsync": "its clients' DP-SGD noise comes from the batched trainer's generator, not yet a "
    "CSPRNG-seeded one",
    "fedaux-fdp": "its heads' output perturbation is not on the secure path yet",
    "fedaux-f": "adds no noise",
    "fedavg-p": "its output perturbation is not on the secure path yet",
    "fedd-p": "its output perturbation is not on the secure path yet",
    "pate-fl-multilabel": "its τ-clipped votes are not on the secure path yet",
    "dp-fedavg-multilabel": "its BCE updates are not on the secure path yet",
}


def options_type(name: str) -> type | None:
    """The options dataclass of method ``name``; an unknown name is refused by name (one line)."""
    if name not in OPTIONS:
        raise ConfigError("method", f"unknown method {name!r}; choose from {', '.join(METHOD_NAMES)}")
    return OPTIONS[name]


def option_names(name: str) -> frozenset[str]:
    """The names of method ``name``'s options (its ``options_type`` fields; none: empty)."""
    options = options_type(name)
    return frozenset(f.name for f in dataclasses.fields(options)) if options else frozenset()


def check_options(config: RunConfig) -> Any:
    """``config``'s method options, built and so validated, as the method itself builds them.

    Refuses an unknown method, an option the method does not take (by name) or a bad
    value, as :func:`fedvote.methods.check_method` does, without importing the method.
    """
    return build_options(config.method, options_type(config.method), config.options)


def check_secure_noise(config: RunConfig) -> None:
    """Refuse ``--secure-noise`` (one line naming it) for a method or release it does not apply to."""
    if not config.privacy.secure_noise:
        return
    if config.method not in SECURE_NOISE_SOURCES:
        reason = _NO_SECURE_NOISE.get(config.method, "not on the secure path")
        raise ConfigError("secure_noise", f"does not apply to {config.method}: {reason}")
    if config.method == "pate-fl" and config.options.get("release") == "labels":
        raise ConfigError(
            "secure_noise", "applies to --release sums (integer vote sums); Confident-GNMax is not on it"
        )


def noise_source(method: str, *, secure: bool, seeded: bool) -> str:
    """What result.json states as ``privacy.noise_source`` for ``method`` run so."""
    if secure:
        return SECURE_NOISE_SOURCES[method]
    return "pcg64-seeded" if seeded else "pcg64-os-entropy"


def method_option_specs() -> dict[str, OptionSpec]:
    """Every registered method's options by name (two methods may share a name of one type)."""
    specs: dict[str, OptionSpec] = {}
    for name in METHOD_NAMES:
        options = OPTIONS[name]
        if options is not None:
            for spec in option_specs(options):
                specs.setdefault(spec.name, spec)
    return specs
