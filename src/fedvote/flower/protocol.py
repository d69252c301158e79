"""The wire protocol between the fedvote ServerApp and ClientApp: message names and record keys.

Imported by both sides (:mod:`fedvote.flower.app` and :mod:`fedvote.flower.transport`), and
by nothing else, so neither side imports the other.
"""

from __future__ import annotations

RECORD = "fedvote"  # name of the ConfigRecord every fedvote message carries
REGISTER_MESSAGE = "train.register"  # before anything else: the agent's id, records, fingerprint, φ kind
TEACHER_MESSAGE = "train.teacher"  # Algorithm 1, line 2: train the local teacher
KNN_MESSAGE = "train.knn"  # Algorithm 2: take φ, embed the private records, answer with k
