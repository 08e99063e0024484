"""The shared snapshot: N readers cost the store the reads of one; a mirror kept by the watch.

Reads are counted by wrapping the read methods of a real backend's instance (the store's own
code runs underneath, nothing is faked).
"""

from __future__ import annotations

import threading

import pytest

import tenure
from tenure.views.snapshot import Snapshot, has_native_watch
from tests.harness import Harness
from tests.reads import count_reads


def one_refresh(snap: Snapshot) -> None:
    """What a dashboard session reads on one refresh of its overview and leases."""
    snap.summary()
    snap.page(states=["leased", "expired"])
    snap.rejections(3600.0, limit=1000)
    snap.history(300.0)
    snap.get("job-3")


def sessions_refreshing(snap: Snapshot, sessions: int, clock: tenure.ManualClock, ticks: int) -> None:
    for _ in range(ticks):
        start = threading.Barrier(sessions)

        def session(start: threading.Barrier = start) -> None:
            start.wait()  # every session asks at the same moment: one read serves them
            one_refresh(snap)

        threads = [threading.Thread(target=session) for _ in range(sessions)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        clock.advance(1.0)  # the next refresh interval


@pytest.mark.parametrize("follow", [False, True])
def test_five_sessions_cost_the_reads_of_one(sqlite_harness: Harness, follow: bool) -> None:
    with sqlite_harness.connect() as store:
        store.submit_many(f"job-{i}" for i in range(20))
        store.claim("job-3", owner="w", ttl=60)
        reads = count_reads(store)
        totals = {}
        for sessions in (1, 5):
            clock = tenure.ManualClock()
            snap = Snapshot(store, max_age=1.0, follow=follow, clock=clock)
            if snap.mirror is not None:
                assert snap.mirror.wait_ready(30)
            reads.clear()
            sessions_refreshing(snap, sessions, clock, ticks=3)
            snap.close()
            totals[sessions] = +reads
        assert sum(totals[1].values()) > 0
        # Reads per refresh interval, whatever the sessions: the same queries, once each.
        assert totals[5]["summary"] == totals[1]["summary"]
        assert totals[5]["page"] == totals[1]["page"]
        assert totals[5]["history"] == totals[1]["history"] == 3
        assert totals[5]["rejections"] == totals[1]["rejections"]


def test_a_read_is_kept_for_max_age_then_read_again(memory_harness: Harness) -> None:
    with memory_harness.connect() as store:
        clock = tenure.ManualClock()
        snap = Snapshot(store, max_age=2.0, follow=False, clock=clock)
        assert snap.summary().pending == 0
        store.submit("new")
        clock.advance(1.5)
        assert snap.summary().pending == 0  # within max_age: the shared result
        clock.advance(0.5)
        assert snap.summary().pending == 1
        paused = Snapshot(store, max_age=0, follow=False, clock=clock)  # refresh paused: every call reads
        store.submit("newer")
        assert paused.summary().pending == 2
        with pytest.raises(tenure.InvalidArgument):
            Snapshot(store, max_age=-1)
        with pytest.raises(tenure.InvalidArgument):
            snap.page(limit=0)


def test_the_mirror_follows_the_watch_and_saves_the_reads(harness: Harness) -> None:
    """On every backend (memory and SQLite poll, the others watch natively): once the mirror
    has every job, counts, pages and single jobs are computed without reading jobs again."""
    with harness.connect() as store:
        store.submit_many(["a", "b", "c"])
        lease = store.claim("b", owner="worker-1", ttl=harness.ttl * 60)
        snap = Snapshot(store, max_age=0.5, follow=True)
        try:
            assert snap.mirror is not None and snap.mirror.wait_ready(60)
            assert has_native_watch(store.backend) is (harness.name not in ("memory", "sqlite"))
            reads = count_reads(store)
            s = snap.summary()
            assert (s.pending, s.leased) == (2, 1)
            page = snap.page(states=["leased"])
            assert [(j.job_id, j.owner, j.token) for j in page.jobs] == [("b", "worker-1", lease.token)]
            held = snap.get("b")
            assert held is not None and held.owner == "worker-1"
            assert reads["summary"] == reads["page"] == reads["get"] == 0
            store.complete(lease)
            # The watch brings the change; a completed job is counted so within a few intervals.
            deadline = threading.Event()
            for _ in range(240):
                if snap.summary().completed == 1:
                    break
                deadline.wait(0.25)  # waiting for the watch thread, not for time to pass
            assert snap.summary().completed == 1
            assert reads["summary"] == 0  # still computed from the mirror
        finally:
            snap.close()


def test_in_the_background_a_page_never_waits_for_a_reread(memory_harness: Harness) -> None:
    with memory_harness.connect() as store:
        clock = tenure.ManualClock()
        snap = Snapshot(store, max_age=1.0, follow=False, background=True, clock=clock)
        reads = count_reads(store)
        assert snap.summary().pending == 0  # the first read is waited for
        store.submit("new")
        clock.advance(1.5)
        assert snap.summary().pending == 0  # stale: answered at once, read again behind it
        for _ in range(400):
            if snap.summary().pending == 1:
                break
            threading.Event().wait(0.05)  # waiting for the background read's thread
        assert snap.summary().pending == 1 and reads["summary"] == 2
        clock.advance(10.0)  # ten times max_age with nobody asking: too old to show
        store.submit("newer")
        assert snap.summary().pending == 2


def test_no_mirror_of_a_store_above_the_limit(memory_harness: Harness) -> None:
    with memory_harness.connect() as store:
        store.submit_many(["a", "b", "c"])
        snap = Snapshot(store, max_age=0.5, follow=True, mirror_limit=2)
        try:
            for _ in range(400):
                if snap.mirror is not None and snap.mirror.declined:
                    break
                threading.Event().wait(0.05)  # waiting for the mirror's thread to count the jobs
            assert snap.mirror is not None and snap.mirror.declined and not snap.mirror.ready()
            assert snap.summary().pending == 3  # read from the store
        finally:
            snap.close()
