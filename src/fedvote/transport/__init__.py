"""Where agents act: in-process (LocalTransport) or on Flower nodes."""

from fedvote.transport.base import Communication, Transport, VoteSum
from fedvote.transport.local import LocalTransport

__all__ = ["Communication", "LocalTransport", "Transport", "VoteSum"]
