"""The ledgers a sweep charges, its budget check before the first point, and its total ε."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from typing import Any

from fedvote.config import RunConfig
from fedvote.data.federation import Federation
from fedvote.privacy.accountant import BoundedEpsilon, bounded_epsilon
from fedvote.privacy.events import LEVELS, LevelEvents
from fedvote.privacy.ledger import LedgerSession, PrivacyLedger, compose_releases
from fedvote.privacy.run_ledger import check_budget, federation_content_key, ledger_details, open_ledger
from fedvote.results import finite_or_none
from fedvote.sweep.journal import ChargeJournal, JournaledSession
from fedvote.sweep.points import Federations, SweepPoint, planned_point


class SweepLedgers:
    """The ledgers a sweep charges: one per (ledger file, federation content key).

    :meth:`plan` opens them and checks the sum of every point's planned events against
    each one's budget before anything is trained or released. A context manager, like each
    ledger it holds: ``with SweepLedgers.plan(...) as ledgers:`` closes them all on leaving.
    """

    def __init__(
        self,
        ledgers: dict[tuple[str | None, str], PrivacyLedger],
        opened: ExitStack,
        point_ledgers: dict[int, tuple[str | None, str]] | None = None,
    ) -> None:
        self._ledgers = ledgers
        self._opened = opened  # closes every ledger of ``ledgers``
        self._point_ledgers = point_ledgers or {}  # each point's index → the key of the ledger it charges

    @staticmethod
    def _key(config: RunConfig, federation: Federation) -> tuple[str | None, str]:
        return config.privacy.ledger, federation_content_key(federation)

    @classmethod
    def plan(
        cls,
        points: Sequence[SweepPoint],
        remaining: Sequence[SweepPoint],
        federations: Federations,
    ) -> SweepLedgers:
        """Open every ledger the sweep's ``points`` charge; refuse ``remaining`` points that overrun one.

        ``remaining`` are the points still to run (all of them, unless a resumed sweep
        finished some: the ledger already holds those points' charges). A refusal closes
        the ledgers opened so far.
        """
        ledgers: dict[tuple[str | None, str], PrivacyLedger] = {}
        point_ledgers: dict[int, tuple[str | None, str]] = {}
        planned: dict[tuple[str | None, str], list[Any]] = {}
        with ExitStack() as opened:  # closes every ledger opened if anything below fails
            for point in points:
                seeded = point.seeded
                federation = federations.get(seeded)
                key = point_ledgers[point.index] = cls._key(seeded, federation)
                if key not in ledgers:
                    ledgers[key] = opened.enter_context(open_ledger(seeded, federation))
            for point in remaining:
                seeded = point.seeded
                federation = federations.get(seeded)
                planned.setdefault(cls._key(seeded, federation), []).append(
                    planned_point(seeded, point.point, federation)
                )
            what = "points" if len(remaining) == len(points) else "remaining points"
            for key, releases in planned.items():
                check_budget(ledgers[key], releases, what=f"this sweep's {len(releases)} {what}")
            return cls(ledgers, opened.pop_all(), point_ledgers)  # the sweep keeps them open

    def session(
        self,
        config: RunConfig,
        federation: Federation,
        run_label: str,
        journal: ChargeJournal | None = None,
        point: int = 0,
    ) -> LedgerSession:
        """A point's view of its federation's ledger (its charges labelled ``run_label``).

        With a ``journal`` (a sweep directory's), each charge is journaled as point ``point``'s
        before it is made (:class:`~fedvote.sweep.journal.JournaledSession`).
        """
        parent = self._ledgers[self._key(config, federation)]
        if journal is None:
            return LedgerSession(parent, run_label)
        return JournaledSession(parent, run_label, journal=journal, point=point)

    def total(
        self, delta: float, accountant: str, earlier: Sequence[LevelEvents] = ()
    ) -> dict[str, float | None]:
        """ε per level of all points' charges together (every federation), at ``delta``.

        ``earlier`` are the charges of points done before a resume (kept with their rows).
        """
        bounded = self.total_bounded(delta, accountant, earlier)
        return finite_or_none({level: bounded[level].epsilon for level in LEVELS})

    def total_bounded(
        self, delta: float, accountant: str, earlier: Sequence[LevelEvents] = ()
    ) -> dict[str, BoundedEpsilon]:
        """:meth:`total` with the accountant behind each level (RDP's bound or ∞ where no PLD fits)."""
        charges = [*earlier, *(charge for ledger in self._ledgers.values() for charge in ledger.charges)]
        return {
            level: bounded_epsilon(compose_releases(charges, level), delta, accountant) for level in LEVELS
        }

    def states(self, earlier_points: Iterable[int] = ()) -> list[dict[str, Any]]:
        """Each persisted ledger's federation, spend and budget after the sweep, with its charge count.

        ``charges`` counts every charge of this sweep to the ledger, the ones :meth:`total`
        composes: this process's and, on a resume, the earlier ones (``earlier_points``: the
        point index of each charge made before the resume, as :meth:`total`'s ``earlier``),
        which ``charges_before_resume`` counts apart.
        """
        earlier = Counter(
            self._point_ledgers[index] for index in earlier_points if index in self._point_ledgers
        )
        states = []
        for key, ledger in self._ledgers.items():
            state = ledger_details(ledger).get("ledger")
            if isinstance(state, dict):
                before = earlier.get(key, 0)
                states.append(
                    {**state, "charges": before + len(ledger.charges), "charges_before_resume": before}
                )
        return states

    def close(self) -> None:
        """Close every ledger (each charge is already committed)."""
        self._opened.close()

    def __enter__(self) -> SweepLedgers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
