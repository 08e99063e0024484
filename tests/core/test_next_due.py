"""``Backend.next_due``: when a store's next job becomes claimable by time alone, which a
blocking claim_next sleeps until (``tenure.core.waiting``), on the stores that can tell."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import tenure
import tenure.aio


@pytest.mark.parametrize("scheme", ["memory", "sqlite"])
def test_next_due_is_the_soonest_scheduled_job_or_lease_end_that_can_free_a_job(scheme: str, tmp_path: Path) -> None:
    clock = tenure.ManualClock(start=100.0)
    url = f"sqlite:///{tmp_path / 'due.db'}" if scheme == "sqlite" else "memory://"
    with tenure.connect(url, clock=clock) as store:
        due = store.backend.next_due
        assert due() is None  # nothing waits for a time
        store.submit("later", delay=5)
        assert due() == 5.0
        lease = store.claim("held", owner="a", ttl=3)
        assert due() == 3.0
        store.submit("last", max_attempts=1)
        store.claim("last", owner="a", ttl=1)  # its end parks the job: it frees none
        assert due() == 3.0
        store.renew(lease, ttl=10)
        assert due() == 5.0  # the renewed lease's old end is not due
        clock.advance(6)
        assert due() == 4.0  # "later" is claimable: claim_next's to take; the lease's end comes next
        store.claim("later", owner="b", ttl=2)
        assert due() == 2.0
        clock.advance(20)
        assert due() is None


@pytest.mark.parametrize("scheme", ["memory", "sqlite"])
def test_the_asyncio_flavour_asks_the_same_store(scheme: str, tmp_path: Path) -> None:
    async def main() -> list[float | None]:
        clock = tenure.ManualClock(start=100.0)
        url = f"sqlite:///{tmp_path / 'due.db'}" if scheme == "sqlite" else "memory://"
        async with tenure.aio.connect(url, clock=clock) as store:
            found = [await store.backend.next_due()]
            await store.submit("later", delay=5)
            found.append(await store.backend.next_due())
            return found

    assert asyncio.run(main()) == [None, 5.0]
