"""One module per federated algorithm, each a :class:`~fedvote.methods.base.Method`.

The registry :data:`METHODS` is discovered, not written by hand: every module of this
package is imported (:func:`pkgutil.iter_modules`) and every concrete ``Method`` subclass
that sets its own ``name`` is registered under it. A new method is one module here, its
options dataclass in the light :mod:`fedvote.methods.options` package and one line in
:mod:`fedvote.methods.registry` (plus its events in :mod:`fedvote.privacy.events`);
abstract classes and shared helpers (``base``, ``voting``, ``gradient``, ``options``)
register nothing.

Nothing heavy is imported with this package (lazy: keeps ``fedvote --help`` under 1 s):
:data:`METHODS` and the method classes are imported on first use, and what the command
line needs, the names and options, comes from :mod:`fedvote.methods.registry`.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import TYPE_CHECKING, Any

from fedvote._meta import lazy_exports
from fedvote.methods.registry import OPTIONS, option_names, options_type

if TYPE_CHECKING:
    from fedvote.config import RunConfig
    from fedvote.methods.base import Method, MethodOutcome
    from fedvote.methods.dp_fedavg import DpFedAvg
    from fedvote.methods.dp_fedsgd import DpFedSgd
    from fedvote.methods.fedaux_fdp import FedAuxF, FedAuxFdp, FedAvgP, FedDP
    from fedvote.methods.fedavg import FedAvg
    from fedvote.methods.multilabel_dp_fedavg import MultiLabelDpFedAvg
    from fedvote.methods.multilabel_pate import MultiLabelPateFL
    from fedvote.methods.pate_fl import PateFL
    from fedvote.methods.prifedsync import PriFedSync
    from fedvote.methods.private_knn_fl import PrivateKnnFL
    from fedvote.methods.weighted_pate import WeightedPate

    METHODS: dict[str, type[Method]]


def discover_methods() -> dict[str, type[Method]]:
    """Every concrete :class:`Method` defined in a module of this package, by its ``name``.

    A class registers when it is not abstract, sets ``name`` itself (a subclass that only
    inherits its parent's name registers nothing) and is defined in the module scanned
    (a class another module imports is registered by its own module). Two classes
    claiming one name are a programming error (``TypeError``). Sorted by name.
    """
    from fedvote.methods.base import Method

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


_discovered: dict[str, type[Method]] = {}
_MISSING = object()  # neither an options dataclass nor None


def registered_methods() -> dict[str, type[Method]]:
    """:data:`METHODS`: the discovered methods, checked against :mod:`fedvote.methods.registry`.

    A method found here but not registered there, or registered with other options than
    its ``options_type``, is a programming error (``TypeError``): the command line would
    offer other methods or flags than the ones that run.
    """
    if not _discovered:
        found = discover_methods()
        found_options = {name: method.options_type for name, method in found.items()}
        if found_options != OPTIONS:
            names = sorted(found_options.keys() | OPTIONS.keys())
            differing = [n for n in names if found_options.get(n, _MISSING) is not OPTIONS.get(n, _MISSING)]
            raise TypeError(
                f"fedvote.methods.registry.OPTIONS differs from the methods discovered for "
                f"{', '.join(differing)}: register each method's name and options_type there"
            )
        _discovered.update(found)
    return _discovered


# The method classes importable from this package, by the module that defines them.
_CLASSES = {
    "DpFedAvg": "dp_fedavg",
    "DpFedSgd": "dp_fedsgd",
    "FedAvg": "fedavg",
    "FedAvgP": "fedaux_fdp",
    "FedAuxF": "fedaux_fdp",
    "FedAuxFdp": "fedaux_fdp",
    "FedDP": "fedaux_fdp",
    "Method": "base",
    "MethodOutcome": "base",
    "MultiLabelDpFedAvg": "multilabel_dp_fedavg",
    "MultiLabelPateFL": "multilabel_pate",
    "PateFL": "pate_fl",
    "PriFedSync": "prifedsync",
    "PrivateKnnFL": "private_knn_fl",
    "WeightedPate": "weighted_pate",
}


_class_on_first_use = lazy_exports(
    __name__, {name: f"{__name__}.{module}" for name, module in _CLASSES.items()}
)


def __getattr__(name: str) -> Any:
    """:data:`METHODS` and the method classes, imported on first use."""
    if name == "METHODS":
        return registered_methods()
    return _class_on_first_use(name)


def method_class(name: str) -> type[Method]:
    """The registered method ``name``; an unknown name is refused by name (one line)."""
    options_type(name)  # refuses an unknown name
    return registered_methods()[name]


def check_method(config: RunConfig) -> type[Method]:
    """``config``'s method, with its options validated.

    Refuses an unknown method, a privacy flag it cannot take (``--epsilon`` for FedAvg), an
    option the method does not take (by name) or a bad value; called before anything is
    loaded, trained or charged.
    """
    method = method_class(config.method)
    method.check_privacy_flags(config)
    method.options_from(config)
    return method


__all__ = [
    "METHODS",
    "check_method",
    "discover_methods",
    "registered_methods",
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
    "MultiLabelDpFedAvg",
    "MultiLabelPateFL",
    "PateFL",
    "PriFedSync",
    "PrivateKnnFL",
    "WeightedPate",
]
