"""Where existing Flower App projects find fedvote's components (``fedvote.deploy_app:server_app``).

The App lives in :mod:`fedvote.flower.app`; this name is kept so that projects written by
earlier ``fedvote deploy`` commands keep working.
"""

from fedvote.flower.app import client_app, server_app

__all__ = ["client_app", "server_app"]
