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
from tenure.backends.memory import MemoryBackend
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


def test_a_lease_built_by_hand_cannot_be_held(store: tenure.Store) -> None:
    lease = store.claim("j", "a", 10.0)
    by_hand = tenure.Lease(lease.job_id, lease.owner, lease.token + 1, lease.expires_at, lease.ttl)
    with pytest.raises(tenure.InvalidArgument, match="no safe deadline"):
        store.hold_lease(by_hand)  # its deadline is infinity: it would be trusted forever
    held = store.hold_lease(dataclasses.replace(lease, deadline=float("inf")))
    assert held.deadline == lease.deadline  # a copy of our own claim: held until the deadline stamped
    held.release()


class Recording(MemoryBackend):
    """Keeps the leases the store hands it: what a backend may trust."""

    def __init__(self, clock: tenure.Clock) -> None:
        super().__init__(clock)
        self.seen: list[tenure.Lease] = []

    def renew(self, lease: tenure.Lease, ttl: float) -> tenure.Lease:
        self.seen.append(lease)
        return super().renew(lease, ttl)

    def complete(self, lease: tenure.Lease, result: bytes | None) -> None:
        self.seen.append(lease)
        super().complete(lease, result)


def test_a_backend_sees_only_deadlines_this_store_stamped(clock: tenure.ManualClock) -> None:
    # ZooKeeper and etcd skip judging expiry while a lease's deadline runs: a copy of a lease
    # with a later deadline, or one this store never stamped, must not reach them as such.
    backend = Recording(clock)
    with tenure.Store(backend, clock=clock) as store:
        lease = store.claim("j", "a", 10.0)
        clock.advance(20.0)  # the lease ran out long ago
        with pytest.raises(tenure.StaleLease):
            store.renew(dataclasses.replace(lease, deadline=clock.monotonic() + 5.0))
        assert backend.seen[-1].deadline == lease.deadline  # the stamped one, long passed
        with tenure.Store(backend, clock=clock) as other:  # never stamped this token
            other.complete(dataclasses.replace(store.claim("k", "a", 10.0), deadline=clock.monotonic() + 5.0))
            assert backend.seen[-1].deadline == float("inf")  # judged in full
            with pytest.raises(tenure.InvalidArgument, match="no safe deadline from this store"):
                other.hold_lease(store.claim("m", "a", 10.0))


def test_a_huge_ttl_is_refused_whatever_the_backend_declares(store: tenure.Store) -> None:
    for ttl in (1e300, 10**400, 8 * 24 * 3600.0):
        with pytest.raises(tenure.InvalidArgument, match="ttl"):
            store.hold("j", "a", ttl)
    assert list(store.jobs()) == []

