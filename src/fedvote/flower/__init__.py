"""Everything that runs on Flower: the App, the server's transport, deployment files, SecAgg+.

:mod:`~fedvote.flower.protocol` names the messages and record keys both sides share.
Importing this package imports nothing from Flower; its modules do.
"""
