"""The in-process transport, :class:`LocalTransport`: one module per skill it serves.

``core`` holds the class; each skill is a mixin in its own module (``teachers``, ``knn``,
``weighted``, ``updates``, ``heads``, ``personalised``, ``multilabel``) over ``shared``'s
:class:`~fedvote.transport.local.shared.LocalAgents`.
"""

from fedvote.transport.local.core import LocalTransport

__all__ = ["LocalTransport"]
