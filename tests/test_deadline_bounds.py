"""Every local deadline computed from a TTL leaves a safe window, or the call is refused.

A drift margin that leaves no time to renew, a lease whose deadline was never stamped (it
would be trusted forever), or one whose deadline lies further ahead than any claim could have
stamped it, is an ``InvalidArgument`` at the call: never a lease lost before its first
renewal, never a deadline past the clock's range.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

import tenure
from tenure.core.renewal import MAX_DRIFT_MARGIN, RENEW_FRACTION


@pytest.fixture
def clock() -> tenure.ManualClock:
    return tenure.ManualClock()


@pytest.fixture
def store(clock: tenure.ManualClock) -> Iterator[tenure.Store]:
    with tenure.connect("memory://", clock=clock) as s:
        yield s


def test_the_largest_drift_margin_still_renews_before_the_deadline() -> None:
    # The first renewal is due a third of the TTL in; the safe window must end after it.
    assert 1 - MAX_DRIFT_MARGIN > RENEW_FRACTION
    backend = tenure.connect("memory://").backend
    for margin in (0.6, 0.9, 0.99):  # each would lose every held lease before its first renewal
        with pytest.raises(tenure.InvalidArgument, match="little time to renew"):
            tenure.Store(backend, drift_margin=margin)
    tenure.Store(backend, drift_margin=MAX_DRIFT_MARGIN).close()


def test_an_unstamped_lease_cannot_be_held(store: tenure.Store) -> None:
    lease = store.claim("j", "a", 10.0)
    unstamped = dataclasses.replace(lease, deadline=float("inf"))
    with pytest.raises(tenure.InvalidArgument, match="no safe deadline"):
        store.hold_lease(unstamped)
    held = store.hold_lease(lease)  # the lease as claimed is held
    assert held.remaining() > 0
    held.release()


def test_a_deadline_further_ahead_than_its_ttl_is_refused(store: tenure.Store, clock: tenure.ManualClock) -> None:
    lease = store.claim("j", "a", 10.0)
    forged = dataclasses.replace(lease, deadline=clock.monotonic() + 3600.0)
    for call in (store.hold_lease, store.renew, store.complete, store.release):
        with pytest.raises(tenure.InvalidArgument, match="more than its ttl ahead"):
            call(forged)
    status = store.get("j")
    assert status is not None and status.state is tenure.JobState.LEASED
    assert [e.op for e in store.history("j")] == [tenure.Op.CLAIM] and store.rejections() == []


def test_a_huge_ttl_is_refused_whatever_the_backend_declares(store: tenure.Store) -> None:
    for ttl in (1e300, 10**400, 8 * 24 * 3600.0):
        with pytest.raises(tenure.InvalidArgument, match="ttl"):
            store.hold("j", "a", ttl)
    assert list(store.jobs()) == []
