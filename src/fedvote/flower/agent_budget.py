"""An agent's own ledger in a deployment (issue 45): it refuses a request beyond its budget.

In a deployment each agent (``fedvote deploy agent``) keeps its own persisted ledger of what
it has released — a :class:`~fedvote.privacy.ledger.PersistentLedger` (SQLite, append-only,
committed before the release, so it survives restarts and over-counts rather than
under-counts after a crash) keyed by the agent and its data file's fingerprint. Before it
answers a vote request it charges the request's events there; a charge that would take its
agent-level (or instance-level, if one is set) ε above its budget (``--budget-epsilon``)
raises :class:`AgentRefusal`, which leaves the ClientApp as an error reply: the server's
SecAgg+ round counts the agent out (the secure sum's dropout path) and releases the round
only if at least t agents remain; the agent is asked again next round and refuses again.
A charge is never voided, even for a round the server did not release (fewer than t
responders): once its masked vote has left, the agent cannot know on its own whether the sum
was unmasked, and voiding on the server's word would let a dishonest server make it
under-count; the agent may over-count by such rounds (``docs/deploy.md``).

**What the agent accounts** (``docs/privacy.md``, "Agent-side ledgers"). A vote request
carries Q queries and the agent's noise share std s; the agent cannot verify how many other
shares reach the sum, so it takes the total noise as s·√h, where h (``--assume-honest``,
default 1) is the number of honest shares it counts on, its own included: with h = 1 it
trusts nobody (its own share is its only noise; sound whatever the others do), with h = t
it makes the server's assumption. h must not exceed the federation's N (there are no more
shares than agents: refused at start-up) nor the t of the request (a released sum holds at
least t shares, not more: a request whose t is below h, or that states no t while h > 1, is
refused). PATE votes: Q Gaussians with σ = s·√h, sensitivity 1
(agent level, zero-out) and √2 (instance level) — with ``secure-noise``, the discrete
events of h shares (:func:`~fedvote.privacy.events.pate_fl_discrete_events`). kNN votes:
the same at the agent level and √2/k at the instance level for the agent's own k
(:func:`~fedvote.privacy.events.private_knn_fl_events`); kNN votes with secure noise are
refused (the count scale is the server's, which the agent does not hold).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedvote.errors import ConfigError
from fedvote.privacy.events import LevelEvents, pate_fl_discrete_events, pate_fl_events, private_knn_fl_events
from fedvote.privacy.ledger import DEFAULT_DELTA, PersistentLedger, PrivacyBudgetExceeded

# The file beside the agent's data file that holds its ledger unless ``--ledger`` names another.
LEDGER_SUFFIX = ".ledger.sqlite"
# Keys of the SuperNode's node config (``fedvote deploy agent`` writes them).
NODE_LEDGER = "ledger"
NODE_BUDGET = "budget-epsilon"
NODE_DELTA = "budget-delta"
NODE_HONEST = "assume-honest"


class AgentRefusal(RuntimeError):
    """The agent refused a request: answering it would exceed its budget, or it cannot account it.

    Nothing was released and nothing charged.
    """


def default_ledger_path(data_file: str | Path) -> Path:
    """The ledger beside the agent's data file: ``agent-3.npz`` → ``agent-3.npz.ledger.sqlite``."""
    path = Path(data_file)
    return path.with_name(path.name + LEDGER_SUFFIX)


@dataclass(frozen=True)
class AgentBudget:
    """Agent ``agent_id``'s ledger at ``path``, its budget and what it assumes of the others.

    ``budget_epsilon`` None: the ledger records every release and refuses nothing (unless a
    budget was stored before: the first stored budget binds, as for the server's ledger).
    """

    path: Path
    agent_id: int
    fingerprint: str
    budget_epsilon: float | None = None
    delta: float = DEFAULT_DELTA
    assume_honest: int = 1
    # N, from the agent's file: h > N honest shares cannot exist (None: not checked here).
    num_agents: int | None = None

    def __post_init__(self) -> None:
        if self.budget_epsilon is not None and not (
            math.isfinite(self.budget_epsilon) and self.budget_epsilon > 0
        ):
            raise ConfigError("budget_epsilon", f"must be a finite number > 0, got {self.budget_epsilon}")
        if not 0.0 < self.delta < 1.0:
            raise ConfigError("budget_delta", f"must lie in (0, 1), got {self.delta}")
        honest = self.assume_honest
        if isinstance(honest, bool) or not isinstance(honest, int) or honest < 1:
            raise ConfigError("assume_honest", f"must be an integer >= 1, got {honest!r}")
        if self.num_agents is not None and honest > self.num_agents:
            raise ConfigError(
                "assume_honest",
                f"{honest} honest noise shares cannot exist in a federation of {self.num_agents} agents "
                f"(one share each): give at most the run's t (<= {self.num_agents})",
            )

    @property
    def federation(self) -> str:
        """The ledger's key: this agent of this data file."""
        return f"agent {self.agent_id} ({self.fingerprint[:16]})"

    def open(self) -> PersistentLedger:
        """The agent's persisted ledger (created on first use); refuses a budget other than the stored one."""
        return PersistentLedger(
            self.path,
            self.federation,
            budget_epsilon=self.budget_epsilon,
            delta=self.delta,
            command="deploy agent",
        )

    def check_ready(self) -> float:
        """Open the ledger once (at start-up): the ε spent so far. A bad file or budget is one line."""
        try:
            with self.open() as ledger:
                return ledger.spent()
        except OSError as error:
            message = f"cannot open the agent's ledger {str(self.path)!r}: {error}"
            raise ConfigError("ledger", message) from None

    def request_events(
        self,
        kind: str,
        queries: int,
        noise_std: float,
        *,
        secure: bool,
        k: int | None = None,
        min_responders: int | None = None,
    ) -> LevelEvents:
        """The events of answering ``queries`` queries of ``kind`` with noise share std ``noise_std``.

        ``min_responders`` is the request's t (the fewest shares a released sum holds). The
        agent's s·√h holds only if every released sum holds at least h honest shares, so a
        request whose t is below h — or that states no t while h > 1 — is refused: the
        argument of ``docs/privacy.md`` does not cover it (h = 1 needs no t).
        """
        if not (math.isfinite(noise_std) and noise_std >= 0):
            raise AgentRefusal(f"agent {self.agent_id}: a noise share std of {noise_std} cannot be accounted")
        if self.assume_honest > 1 and (min_responders is None or min_responders < self.assume_honest):
            stated = "states no t" if min_responders is None else f"releases sums of t = {min_responders}"
            raise AgentRefusal(
                f"agent {self.agent_id} refuses the request: it assumes {self.assume_honest} honest noise "
                f"shares in every released sum (--assume-honest) but the request {stated}; "
                "nothing was released"
            )
        sigma = noise_std * math.sqrt(self.assume_honest)
        if kind == "pate":
            if secure:
                return pate_fl_discrete_events(sigma, self.assume_honest, queries)
            return pate_fl_events(sigma, queries)
        if kind == "knn" and not secure and k is not None:
            return private_knn_fl_events(sigma, queries, k)
        raise AgentRefusal(
            f"agent {self.agent_id}: cannot account a {kind!r} request (secure noise: {secure})"
        )

    def admit(self, release: LevelEvents, what: str = "this request") -> float:
        """Charge ``release`` (committed) or raise :class:`AgentRefusal`; returns the ε spent after it."""
        with self.open() as ledger:
            try:
                ledger.charge(release)
            except PrivacyBudgetExceeded as error:
                raise AgentRefusal(
                    f"agent {self.agent_id} refuses {what}: it would bring its {error.level}-level ε from "
                    f"{error.spent:.4g} to {error.would_be:.4g}, above its budget {error.budget:.4g}; "
                    "nothing was released"
                ) from None
            return ledger.spent()

    def node_config(self) -> dict[str, Any]:
        """The SuperNode's node-config entries that carry this ledger to the ClientApp."""
        entries: dict[str, Any] = {
            NODE_LEDGER: str(self.path),
            NODE_DELTA: self.delta,
            NODE_HONEST: self.assume_honest,
        }
        if self.budget_epsilon is not None:
            entries[NODE_BUDGET] = float(self.budget_epsilon)
        return entries

    @classmethod
    def from_node_config(
        cls, node_config: Any, agent_id: int, fingerprint: str, num_agents: int | None = None
    ) -> AgentBudget | None:
        """The ledger the node config names, or None where it names none (simulation, a bare node).

        ``num_agents`` (the agent file's N) refuses an ``assume-honest`` above it.
        """
        path = node_config.get(NODE_LEDGER)
        if not path:
            return None
        budget = node_config.get(NODE_BUDGET)
        return cls(
            path=Path(str(path)),
            agent_id=agent_id,
            fingerprint=fingerprint,
            budget_epsilon=None if budget is None else float(budget),
            delta=float(node_config.get(NODE_DELTA, DEFAULT_DELTA)),
            assume_honest=int(node_config.get(NODE_HONEST, 1)),
            num_agents=num_agents,
        )
