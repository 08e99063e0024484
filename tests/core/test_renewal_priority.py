"""Renewals before claims: while a renewal of a held lease is late (unanswered a twentieth of
its TTL past its time), the store's claims wait for it (``Schedule.behind``), so a process
short of CPU or of store time keeps the leases it holds before it takes more.

On an injected clock; the memory store stands in for a store whose renewals hang
(``HangingBackend``). Real waits below are bounds that only a broken renewer reaches, and one
pause that gives a claim that does not wait the time to be sent.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import tenure
from tenure.aio import AsyncStore, ThreadedBackend
from tenure.core import renewal
from tenure.core.schedule import LATE_FRACTION
from tests.core.test_holding import PATIENCE, HangingBackend

TTL = 30.0
LATE = TTL / 3 + TTL * LATE_FRACTION  # from the claim: its first renewal due, and late


class Recording(HangingBackend):
    """Records, for each claim sent, whether the hanging renewal had been answered by then."""

    def __init__(self, clock: tenure.Clock) -> None:
        super().__init__(clock)
        self.claims_after_answer: list[bool] = []

    def claim(self, job_id: str, owner: str, ttl: float, **kw: Any) -> tenure.Lease:
        if job_id != "stuck":
            self.claims_after_answer.append(self.unblock.is_set())
        return super().claim(job_id, owner, ttl, **kw)


def test_a_claim_waits_while_a_renewal_is_late(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(renewal, "CLAIM_YIELD", PATIENCE)  # the bound out of the way
    clock = tenure.ManualClock()
    backend = Recording(clock)
    store = tenure.Store(backend, clock=clock)
    backend.hang.add("stuck")
    try:
        store.hold("stuck", owner="a", ttl=TTL)
        clock.advance(LATE)
        assert backend.hanging.acquire(timeout=PATIENCE), "the renewal was never sent"
        claimer = threading.Thread(target=store.claim, args=("other", "a", TTL))
        claimer.start()
        claimer.join(0.5)  # a claim that does not wait for the renewal is sent meanwhile
        backend.unblock.set()  # the renewal is answered (timed out: retried later)
        claimer.join(PATIENCE)
        assert backend.claims_after_answer == [True]
    finally:
        backend.unblock.set()
        store.close()


def test_a_claim_does_not_wait_for_a_renewal_on_time() -> None:
    clock = tenure.ManualClock()
    backend = Recording(clock)
    store = tenure.Store(backend, clock=clock)
    backend.hang.add("stuck")
    try:
        store.hold("stuck", owner="a", ttl=TTL)
        clock.advance(TTL / 3)  # due, not late
        assert backend.hanging.acquire(timeout=PATIENCE), "the renewal was never sent"
        store.claim("other", owner="a", ttl=TTL)  # sent while the renewal is on its way
        assert backend.claims_after_answer == [False]
    finally:
        backend.unblock.set()
        store.close()


def test_aio_claims_wait_while_a_renewal_is_late() -> None:
    async def scenario() -> None:
        clock = tenure.ManualClock()
        backend = HangingBackend(clock)
        store = AsyncStore(ThreadedBackend(backend), clock=clock)
        backend.hang.add("stuck")
        try:
            await store.hold("stuck", owner="a", ttl=TTL)
            clock.advance(LATE)
            assert await asyncio.to_thread(backend.hanging.acquire, True, PATIENCE), "the renewal was never sent"
            waiting = asyncio.ensure_future(store._renewer.yield_to_renewals())
            for _ in range(10):
                await asyncio.sleep(0)  # a gate that does not wait is through by now
            assert not waiting.done()
            backend.unblock.set()
            await asyncio.wait_for(waiting, PATIENCE)
        finally:
            backend.unblock.set()
            await store.close()

    asyncio.run(scenario())
