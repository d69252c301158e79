"""The agent: private data, a local teacher, and a public surface of noisy votes only."""

from fedvote.agents.agent import Agent

__all__ = ["Agent"]
