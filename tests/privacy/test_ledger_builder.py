"""The ledger composes its charges with dp-accounting's ``DpEventBuilder`` (same events, same ε)."""

from __future__ import annotations

import numpy as np
import pytest
from dp_accounting import DpEventBuilder, dp_event

from fedvote.privacy.accountant import epsilon_for
from fedvote.privacy.events import (
    LEVELS,
    ReplaceOneDpEvent,
    confident_gnmax_events,
    dp_fedavg_events,
    gaussian_release_event,
    pate_fl_events,
    prifedsync_events,
    weighted_pate_events,
)
from fedvote.privacy.ledger import PersistentLedger, PrivacyLedger, event_from_json, event_to_json

DELTA = 1e-5


def charges():
    """A few releases: repeated and interleaved Gaussians, a no-op, a two-part release, replace-one events."""
    return [
        pate_fl_events(20.0, 10),
        pate_fl_events(20.0, 10),
        pate_fl_events(20.0, 0),  # releases nothing
        confident_gnmax_events(20.0, 40.0, 5),
        weighted_pate_events(30.0, 8, 2.0, 8.0),
        dp_fedavg_events(0.05, 1.0, 20),  # instance level: ReplaceOneDpEvent
        dp_fedavg_events(0.05, 1.0, 20),
        pate_fl_events(15.0, 3),
        prifedsync_events(1.1, 0.05, 3, 4),
        pate_fl_events(15.0, 3),
    ]


def built(releases, level):
    builder = DpEventBuilder()
    for release in releases:
        builder.compose(release.at(level))
    return builder.build()


def merged_by_hand(releases, level):
    """The composition the ledger built by hand before it used DpEventBuilder (the reference)."""

    def unwrap(event):
        if isinstance(event, dp_event.SelfComposedDpEvent):
            inner, count = unwrap(event.event)
            return inner, count * event.count
        return event, 1

    merged = []
    for release in releases:
        event, count = unwrap(release.at(level))
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


@pytest.mark.parametrize("level", LEVELS)
def test_the_ledger_event_is_what_dp_event_builder_builds(level):
    ledger = PrivacyLedger()
    for release in charges():
        ledger.charge(release)
    assert ledger.event(level) == built(charges(), level)
    assert ledger.event(level) == merged_by_hand(charges(), level)


def test_the_composed_events_look_as_before():
    ledger = PrivacyLedger()
    for release in charges()[:3]:
        ledger.charge(release)
    assert ledger.event("agent") == dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(20.0), 20)
    ledger.charge(pate_fl_events(15.0, 3))
    assert ledger.event("agent") == dp_event.ComposedDpEvent(
        [
            dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(20.0), 20),
            dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(15.0), 3),
        ]
    )
    assert PrivacyLedger().event("agent") == dp_event.NoOpDpEvent()


def test_replace_one_events_compose_through_the_builder_as_one_event():
    ledger = PrivacyLedger()
    fedavg = dp_fedavg_events(0.05, 1.0, 20)
    assert isinstance(fedavg.instance, ReplaceOneDpEvent)
    ledger.charge(fedavg)
    ledger.charge(fedavg)
    ledger.charge(pate_fl_events(20.0, 4))
    # the builder never looks inside the wrapper: two equal wrappers merge, their inner count is kept
    assert ledger.event("instance") == dp_event.ComposedDpEvent(
        [
            dp_event.SelfComposedDpEvent(fedavg.instance, 2),
            pate_fl_events(20.0, 4).instance,
        ]
    )
    twice = epsilon_for(dp_event.SelfComposedDpEvent(fedavg.instance, 2), DELTA, "pld")
    steps = dp_fedavg_events(0.05, 1.0, 40).instance
    assert twice == pytest.approx(epsilon_for(steps, DELTA, "pld"), rel=1e-3)


# RDP has no replace-one bound for the sampled instance-level events: PLD only there.
@pytest.mark.parametrize(("level", "accountant"), [("agent", "pld"), ("agent", "rdp"), ("instance", "pld")])
def test_epsilon_is_unchanged(level, accountant):
    ledger = PrivacyLedger()
    for release in charges():
        ledger.charge(release)
    reference = epsilon_for(merged_by_hand(charges(), level), DELTA, accountant)
    assert epsilon_for(ledger.event(level), DELTA, accountant) == reference


def test_stored_events_round_trip_and_compose_the_same(tmp_path):
    path = tmp_path / "ledger.db"
    with PersistentLedger(path, "fed") as ledger:
        for release in charges():
            ledger.charge(release)
    with PersistentLedger(path, "fed") as reopened:
        for level in LEVELS:
            total = reopened.total_event(level)
            assert total == built(charges(), level)
            assert event_from_json(event_to_json(total)) == total
            assert reopened.spent(level) == epsilon_for(built(charges(), level), 1e-3, "pld")


def test_numpy_counts_compose():
    ledger = PrivacyLedger()
    ledger.charge(pate_fl_events(20.0, np.int64(5)))
    ledger.charge(pate_fl_events(20.0, 5))
    assert ledger.event("agent") == dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(20.0), 10)
    assert type(gaussian_release_event(20.0, 1.0, np.int64(5)).count) is int
