"""HeldLease.check() and the renewal thread consult Backend.link(), for any backend with sessions.

The memory store stands in for one, its connection state set by the test: the sessions are
what is under test here, not the store.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import tenure
from tenure.aio import AsyncStore, ThreadedBackend
from tenure.backends.memory import MemoryBackend
from tenure.core.backend import Link
from tests.aio_sync import SyncStore


class SessionBackend(MemoryBackend):
    state = Link()

    def link(self) -> Link:
        return self.state


@pytest.fixture(params=["sync", "aio"])
def session(request: pytest.FixtureRequest) -> Iterator[tuple[tenure.Store, SessionBackend]]:
    """Sync, or ("aio") a tenure.aio store behind the conformance suite's sync face (tests/aio_sync.py)."""
    clock = tenure.ManualClock()
    backend = SessionBackend(clock)
    if request.param == "sync":
        store: Any = tenure.Store(backend, clock=clock)
    else:
        store = SyncStore.around(lambda: AsyncStore(ThreadedBackend(backend), clock=clock))
    yield store, backend
    store.close()


def test_an_interruption_puts_the_lease_at_risk_until_a_renewal_verifies_it(
        session: tuple[tenure.Store, SessionBackend]) -> None:
    store, backend = session
    held = store.hold("j", owner="a", ttl=10.0)
    held.check()
    backend.state = Link(epoch=1, connected=False)
    with pytest.raises(tenure.LeaseLost, match="at risk"):
        held.check()
    backend.state = Link(epoch=1, connected=True)
    with pytest.raises(tenure.LeaseLost, match="at risk"):
        held.check()  # reconnected, but not verified
    assert held._renew_once() is True and not held.lost.is_set()
    held.check()
    held.complete()


def test_a_lost_session_loses_the_lease_for_good(session: tuple[tenure.Store, SessionBackend]) -> None:
    store, backend = session
    held = store.hold("j", owner="a", ttl=10.0)
    backend.state = Link(epoch=1, connected=True, lost_epoch=1)
    assert held._renew_once() is False  # never renewed from the new session
    with pytest.raises(tenure.LeaseLost, match="session was lost"):
        held.check()
    assert held.lost.is_set()
    later = store.hold("k", owner="a", ttl=10.0)  # claimed on the new session: fine
    later.check()
    later.complete()
