"""What the package says of itself, in a leaf module: its version and the lazy exports of its packages.

Kept apart from ``fedvote/__init__.py`` (which re-exports both) so that the modules that need
them (the runner, the command line, the sub-packages' ``__init__``) do not import the root
package's API, whose :func:`fedvote.run` imports the runner: no import circle (issue 44,
``tests/test_import_graph.py``). Imports nothing.
"""

from __future__ import annotations

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing at start-up
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"


def lazy_exports(package: str, sources: dict[str, str]) -> Any:
    """``__getattr__`` (PEP 562) for ``package``: name ``n`` comes from module ``sources[n]`` on first use.

    The packages whose modules import torch, scipy or dp_accounting (``models``,
    ``privacy``, ``agents``, ``methods``) export their names this way, so that importing
    them stays light (lazy: keeps ``fedvote --help`` under 1 s). The value is stored in
    the package's namespace, so later reads do not come back here.
    """
    import importlib

    def __getattr__(name: str) -> Any:
        if name not in sources:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(sources[name]), name)
        setattr(importlib.import_module(package), name, value)
        return value

    return __getattr__
