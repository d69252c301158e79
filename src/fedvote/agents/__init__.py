"""The agent: private data, a teacher, and one audited exit; skill code in one module per skill.

The names below are imported when first used (lazy: keeps ``fedvote --help`` under 1 s):
the command line reads :data:`fedvote.agents.behaviour.BAD_KINDS` without importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedvote._meta import lazy_exports

if TYPE_CHECKING:
    from fedvote.agents.agent import Agent, ArrayOutput, VoteOutput

__all__ = ["Agent", "ArrayOutput", "VoteOutput"]


__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "fedvote.agents.agent"))
