"""One module per federated algorithm, each a :class:`~fedvote.methods.base.Method`.

The registry :data:`METHODS` is discovered, not written by hand: every module of this
package is imported (:func:`pkgutil.iter_modules`) and every concrete ``Method`` subclass
that sets its own ``name`` is registered under it. A new method is one module here (plus
its events in :mod:`fedvote.privacy.events`); abstract classes and shared helpers
(``base``, ``voting``, ``gradient``, ``options``) register nothing.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
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


def discover_methods() -> dict[str, type[Method]]:
    """Every concrete :class:`Method` defined in a module of this package, by its ``name``.

    A class registers when it is not abstract, sets ``name`` itself (a subclass that only
    inherits its parent's name registers nothing) and is defined in the module scanned
    (a class another module imports is registered by its own module). Two classes
    claiming one name are a programming error (``TypeError``). Sorted by name.
    """
    found: dict[str, type[Method]] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            if not (inspect.isclass(value) and issubclass(value, Method)):
                continue
            if inspect.isabstract(value) or "name" not in vars(value) or value.__module__ != module.__name__:
                continue
            known = found.setdefault(value.name, value)
            if known is not value:
                claimants = f"{known.__qualname__} and {value.__qualname__}"
                raise TypeError(f"methods {claimants} both claim the name {value.name!r}")
    return dict(sorted(found.items()))


METHODS: dict[str, type[Method]] = discover_methods()

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
    "discover_methods",
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
