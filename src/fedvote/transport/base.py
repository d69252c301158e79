"""The seam between *what* a method does and *where* its agents act.

A method talks to agents only through a :class:`Transport` and the capabilities it
declares (:mod:`fedvote.transport.capabilities`): it asks them, e.g., to train their
teachers and to vote on query indices into the public pool, and receives only the *sum*
of their noisy votes (as secure aggregation would reveal it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from fedvote.results import PrivacyReport


@dataclass(frozen=True, eq=False)
class VoteSum:
    """Sum over responders of their noisy votes, (Q, C), and how many responded."""

    sums: np.ndarray
    responders: int


@dataclass(frozen=True, eq=False)
class ReleasedLabels:
    """All that leaves the aggregator in a Confident-GNMax round (``--release labels``).

    ``answered`` (Q,) bool: the released pass bits of the threshold check; ``labels`` (A,)
    int64: the noisy-argmax labels of the answered queries, in query order (A = answered
    count); ``responders``: how many agents added a noise share (so the noise actually in
    each sum is responders·share²). The noisy sums themselves stay inside the aggregator.
    """

    answered: np.ndarray
    labels: np.ndarray
    responders: int


@dataclass
class Communication:
    """Floats sent agent→server (up) and server→agent (down), and communication rounds."""

    upload_floats: int = 0
    download_floats: int = 0
    rounds: int = 0

    def count(self, *, down: int = 0, up: int = 0, rounds: int = 1) -> None:
        """Count one exchange: ``down`` floats server→agents, ``up`` agents→server, ``rounds`` rounds.

        The one place a transport adds to its counters (a skill counts what it sends
        before it knows whether enough agents responded: a refused round still cost it).
        """
        self.download_floats += int(down)
        self.upload_floats += int(up)
        self.rounds += rounds

    def as_dict(self) -> dict[str, int]:
        """JSON-ready counters."""
        return {
            "upload_floats": self.upload_floats,
            "download_floats": self.download_floats,
            "rounds": self.rounds,
        }


def agent_training_seeds(seed: int, num_agents: int) -> list[int]:
    """Each agent's teacher seed (N,), a function of the run's ``seed`` only.

    Shared by every transport, so agent i trains the same teacher in-process and on its
    own node.
    """
    return [int(s) for s in np.random.SeedSequence([seed, 0xA6E]).generate_state(num_agents)]


def agent_noise_seeds(entropy: int, agent_id: int) -> np.random.SeedSequence:
    """Agent ``agent_id``'s privacy-noise stream: child i of ``SeedSequence(entropy)``.

    The same stream ``SeedSequence(entropy).spawn(N)[agent_id]`` gives, so an agent
    seeded for a reproducible simulation draws the same noise under every transport.
    """
    return np.random.SeedSequence(entropy, spawn_key=(agent_id,))


class Transport(ABC):
    """Agents' actions as seen by the server; implementations decide where agents run.

    Only what every transport does lives here: the communication counters, N and the
    agents' record counts. Every skill a method may need — teacher votes, kNN votes, local
    updates, … — is a capability the transport declares by inheriting it
    (:mod:`fedvote.transport.capabilities`); :func:`~fedvote.transport.capabilities.check_capabilities`
    refuses a method whose needs a transport does not declare, before anything runs.
    """

    def __init__(self) -> None:
        self.communication = Communication()

    @property
    @abstractmethod
    def num_agents(self) -> int:
        """Number of agents N."""

    @abstractmethod
    def record_counts(self) -> np.ndarray:
        """Each agent's number of private records n_i, (N,) — public metadata, as in the papers."""

    def stated_privacy(self, report: PrivacyReport) -> tuple[PrivacyReport, dict[str, Any]]:
        """The run's privacy as this transport released it, and its own result keys (default: as is).

        A transport whose release differs from the ideal mechanism the ledger accounts
        (Flower's SecAgg+: clipping and rounding) states the difference here; it may only
        ever loosen the report.
        """
        return report, {}
