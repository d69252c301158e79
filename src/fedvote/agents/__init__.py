"""The agent: private data, a teacher, and one audited exit; skill code in one module per skill.

The names below are imported when first used (lazy: keeps ``fedvote --help`` under 1 s):
the command line reads :data:`fedvote.agents.behaviour.BAD_KINDS` without importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedvote.agents.agent import Agent, ArrayOutput, VoteOutput

__all__ = ["Agent", "ArrayOutput", "VoteOutput"]


def __getattr__(name: str) -> Any:
    """The exported ``name``, imported from :mod:`fedvote.agents.agent` on first use."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("fedvote.agents.agent"), name)
    globals()[name] = value
    return value
