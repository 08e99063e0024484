"""tenure.aio's AsyncRecordBackend runs the protocol's steps (tenure.core.steps) as the sync
RecordBackend does: the twin of tests/core/test_optimistic_backend.py on the same small optimistic
store, whose transaction here awaits every read in the loop (``tenure.aio.bridge``), as a
networked store's does. Pauses are recorded, never slept."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

import pytest

import tenure
from tenure.aio import AsyncRecordBackend, AsyncStore, bridge
from tenure.core import contention, read_facts, transitions
from tenure.core.record_transaction import Transaction
from tenure.core.records import JobRecord, JobState
from tests.core.test_optimistic_backend import CasBackend, CasTransaction

T = TypeVar("T")


class FetchingTransaction(CasTransaction):
    """Awaits every read in the loop (a turn of it, as a round trip lets others run); counts
    the fetches and the step's loads."""

    def __init__(self, b: CasBackend, fresh: bool, fetches: list[str], loads: list[str]) -> None:
        super().__init__(b, fresh)
        self._fetches, self._loads = fetches, loads

    def load(self, job_id: str, op: tenure.Op, lease: tenure.Lease | None = None) -> read_facts.Loaded:
        self._loads.append(job_id)
        return super().load(job_id, op, lease)

    def read(self, job_id: str) -> tuple[JobRecord | None, int]:
        return bridge.await_only(self._fetched(job_id, lambda: super(FetchingTransaction, self).read(job_id)))

    def claimable(self) -> list[tuple[float, str, int]]:
        return bridge.await_only(self._fetched("(claimable)", super().claimable))

    async def _fetched(self, what: str, read: Callable[[], T]) -> T:
        await asyncio.sleep(0)  # a round trip lets the loop run others
        self._fetches.append(what)
        return read()


class AsyncCasBackend(AsyncRecordBackend):
    def __init__(self, cas: CasBackend, paused: list[float]) -> None:
        async def pause(seconds: float) -> None:
            paused.append(seconds)

        super().__init__(cas, inline=True, sleep=pause)
        self.cas = cas
        self.fetches: list[str] = []
        self.loads: list[str] = []

    @contextlib.asynccontextmanager
    async def transaction(self, fresh: bool = False) -> AsyncIterator[Transaction]:
        tx = FetchingTransaction(self.cas, fresh, self.fetches, self.loads)
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


def test_a_step_runs_once_its_reads_awaited_where_it_made_them(aio: AsyncCasBackend, backend: CasBackend,
                                                                store: AsyncStore) -> None:
    async def scenario() -> None:
        await store.submit_many(["a", "b", "c"])
        assert aio.fetches == ["a", "b", "c"] and aio.loads == ["a", "b", "c"]  # each load once: no rerun
        assert [e.job_id for e in backend.events] == ["a", "b", "c"]
        backend.cache.clear()
        lease = await store.claim_next(owner="w", ttl=10)
        assert lease is not None and lease.job_id == "a" and aio.fetches[3:] == ["(claimable)", "a"]
        assert aio.loads[3:] == ["a"]

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
