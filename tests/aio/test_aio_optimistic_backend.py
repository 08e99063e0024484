"""tenure.aio's AsyncRecordBackend runs the protocol's steps (tenure.core.steps) as the sync
RecordBackend does: the twin of tests/core/test_optimistic_backend.py on the same small optimistic
store, whose transaction here answers reads only from what an awaited fetch brought
(``steps.NotFetched``), as a networked store's would. Pauses are recorded, never slept."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import pytest

import tenure
from tenure.aio import AsyncRecordBackend, AsyncStore
from tenure.core import contention, steps, transitions
from tenure.core.record_transaction import Transaction
from tenure.core.records import JobRecord, JobState
from tests.core.test_optimistic_backend import CasBackend, CasTransaction


class FetchingTransaction(CasTransaction):
    """Reads only what was fetched; a read not fetched yet raises NotFetched (and the buffered
    writes of the interrupted run are forgotten), its fetch awaits a turn of the loop."""

    def __init__(self, b: CasBackend, fresh: bool, fetches: list[str]) -> None:
        super().__init__(b, fresh)
        self._fetches = fetches
        self._records: dict[str, tuple[JobRecord | None, int]] = {}
        self._claimable: list[tuple[float, str, int]] | None = None

    def read(self, job_id: str) -> tuple[JobRecord | None, int]:
        if job_id not in self._records:
            self._missing(job_id, self._fetch_record)
        return self._records[job_id]

    def claimable(self) -> list[tuple[float, str, int]]:
        if self._claimable is None:
            self._missing("(claimable)", self._fetch_claimable)
        assert self._claimable is not None
        return self._claimable

    def _missing(self, what: str, fetch: Callable[[str], Awaitable[None]]) -> None:
        self.forget()
        raise steps.NotFetched(what, lambda: fetch(what))

    async def _fetch_record(self, job_id: str) -> None:
        await asyncio.sleep(0)  # a round trip lets the loop run others
        self._fetches.append(job_id)
        self._records[job_id] = super().read(job_id)

    async def _fetch_claimable(self, what: str) -> None:
        await asyncio.sleep(0)
        self._fetches.append(what)
        self._claimable = super().claimable()


class AsyncCasBackend(AsyncRecordBackend):
    def __init__(self, cas: CasBackend, paused: list[float]) -> None:
        async def pause(seconds: float) -> None:
            paused.append(seconds)

        super().__init__(cas, inline=True, sleep=pause)
        self.cas = cas
        self.fetches: list[str] = []

    @contextlib.asynccontextmanager
    async def transaction(self, fresh: bool = False) -> AsyncIterator[Transaction]:
        tx = FetchingTransaction(self.cas, fresh, self.fetches)
        yield tx
        tx.commit()


@pytest.fixture
def paused() -> list[float]:
    return []


@pytest.fixture
def backend() -> CasBackend:
    return CasBackend(tenure.ManualClock())


@pytest.fixture
def aio(backend: CasBackend, paused: list[float]) -> AsyncCasBackend:
    return AsyncCasBackend(backend, paused)


@pytest.fixture
def store(aio: AsyncCasBackend, backend: CasBackend) -> AsyncStore:
    return AsyncStore(aio, clock=backend.clock)


def run(scenario: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(scenario, 30))  # bounded: a driver that loops fails, not hangs


def test_a_step_runs_again_once_its_read_is_fetched(aio: AsyncCasBackend, backend: CasBackend,
                                                    store: AsyncStore) -> None:
    async def scenario() -> None:
        await store.submit_many(["a", "b", "c"])
        assert aio.fetches == ["a", "b", "c"]  # one fetch per job, the step rerun after each
        assert [e.job_id for e in backend.events] == ["a", "b", "c"]  # the reruns wrote once
        backend.cache.clear()
        lease = await store.claim_next(owner="w", ttl=10)
        assert lease is not None and lease.job_id == "a" and aio.fetches[3:] == ["(claimable)", "a"]

    run(scenario())


def test_a_lost_race_is_retried_with_fresh_reads(backend: CasBackend, store: AsyncStore,
                                                 paused: list[float]) -> None:
    async def scenario() -> None:
        await store.submit("j")
        backend.cache.clear()  # every attempt reads: each lost race is a collision
        backend.interfere = 3
        lease = await store.claim("j", owner="a", ttl=10)
        assert lease.token == 1 and len(paused) == 3
        assert [e.op for e in backend.events] == [tenure.Op.SUBMIT, tenure.Op.CLAIM]  # written once

    run(scenario())


def test_the_pauses_are_bounded_as_the_sync_drivers_are(backend: CasBackend, store: AsyncStore,
                                                        paused: list[float]) -> None:
    async def scenario() -> None:
        await store.submit("j")
        backend.cache.clear()
        backend.interfere = 4
        await store.claim("j", owner="a", ttl=10)

    run(scenario())
    longest = [contention.pause(retry, lambda: 1.0) for retry in (1, 2, 3, 4)]  # doubling per retry
    assert len(paused) == 4 and all(0 <= p <= most for p, most in zip(paused, longest, strict=True))


def test_a_refuted_guess_is_retried_at_once(backend: CasBackend, store: AsyncStore, paused: list[float]) -> None:
    async def scenario() -> None:
        await store.submit("j")  # in the cache: the claim's first attempt guesses
        backend.interfere = 2
        lease = await store.claim("j", owner="a", ttl=10)
        assert lease.token == 1 and len(paused) == 1  # no pause after the guess, one after the read

    run(scenario())


def test_every_attempt_lost_is_outraced_and_writes_nothing(backend: CasBackend, store: AsyncStore) -> None:
    async def scenario() -> None:
        await store.submit("j")
        backend.interfere = contention.ATTEMPTS
        with pytest.raises(tenure.Outraced):
            await store.claim("j", owner="a", ttl=10)
        assert backend.records["j"][0].state is JobState.PENDING and len(backend.events) == 1

    run(scenario())


def test_a_renewal_on_a_stale_guess_is_refused_from_fresh_reads(backend: CasBackend, store: AsyncStore) -> None:
    async def scenario() -> None:
        lease = await store.claim("j", owner="a", ttl=10)
        backend.clock.advance(11)
        rec, version = backend.records["j"]
        taken = transitions.claim(rec, "j", "b", 10, backend.now())  # another client, not in our cache
        backend.records["j"] = (taken, version + 1)
        reads = backend.reads
        with pytest.raises(tenure.StaleLease) as refused:
            await store.renew(lease)
        assert refused.value.rejection.current_owner == "b"
        assert backend.reads == reads + 1  # the guess said "yours", the commit said no, one fresh read
        assert len(backend.audit) == 1

    run(scenario())


def test_a_refusal_decided_on_a_guess_is_decided_again(backend: CasBackend, store: AsyncStore) -> None:
    async def scenario() -> None:
        await store.claim("j", owner="a", ttl=10)
        rec, version = backend.records["j"]
        backend.records["j"] = (dataclasses.replace(rec, state=JobState.PENDING, owner=None, lease_until=None,
                                                    ttl=None), version + 1)  # released by another client
        lease = await store.claim("j", owner="b", ttl=10)  # our cache still says "held by a"
        assert lease.owner == "b" and lease.token == 2

    run(scenario())


def test_sync_and_async_drivers_leave_the_same_store(paused: list[float]) -> None:
    """One scenario through both drivers: the same records, history, audit and reads."""

    def sync_side(backend: CasBackend) -> None:
        s = tenure.Store(backend, clock=backend.clock)
        s.submit_many(["a", "b"])
        lease = s.claim("a", owner="w", ttl=10)
        s.renew(lease)
        backend.clock.advance(30)
        with pytest.raises(tenure.StaleLease):
            s.complete(lease)
        nxt = s.claim_next(owner="v", ttl=10)
        assert nxt is not None
        s.release(nxt)
        s.force_expire("b")

    async def async_side(backend: CasBackend) -> None:
        s = AsyncStore(AsyncCasBackend(backend, paused), clock=backend.clock)
        await s.submit_many(["a", "b"])
        lease = await s.claim("a", owner="w", ttl=10)
        await s.renew(lease)
        backend.clock.advance(30)
        with pytest.raises(tenure.StaleLease):
            await s.complete(lease)
        nxt = await s.claim_next(owner="v", ttl=10)
        assert nxt is not None
        await s.release(nxt)
        await s.force_expire("b")

    one, two = CasBackend(tenure.ManualClock(1000.0)), CasBackend(tenure.ManualClock(1000.0))
    sync_side(one)
    run(async_side(two))
    assert one.records == two.records and one.events == two.events and one.audit == two.audit
    assert one.reads == two.reads
