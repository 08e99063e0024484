"""The one promise about claim_next's order (docs/protocol.md, "State machine"), on every backend:
an expired lease before any pending job; pending jobs in the order they became claimable (a job
submitted with a delay queues at its claimable_at), each claim taking one of the ORDER_TOLERANCE
oldest among jobs queued through one client."""

from __future__ import annotations

import pytest

import tenure
from tenure.core import contention
from tenure.core.contention import SPREAD
from tenure.testing.kit import Kit
from tenure.testing.suite_lifecycle import wait_claimable

ORDER_TOLERANCE = SPREAD  # etcd and ZooKeeper start claimers up to 4 queue places apart


def queue(store: tenure.Store, job_ids: list[str]) -> None:
    for job_id in job_ids:
        if isinstance(store.clock, tenure.ManualClock):
            store.clock.advance(0.001)  # one store time each, as jobs submitted one after another
        store.submit(job_id)


class OrderTests:
    def test_claim_next_takes_an_expired_lease_then_pending_jobs_oldest_first(
            self, kit: Kit, store: tenure.Store) -> None:
        waiting = [f"q{i:02d}" for i in range(12)]
        queue(store, waiting)
        store.claim("overdue", owner="a", ttl=kit.ttl * 20)
        store.force_expire("overdue")
        first = store.claim_next(owner="b", ttl=kit.ttl * 20)
        assert first is not None and first.job_id == "overdue"
        order = []
        while waiting:
            lease = store.claim_next(owner="b", ttl=kit.ttl * 20)
            assert lease is not None
            assert lease.job_id in waiting[:ORDER_TOLERANCE], (lease.job_id, waiting[:ORDER_TOLERANCE])
            waiting.remove(lease.job_id)
            order.append(lease.job_id)
        assert store.claim_next(owner="b", ttl=kit.ttl) is None
        print("claimed in order:", order)  # how far from FIFO this backend went (run with -s)

    def test_a_delayed_job_queues_at_the_time_it_becomes_claimable(self, kit: Kit, store: tenure.Store,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
        # Claimers that start a few places apart (contention.spread) may pass over the delayed
        # job any number of times, as over any job; starting at the first place, its own place
        # in the order is what is checked.
        monkeypatch.setattr(contention, "SPREAD", 1)
        store.submit("delayed", delay=min(kit.short_ttl, 1.0))  # waited out: kept short
        queue(store, ["ready"])
        claimable_at = store.get("delayed")
        assert claimable_at is not None and claimable_at.claimable_at is not None
        wait_claimable(store, "delayed", claimable_at.claimable_at)
        queue(store, [f"later{i}" for i in range(ORDER_TOLERANCE)])
        first = store.claim_next(owner="b", ttl=kit.ttl * 20)
        second = store.claim_next(owner="b", ttl=kit.ttl * 20)
        taken = {lease.job_id for lease in (first, second) if lease is not None}
        # Within the tolerance, the delayed job comes before every job queued after its time.
        rest = []
        while (lease := store.claim_next(owner="b", ttl=kit.ttl * 20)) is not None:
            rest.append(lease.job_id)
        order = [lease.job_id for lease in (first, second) if lease is not None] + rest
        assert sorted(order) == sorted(["delayed", "ready", *[f"later{i}" for i in range(ORDER_TOLERANCE)]])
        assert order.index("delayed") <= ORDER_TOLERANCE, order
        assert taken  # two were claimable at once
