"""claim_next's order (``tenure.core.order``, docs/protocol.md "claim_next"), the same cases on
every backend: expired leases before pending jobs, soonest end first and ties by job id; pending
jobs in the order they became claimable (a released job from its release, a delayed or failed
one from its ``claimable_at``, the jobs of one write in the order given); never a scheduled job
before its time. Each case checks the rule exactly, but where the backend's
``Characteristics.claim_order`` declares a ``Tolerance``, and then exactly that tolerance.

The order cases start every call at the first place (``contention.SPREAD`` set to 1): the
spread is a case of its own. Time passes as the store's clock allows: an injected ManualClock
is advanced (memory, SQLite); a server's clock (PostgreSQL's ``clock_timestamp()``, ZooKeeper's
leader, etcd's lease TTLs) cannot be injected, so leases and delays run out in real time
through ``kit.expire`` and ``wait_claimable``.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

import tenure
from tenure.core import contention, order
from tenure.core.contention import SPREAD
from tenure.testing.kit import Kit
from tenure.testing.suite_lifecycle import wait_claimable

ORDER_TOLERANCE = SPREAD  # etcd and ZooKeeper start claimers up to 4 queue places apart


def queue(store: tenure.Store, job_ids: list[str]) -> None:
    for job_id in job_ids:
        if isinstance(store.clock, tenure.ManualClock):
            store.clock.advance(0.001)  # one store time each, as jobs submitted one after another
        store.submit(job_id)


def drain(kit: Kit, store: tenure.Store) -> list[str]:
    """The jobs claim_next hands out, in order, until it finds none."""
    taken = []
    while (lease := store.claim_next(owner="drain", ttl=kit.ttl * 20)) is not None:
        taken.append(lease.job_id)
    return taken


def by_end(leases: Iterable[tenure.Lease]) -> list[str]:
    """The rule's order of expired leases: ``order.Expired`` (end, then job id)."""
    return [entry.job_id for entry in sorted(order.Expired(lease.expires_at, lease.job_id) for lease in leases)]


def tolerance(kit: Kit) -> order.Tolerance:
    """How the backend declares its claim_next departs from the rule."""
    return kit.characteristics.claim_order


def assert_in_order(taken: list[str], expected: list[str], tied: frozenset[str] = frozenset()) -> None:
    """``taken`` is ``expected``, but that the ``tied`` jobs, which stand together, may come in
    any order among themselves."""
    places = [i for i, job_id in enumerate(expected) if job_id in tied]
    assert [job_id for job_id in taken if job_id not in tied] == [j for j in expected if j not in tied], taken
    assert {taken[i] for i in places} == tied, (taken, expected)


def by_claim(leases: list[tenure.Lease]) -> tuple[list[str], frozenset[str]]:
    """``Tolerance.expired_by_claim``'s order: by claim, which the token tells on such a store
    (``tokens_ordered_across_jobs``), and the jobs of one claim's write (one token), by key."""
    tokens = [lease.token for lease in leases]
    return ([lease.job_id for lease in sorted(leases, key=lambda lease: lease.token)],
            frozenset(lease.job_id for lease in leases if tokens.count(lease.token) > 1))


class OrderTests:
    @pytest.fixture
    def first_place(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Every claim starts at the first place: the order itself is checked, not the spread."""
        monkeypatch.setattr(contention, "SPREAD", 1)

    @pytest.mark.usefixtures("first_place")
    def test_order_expired_leases_first_soonest_end_first(self, kit: Kit, store: tenure.Store) -> None:
        queue(store, ["pending"])
        # Claimed long first: the order of claims is not the order of ends.
        long = store.claim("long", owner="a", ttl=kit.short_ttl * 2)
        short = store.claim("short", owner="a", ttl=kit.short_ttl)
        assert short.expires_at < long.expires_at
        kit.expire(store, short)
        kit.expire(store, long)
        taken = drain(kit, store)
        # etcd sees that a lease ended, not when: by claim (Tolerance.expired_by_claim).
        assert by_end([long, short]) == ["short", "long"]
        assert taken == [*(["long", "short"] if tolerance(kit).expired_by_claim else by_end([long, short])), "pending"]

    @pytest.mark.usefixtures("first_place")
    def test_order_expired_leases_that_end_together_by_job_id(self, kit: Kit, store: tenure.Store) -> None:
        queue(store, ["x2", "x1"])
        leases = store.claim_next_many(owner="a", ttl=kit.short_ttl, n=2)  # one write: most stores end them together
        assert [lease.job_id for lease in leases] == ["x2", "x1"]
        for lease in sorted(leases, key=lambda lease: lease.expires_at):
            kit.expire(store, lease)
        queue(store, ["after"])
        taken = drain(kit, store)
        if tolerance(kit).expired_by_claim:
            expected, tied = by_claim(leases)
            assert kit.characteristics.tokens_ordered_across_jobs
            assert_in_order(taken, [*expected, "after"], tied)
        else:
            assert taken == [*by_end(leases), "after"]
        if len({lease.expires_at for lease in leases}) == 1:
            print("tied ends:", taken)  # the case checked the tie itself (run with -s)

    @pytest.mark.usefixtures("first_place")
    def test_order_pending_jobs_of_one_write_in_the_order_given(self, kit: Kit, store: tenure.Store) -> None:
        queue(store, ["before"])
        store.submit_many(["t2", "t1", "t3"])  # one write: one store time
        queue(store, ["after"])
        assert drain(kit, store) == ["before", "t2", "t1", "t3", "after"]

    @pytest.mark.usefixtures("first_place")
    def test_order_a_released_job_queues_from_its_release(self, kit: Kit, store: tenure.Store) -> None:
        queue(store, ["a", "b"])
        store.release(store.claim("a", owner="w", ttl=kit.ttl))
        queue(store, ["c"])
        assert drain(kit, store) == ["b", "a", "c"]

    @pytest.mark.usefixtures("first_place")
    def test_order_delayed_and_failed_jobs_queue_at_their_claimable_at(self, kit: Kit, store: tenure.Store) -> None:
        delay = min(kit.short_ttl, 1.0)  # waited out: kept short
        store.submit("delayed", delay=delay)
        store.fail(store.claim("failed", owner="w", ttl=kit.ttl), "boom", retry_in=delay / 2)
        queue(store, ["before"])
        due = {}
        for job_id in ("delayed", "failed"):
            status = store.get(job_id)
            assert status is not None and status.state is tenure.JobState.SCHEDULED and status.claimable_at
            due[job_id] = status.claimable_at
        for job_id, at in due.items():
            wait_claimable(store, job_id, at)
        queue(store, ["after"])
        assert drain(kit, store) == ["before", *sorted(due, key=lambda job_id: due[job_id]), "after"]

    @pytest.mark.usefixtures("first_place")
    def test_order_never_a_scheduled_job_before_its_time(self, kit: Kit, store: tenure.Store) -> None:
        store.submit("later", delay=kit.ttl * 20)
        queue(store, ["now"])
        assert drain(kit, store) == ["now"]
        later = store.get("later")
        assert later is not None and later.state is tenure.JobState.SCHEDULED

    def test_claim_next_takes_an_expired_lease_then_pending_jobs_oldest_first(
            self, kit: Kit, store: tenure.Store) -> None:
        # The spread (Tolerance.spread): each call takes one of the ORDER_TOLERANCE oldest.
        waiting = [f"q{i:02d}" for i in range(12)]
        queue(store, waiting)
        store.claim("overdue", owner="a", ttl=kit.ttl * 20)
        store.force_expire("overdue")
        first = store.claim_next(owner="b", ttl=kit.ttl * 20)
        assert first is not None and first.job_id == "overdue"
        order_taken = []
        window = ORDER_TOLERANCE if tolerance(kit).spread else 1
        while waiting:
            lease = store.claim_next(owner="b", ttl=kit.ttl * 20)
            assert lease is not None
            assert lease.job_id in waiting[:window], (lease.job_id, waiting[:window])
            waiting.remove(lease.job_id)
            order_taken.append(lease.job_id)
        assert store.claim_next(owner="b", ttl=kit.ttl) is None
        print("claimed in order:", order_taken)  # how far from FIFO this backend went (run with -s)
