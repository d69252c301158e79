"""Every charge a sweep makes, kept in its output directory the moment it is made.

A point's row is saved when the point is done; its charges are made earlier, before its
release. A sweep interrupted between a point's charge and its row leaves a charge the
ledger holds and no row: ``--resume`` runs that point again and charges it again (a new
release, with fresh noise), and a total composed only from the rows would report less than
was spent. So each charge goes to ``D/points/charges.jsonl`` — one JSON line, appended and
flushed to disk *before* the ledger records it (a line for a charge the ledger then
refuses or never makes is cancelled by a later line, best effort: the journal may hold
more than the ledger, never less) — and a resumed sweep composes its total from every
charge of the journal, the interrupted point's first release included
(:meth:`ChargeJournal.read`).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from fedvote.errors import ConfigError
from fedvote.privacy.events import LevelEvents
from fedvote.privacy.ledger import LedgerSession, PrivacyLedger, event_from_json, event_to_json

JOURNAL_NAME = "charges.jsonl"


class ChargeJournal:
    """``D/points/charges.jsonl``: a line per charge (``point``, ``id``, ``charge``) or ``cancel``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._session = uuid.uuid4().hex[:12]  # this process's entries, apart from an earlier one's
        self._count = 0
        self.charged = 0  # charges this process journaled and did not cancel

    def record(self, point: int, charge: LevelEvents) -> str:
        """Append point ``point``'s ``charge`` (before the ledger records it); returns its entry id."""
        self._count += 1
        entry = f"{self._session}-{self._count}"
        self._append({"point": point, "id": entry, "charge": charge_to_json(charge)})
        self.charged += 1
        return entry

    def cancel(self, entry: str) -> None:
        """Append that the charge ``entry`` is not in force (refused, never made, or voided)."""
        self._append({"cancel": entry})
        self.charged -= 1

    def seed(self, charges: dict[int, list[LevelEvents]]) -> None:
        """Start the journal of a directory written before it kept one, from its rows' charges."""
        for point, point_charges in sorted(charges.items()):
            for charge in point_charges:
                self.record(point, charge)
        self.charged = 0  # these were an earlier process's

    def read(self) -> list[LevelEvents]:
        """The charges in force, in the order they were made; ``[]`` without a journal.

        A last line cut short (the process stopped while appending it, before that charge
        was made) is ignored.
        """
        return [charge for _, charge in self.read_points()]

    def read_points(self) -> list[tuple[int, LevelEvents]]:
        """:meth:`read`'s charges, each with the index of the point that made it."""
        if not self.path.exists():
            return []
        try:
            lines = self.path.read_text().splitlines()
        except OSError as error:
            raise ConfigError("resume", f"cannot read {self.path}: {error.strerror or error}") from error
        charges: dict[str, tuple[int, LevelEvents]] = {}
        for number, line in enumerate(lines, start=1):
            try:
                data = json.loads(line)
                if "cancel" in data:
                    charges.pop(data["cancel"], None)
                else:
                    charges[data["id"]] = (int(data["point"]), charge_from_json(data["charge"]))
            except (ValueError, TypeError, KeyError) as error:
                if number == len(lines):
                    break
                raise ConfigError(
                    "resume", f"{self.path} line {number} is not a sweep's charge: {error}"
                ) from error
        return list(charges.values())

    def _append(self, data: dict[str, Any]) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (json.dumps(data, sort_keys=True) + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as error:
            raise ConfigError("out", f"cannot write {self.path}: {error.strerror or error}") from error


class JournaledSession(LedgerSession):
    """A sweep point's :class:`LedgerSession` whose every charge is journaled before it is made."""

    def __init__(self, parent: PrivacyLedger, run: str | None, *, journal: ChargeJournal, point: int) -> None:
        super().__init__(parent, run)
        self.journal = journal
        self.point = point
        self._journal_entries: dict[int, str] = {}

    def charge(self, release: LevelEvents) -> int:
        """Journal ``release``, then charge it; a charge that fails is cancelled in the journal."""
        entry = self.journal.record(self.point, release)
        try:
            charge_id = super().charge(release)
        except BaseException:
            try:
                self.journal.cancel(entry)
            except ConfigError:
                pass  # the journal then holds more than the ledger: a total too high, never too low
            raise
        self._journal_entries[charge_id] = entry
        return charge_id

    def void(self, charge_id: int) -> None:
        """Void the charge in the ledger, then in the journal."""
        super().void(charge_id)
        self.journal.cancel(self._journal_entries.pop(charge_id))


def charge_to_json(charge: LevelEvents) -> dict[str, Any]:
    """A point's charge as JSON (its events as the ledger stores them)."""
    return {
        "agent": json.loads(event_to_json(charge.agent)),
        "instance": json.loads(event_to_json(charge.instance)),
        "agent_sensitivity": repr(float(charge.agent_sensitivity)),
        "instance_sensitivity": repr(float(charge.instance_sensitivity)),
    }


def charge_from_json(data: dict[str, Any]) -> LevelEvents:
    """The charge :func:`charge_to_json` wrote."""
    return LevelEvents(
        agent=event_from_json(json.dumps(data["agent"])),
        instance=event_from_json(json.dumps(data["instance"])),
        agent_sensitivity=float(data["agent_sensitivity"]),
        instance_sensitivity=float(data["instance_sensitivity"]),
    )
