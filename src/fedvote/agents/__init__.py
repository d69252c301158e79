"""The agent: private data, a teacher, and one audited exit; skill code in one module per skill."""

from fedvote.agents.agent import Agent, ArrayOutput, VoteOutput

__all__ = ["Agent", "ArrayOutput", "VoteOutput"]
