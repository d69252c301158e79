"""One module per federated algorithm, each a :class:`~fedvote.methods.base.Method`."""

from fedvote.methods.base import Method, MethodOutcome
from fedvote.methods.pate_fl import PateFL

METHODS: dict[str, type[Method]] = {PateFL.name: PateFL}

__all__ = ["METHODS", "Method", "MethodOutcome", "PateFL"]
