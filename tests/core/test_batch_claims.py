"""Claims in batches at their edges: requests counted at each store's client boundary (one for
a batch where the store allows it), the core's loop for a store that cannot batch, a batch
split by size or bytes, a blocking batch, a cancelled one in tenure.aio, the largest batch.

The conformance suite (tenure/testing/suite_batches.py) holds the protocol's rules for batches
on every store; these are about how the calls are made.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
import tenure.aio
from benchmarks.many_leases import count_requests
from tenure.backends.memory import MemoryBackend
from tenure.core.store_rules import MAX_BATCH
from tests.conftest import BACKENDS
from tests.harness import Harness

TTL = 30.0


@pytest.fixture(params=["memory", "sqlite", "postgres", "zk"])
def opened(request: pytest.FixtureRequest) -> Iterator[tuple[tenure.Store, str]]:
    backend = request.param
    if backend not in BACKENDS:
        pytest.skip(f"{backend} not in TENURE_TEST_BACKENDS")
    harness: Harness = request.getfixturevalue(f"{backend}_harness")
    with harness.connect() as store:
        yield store, backend


def test_a_batch_is_one_request_where_the_store_allows_it(opened: tuple[tenure.Store, str]) -> None:
    store, backend = opened
    store.submit_many([f"j{i:02d}" for i in range(40)])
    store.now()  # ZooKeeper: its clock znode exists before counting
    counter = count_requests(store.backend, backend)
    leases = store.claim_next_many("a", TTL, 32)
    claimed = counter.count
    assert store.complete_many(leases) == [None] * 32
    completed = counter.count - claimed
    assert len(leases) == 32
    if backend == "zk":  # reads of the index and of the proposed records, then one multi
        assert claimed <= 10 and completed <= 2, (claimed, completed)
    else:  # one transaction (memory, SQLite), one statement (PostgreSQL)
        assert (claimed, completed) == (1, 1)


class Unbatched(MemoryBackend):
    """A store that cannot batch (as a third party's): the core's loop, a request per lease;
    its claim_next fails from the ``fail_from``-th call on."""

    CLAIMS_IN_BATCHES = False
    COMPLETES_IN_BATCHES = False
    fail_from = 0
    calls = 0

    def claim_next(self, owner: str, ttl: float) -> tenure.Lease | None:
        type(self).calls += 1
        if self.fail_from and self.calls >= self.fail_from:
            raise tenure.BackendUnavailable("down")
        return super().claim_next(owner, ttl)


def _unbatched(monkeypatch: pytest.MonkeyPatch, fail_from: int = 0) -> tenure.Store:
    monkeypatch.setattr(Unbatched, "fail_from", fail_from)
    monkeypatch.setattr(Unbatched, "calls", 0)
    store = tenure.Store(Unbatched(tenure.ManualClock()))
    store.submit_many([f"j{i}" for i in range(5)])
    return store


def test_a_store_that_cannot_batch_claims_one_request_each(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _unbatched(monkeypatch)
    leases = store.claim_next_many("a", TTL, 3)
    assert [lease.job_id for lease in leases] == ["j0", "j1", "j2"] and Unbatched.calls == 3
    assert len(store.claim_next_many("a", TTL, 10)) == 2 and Unbatched.calls == 6  # the last found none
    assert store.complete_many(leases) == [None] * 3


def test_an_error_after_some_claims_returns_those_won(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _unbatched(monkeypatch, fail_from=3)
    won = store.claim_next_many("a", TTL, 5)
    assert [lease.job_id for lease in won] == ["j0", "j1"]  # not lost to the error of the third
    with pytest.raises(tenure.BackendUnavailable):
        store.claim_next_many("a", TTL, 5)  # the next call meets it first: raised


def test_a_job_claimed_again_within_one_loop_comes_back_once_with_its_newest_lease() -> None:
    clock = tenure.ManualClock()
    store = tenure.Store(Unbatched(clock), clock=clock)
    store.submit_many(["j0", "j1"])
    claim_next = store.backend.claim_next

    def slow(owner: str, ttl: float) -> tenure.Lease | None:
        lease = claim_next(owner, ttl)
        if lease is not None and lease.token == 1 and lease.job_id == "j0":
            clock.advance(ttl + 1)  # the first request outlasts the TTL: its lease runs out
        return lease

    store.backend.claim_next = slow  # type: ignore[method-assign]
    leases = store.claim_next_many("a", 1.0, 3)  # j0, j0 again (expired: first in line), then j1
    assert [(lease.job_id, lease.token) for lease in leases] == [("j0", 2), ("j1", 1)]  # three claims made


def test_a_batch_larger_than_a_transaction_is_claimed_in_several(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MemoryBackend, "CLAIM_BATCH", 2)
    with tenure.connect("memory://") as store:
        store.submit_many([f"j{i}" for i in range(5)])
        counter = count_requests(store.backend, "memory")
        assert [lease.job_id for lease in store.claim_next_many("a", TTL, 10)] == [f"j{i}" for i in range(5)]
        assert counter.count == 3  # 2 + 2 + 1, the last finding the queue empty


def test_a_transaction_bounded_in_bytes_takes_fewer_and_the_call_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MemoryBackend, "CLAIM_BYTES", 100)
    monkeypatch.setattr(MemoryBackend, "claim_weight", lambda self, job_id, owner: 40)
    with tenure.connect("memory://") as store:
        store.submit_many([f"j{i}" for i in range(5)])
        counter = count_requests(store.backend, "memory")
        assert len(store.claim_next_many("a", TTL, 5)) == 5
        assert counter.count == 3  # 2 claims of 40 bytes fit in 100, then 2, then 1


def test_the_largest_batch_is_taken_and_a_larger_refused() -> None:
    with tenure.connect("memory://") as store:
        store.submit_many([f"j{i:04d}" for i in range(MAX_BATCH + 1)])
        leases = store.claim_next_many("a", TTL, MAX_BATCH)
        assert len(leases) == MAX_BATCH
        extra = store.claim("j1000", owner="a", ttl=TTL)
        with pytest.raises(tenure.InvalidArgument, match="at most 1000"):
            store.complete_many([*leases, extra])
        assert [e for e in store.history() if e.op is tenure.Op.COMPLETE] == []
        assert store.complete_many(leases) == [None] * MAX_BATCH


def test_a_blocking_batch_returns_once_something_is_claimable() -> None:
    with tenure.connect("memory://") as store:
        assert store.claim_next_many("a", TTL, 5, wait=0.05) == []  # the wait is over: nothing
        later = threading.Timer(0.2, lambda: store.submit_many(["x", "y"]))  # real time: the waiter polls
        later.start()
        try:
            found = store.claim_next_many("a", TTL, 5, wait=10)
        finally:
            later.join()
        assert sorted(lease.job_id for lease in found) == ["x", "y"]


def test_a_cancelled_batch_in_tenure_aio_gives_back_every_lease_it_won(tmp_path: Any) -> None:
    async def run() -> list[tenure.HistoryEvent]:
        async with await tenure.aio.connect(f"sqlite:///{tmp_path}/s.db") as store:
            await store.submit_many(["a", "b", "c"])
            task = asyncio.create_task(store.claim_next_many("w", TTL, 3))
            await asyncio.sleep(0)  # the claim is on its way to the worker thread
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            for _ in range(200):  # the releases follow the claim's answer
                if len([e for e in await store.history() if e.op is tenure.Op.RELEASE]) == 3:
                    break
                await asyncio.sleep(0.01)
            return await store.history()

    events = asyncio.run(run())
    assert sorted(e.job_id for e in events if e.op is tenure.Op.CLAIM) == ["a", "b", "c"]
    assert sorted(e.job_id for e in events if e.op is tenure.Op.RELEASE) == ["a", "b", "c"]
