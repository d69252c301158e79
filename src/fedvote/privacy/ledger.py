"""The ledger: every release is recorded here *before* its result leaves the method."""

from __future__ import annotations

from dp_accounting import dp_event

from fedvote.privacy.events import LEVELS, LevelEvents


class PrivacyLedger:
    """In-memory, append-only record of a run's releases at both levels.

    A method calls :meth:`charge` with the events of a release before returning the
    released values; :meth:`event` composes everything charged so far for one level.
    """

    def __init__(self) -> None:
        self._entries: list[LevelEvents | None] = []

    def charge(self, release: LevelEvents) -> int:
        """Record ``release`` before its values are used; returns the charge's id."""
        self._entries.append(release)
        return len(self._entries) - 1

    def void(self, charge_id: int) -> None:
        """Cancel a charge whose release provably did not happen (too few responders)."""
        self._entries[charge_id] = None

    @property
    def charges(self) -> tuple[LevelEvents, ...]:
        """Every charge still in force, in order."""
        return tuple(e for e in self._entries if e is not None)

    def event(self, level: str) -> dp_event.DpEvent:
        """The composition of all releases at ``level`` ("agent" or "instance").

        Consecutive identical events are merged into one self-composition so that
        accountants see ``SelfComposedDpEvent(e, n)`` instead of n copies.
        """
        if level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
        merged: list[tuple[dp_event.DpEvent, int]] = []
        for release in self.charges:
            event, count = _unwrap(release.at(level))
            if isinstance(event, dp_event.NoOpDpEvent):
                continue
            if merged and merged[-1][0] == event:
                merged[-1] = (event, merged[-1][1] + count)
            else:
                merged.append((event, count))
        if not merged:
            return dp_event.NoOpDpEvent()
        parts = [e if n == 1 else dp_event.SelfComposedDpEvent(e, n) for e, n in merged]
        return parts[0] if len(parts) == 1 else dp_event.ComposedDpEvent(parts)

    def sensitivity(self, level: str) -> float | None:
        """The largest L2 sensitivity charged at ``level`` (None if nothing was charged)."""
        values = [r.sensitivity(level) for r in self.charges]
        return max(values) if values else None


def _unwrap(event: dp_event.DpEvent) -> tuple[dp_event.DpEvent, int]:
    """(inner event, count) for a self-composition, else (event, 1)."""
    if isinstance(event, dp_event.SelfComposedDpEvent):
        inner, count = _unwrap(event.event)
        return inner, count * event.count
    return event, 1
