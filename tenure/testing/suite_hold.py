"""hold(): background renewal, safe local deadline, and what leaving the block does."""

from __future__ import annotations

import threading
import time

import pytest

import tenure
from tenure.core.renewal import RENEWAL_WORKERS
from tenure.testing.kit import Kit

RENEWED_TTL = 1.0  # seconds: the shortest TTL a test relies on renewals of in real time
PATIENCE = 20.0  # seconds: far beyond what a callback takes to run; reached only when it never runs


class HoldTests:
    def test_hold_renews_past_the_ttl_and_completes(self, kit: Kit) -> None:
        with kit.connect(clock=tenure.SystemClock()) as store:
            # At least a second: renewals a third of a TTL apart must each land within about
            # two thirds of it, and a shared CI machine stalls a process for a few tenths of a
            # second (a 0.3 s TTL lost its lease to such a stall in a full run).
            ttl = max(kit.short_ttl, RENEWED_TTL)
            with store.hold("j", owner="a", ttl=ttl) as held:
                first_expiry = held.lease.expires_at
                time.sleep(ttl * 2.5)  # real time: the renewal thread must keep the lease alive
                held.check()
                assert held.lease.expires_at > first_expiry
                held.complete(b"ok")
            status = store.get("j")
            assert status is not None and status.state is tenure.JobState.COMPLETED
            assert store.rejections() == []

    def test_leaving_without_complete_releases(self, kit: Kit, store: tenure.Store) -> None:
        with store.hold("j", owner="a", ttl=kit.ttl) as held:
            token = held.token
        assert store.get("j").state is tenure.JobState.PENDING  # type: ignore[union-attr]
        assert store.claim("j", owner="b", ttl=kit.ttl).token > token

    def test_an_exception_leaving_the_block_is_never_replaced(self, kit: Kit, store: tenure.Store) -> None:
        with pytest.raises(KeyError, match="mine"), store.hold("j", owner="a", ttl=kit.ttl) as held:
            store.force_expire("j")
            store.claim("j", owner="b", ttl=kit.ttl)  # the release on exit will be stale
            assert held.token
            raise KeyError("mine")

    def test_closing_the_store_ends_every_lease_it_holds(self, kit: Kit) -> None:
        with kit.connect() as other:
            store = kit.connect()
            held = [store.hold(job, owner="a", ttl=kit.ttl) for job in ("j1", "j2")]
            called: list[object] = []
            heard = threading.Event()

            def hear(lost: object) -> None:
                called.append(lost)
                heard.set()

            held[0].on_lost(hear)
            store.close()
            # Lost when close() returns, not at a deadline nobody watches any more.
            assert all(h.lost.is_set() for h in held), "a lease outlived the store that held it"
            assert all("the store was closed" in (h.lost_reason or "") for h in held)
            assert heard.wait(PATIENCE), "on_lost was not called"
            assert called == [held[0]]
            for h in held:  # given back, so the job is free at once rather than after its TTL
                status = other.get(h.job_id)
                assert status is not None and status.state is tenure.JobState.PENDING, status
                assert other.claim(h.job_id, owner="b", ttl=kit.ttl).token > h.token
            assert other.rejections() == []

    def test_check_fails_when_a_renewal_is_rejected(self, kit: Kit) -> None:
        with kit.connect(clock=tenure.SystemClock()) as store:
            ttl = kit.short_ttl
            held = store.hold("j", owner="a", ttl=ttl)
            store.force_expire("j")
            store.claim("j", owner="b", ttl=kit.ttl)
            # Real time: the renewal thread's turn comes a third of a TTL after the claim.
            assert held.lost.wait(timeout=ttl * 10), "the refused renewal did not set lost"
            with pytest.raises(tenure.LeaseLost):
                held.check()
            with pytest.raises(tenure.StaleLease):
                held.complete()
            assert [r.op for r in store.rejections()] == [tenure.Op.RENEW, tenure.Op.COMPLETE]

    def test_a_bounded_number_of_threads_renews_every_held_lease(self, kit: Kit) -> None:

        ttl = max(kit.short_ttl, 2.0)  # 50 leases renewed three times a TTL: 75 renewals a second
        with kit.connect(clock=tenure.SystemClock()) as store:
            store.get("warm-up")  # the client library starts its own threads here
            before = threading.active_count()
            held = [store.hold(f"j{i}", owner="a", ttl=ttl) for i in range(50)]
            time.sleep(ttl * 1.5)  # real time: every lease has been renewed at least once
            # The scheduler and its workers, and what the client library runs per request in
            # flight (gRPC streams on etcd): a bound that does not grow with the number of leases.
            assert threading.active_count() - before <= 4 * (1 + RENEWAL_WORKERS)
            for h in held:
                h.check()
                h.complete()
            # Every lease renewed a few times, each claim keeps one renewal event: its latest.
            renewed = sorted(e.job_id for e in store.history() if e.op is tenure.Op.RENEW)
            assert renewed == sorted(f"j{i}" for i in range(50))
