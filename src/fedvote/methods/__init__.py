"""One module per federated algorithm, each a :class:`~fedvote.methods.base.Method`."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from fedvote.errors import ConfigError
from fedvote.methods.base import Method, MethodOutcome
from fedvote.methods.dp_fedavg import DpFedAvg
from fedvote.methods.dp_fedsgd import DpFedSgd
from fedvote.methods.fedaux_fdp import FedAuxF, FedAuxFdp, FedAvgP, FedDP
from fedvote.methods.fedavg import FedAvg
from fedvote.methods.pate_fl import PateFL
from fedvote.methods.prifedsync import PriFedSync
from fedvote.methods.private_knn_fl import PrivateKnnFL
from fedvote.methods.weighted_pate import WeightedPate

METHODS: dict[str, type[Method]] = {PateFL.name: PateFL, PrivateKnnFL.name: PrivateKnnFL}
METHODS.update({FedAvg.name: FedAvg, DpFedAvg.name: DpFedAvg, DpFedSgd.name: DpFedSgd})
METHODS.update({m.name: m for m in (FedAuxFdp, FedAuxF, FedDP, FedAvgP)})
METHODS[WeightedPate.name] = WeightedPate
METHODS[PriFedSync.name] = PriFedSync

if TYPE_CHECKING:
    from fedvote.config import RunConfig


def method_class(name: str) -> type[Method]:
    """The registered method ``name``; an unknown name is refused by name (one line)."""
    if name not in METHODS:
        raise ConfigError("method", f"unknown method {name!r}; choose from {', '.join(sorted(METHODS))}")
    return METHODS[name]


def option_names(name: str) -> frozenset[str]:
    """The names of method ``name``'s options (its ``options_type`` fields; none: empty)."""
    options_type = method_class(name).options_type
    return frozenset(f.name for f in dataclasses.fields(options_type)) if options_type else frozenset()


def check_method(config: RunConfig) -> type[Method]:
    """``config``'s method, with its options validated.

    Refuses an unknown method, an option the method does not take (by name) or a bad
    value; called before anything is loaded, trained or charged.
    """
    method = method_class(config.method)
    method.options_from(config)
    return method

__all__ = [
    "METHODS",
    "check_method",
    "method_class",
    "option_names",
    "DpFedAvg",
    "DpFedSgd",
    "FedAvg",
    "FedAvgP",
    "FedAuxF",
    "FedAuxFdp",
    "FedDP",
    "Method",
    "MethodOutcome",
    "PateFL",
    "PriFedSync",
    "PrivateKnnFL",
    "WeightedPate",
]
