"""What an audit returns (:class:`AuditResult`) and what every audit of one method shares (:class:`AuditRun`).

Apart from :mod:`fedvote.audit.api` so that the audits it dispatches to
(:mod:`fedvote.audit.one_run`) import these without importing the API back (issue 44).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from fedvote.config import RunConfig


@dataclass(frozen=True)
class AuditResult:
    """What an audit measured, and what it compares against.

    ``epsilon_lower_bound`` holds with probability ≥ ``confidence`` over the audit's own
    randomness: the mechanism is not (ε, ``delta``)-DP for any smaller ε.
    ``claimed_epsilon`` is the ε a run of the same settings reports at ``level``.
    ``trials``: releases on *each* of the two neighbours (multi-trial), or canaries
    (one-run). ``mode``: ``"multi-trial"`` or ``"one-run"``. ``canary`` and ``test`` say
    what was distinguished and how; ``details`` holds the counts behind the bound.
    """

    method: str
    level: str
    claimed_epsilon: float
    epsilon_lower_bound: float
    delta: float
    confidence: float
    trials: int
    seconds: float
    mode: str
    canary: str
    test: str
    sigma: float
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def violated(self) -> bool:
        """Whether the lower bound exceeds the claim: the mechanism leaks more than it says."""
        return self.epsilon_lower_bound > self.claimed_epsilon

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary (the ``--json`` output)."""
        return asdict(self)


@dataclass(frozen=True)
class AuditRun:
    """What every audit of one method at one level shares: the claim, the confidence, the clock.

    :meth:`result` turns a measured bound into the :class:`AuditResult` (one construction
    for the multi-trial and the one-run audits).
    """

    config: RunConfig
    method: str
    sigma: float
    level: str
    claimed_epsilon: float
    confidence: float
    trials: int
    started: float

    def result(
        self, bound: float, *, mode: str, canary: str, test: str, details: dict[str, Any]
    ) -> AuditResult:
        """The audit's result with lower bound ``bound``; ``seconds`` counted from :attr:`started`."""
        return AuditResult(
            method=self.method,
            level=self.level,
            claimed_epsilon=self.claimed_epsilon,
            epsilon_lower_bound=bound,
            delta=self.config.privacy.delta,
            confidence=self.confidence,
            trials=self.trials,
            seconds=time.perf_counter() - self.started,
            mode=mode,
            canary=canary,
            test=test,
            sigma=self.sigma,
            details=details,
        )
