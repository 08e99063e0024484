"""The audit past ZooKeeper's sequence counter: about two billion records per directory.

ZooKeeper names a sequential znode with its parent's signed 32-bit count of child creations.
Reaching it takes weeks of real traffic; the server's data is edited instead
(``ZooKeeperServer.set_child_counters``), so the real server numbers the next records.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

import pytest
from kazoo.exceptions import NodeExistsError

import tenure
from devservers.zookeeper import ZooKeeperServer
from tenure import Op
from tenure.backends.zookeeper import layout as zl
from tenure.backends.zookeeper.audit import SEGMENT_LIMIT
from tests.servers.zookeeper import ZooKeeperHarness

NEAR_THE_END = 2**31 - 3  # three numbers left: 2147483645, 2147483646, 2147483647
PATIENCE = 30.0  # seconds: a bound that only a trim that never ends reaches


def test_zookeeper_names_no_child_past_the_counters_end(zk_private: ZooKeeperServer) -> None:
    """The premise: ZooKeeper 3.8 does not wrap to -2147483648 as its guide says; it stops."""
    with tenure.connect(f"zk://{zk_private.hosts}/probe") as store:
        store.backend.client.create("/probe/seq", b"")  # type: ignore[attr-defined]
    zk_private.set_child_counters({"/probe/seq": NEAR_THE_END})
    with tenure.connect(f"zk://{zk_private.hosts}/probe") as store:
        client: Any = store.backend.client  # type: ignore[attr-defined]
        names = [client.create("/probe/seq/e-", b"", sequence=True) for _ in range(3)]
        assert [n.rsplit("/", 1)[1] for n in names] == ["e-2147483645", "e-2147483646", "e-2147483647"]
        with pytest.raises(NodeExistsError):  # every later create names e-2147483647 again
            client.create("/probe/seq/e-", b"", sequence=True)


def test_history_rejections_and_watch_carry_on_past_the_counters_end(zk_private: ZooKeeperServer) -> None:
    url = f"zk://{zk_private.hosts}/wrap?retention=8"
    with tenure.connect(url) as store:
        store.submit("seed")
        client: Any = store.backend.client  # type: ignore[attr-defined]
        layout = store.backend.layout  # type: ignore[attr-defined]
        logs = (layout.events, layout.rejections)
        counters = {d: NEAR_THE_END for d in logs}  # a store from before segments counts here
        counters.update({f"{d}/{c}": NEAR_THE_END for d in logs for c in client.get_children(d)})
    zk_private.set_child_counters(counters)

    with tenure.connect(url) as store:
        client = store.backend.client  # type: ignore[attr-defined]
        stop = threading.Event()
        changes = store.watch(stop, interval=30)  # 30 s: only ZooKeeper's watches report in time
        pool = concurrent.futures.ThreadPoolExecutor(1)

        def rejections_seen(count: int) -> list[str]:
            seen: list[str] = []
            while len(seen) < count:
                change = next(changes)
                if change.rejection is not None:
                    seen.append(change.rejection.resource or "")
            return seen

        try:
            watched = pool.submit(rejections_seen, 6)
            for i in range(12):  # 36 events: past the last number, into a new segment
                lease = store.claim(f"j{i}", owner="a", ttl=10.0)
                store.complete(store.renew(lease))
                if i % 2:
                    store.report_rejection(f"j{i}", "a", lease.token, resource=f"r{i}", highest=lease.token + 1)
            assert watched.result(timeout=20) == [f"r{i}" for i in range(1, 12, 2)]
        finally:
            stop.set()
            pool.shutdown(wait=False)

        assert store.backend.session.settled(PATIENCE)  # type: ignore[attr-defined]  # trims run in the background
        history = store.history()
        assert 8 <= len(history) <= 16  # trimmed to retention, the oldest first
        assert [(e.job_id, e.op) for e in history[-3:]] == [("j11", Op.CLAIM), ("j11", Op.RENEW),
                                                             ("j11", Op.COMPLETE)]
        # The oldest first, by the order they were written (each event's ``at`` is the client's
        # estimate of the leader's clock, so two events a few ms apart may swap their times).
        written = [(int(e.job_id[1:]), (Op.CLAIM, Op.RENEW, Op.COMPLETE).index(e.op)) for e in history]
        assert written == sorted(written)
        assert [r.resource for r in store.rejections()] == [f"r{i}" for i in range(1, 12, 2)]
        for directory in logs:  # a new segment opened; the full one was closed
            segments = sorted(client.get_children(directory))
            assert len(segments) == 2
            assert client.exists(f"{directory}/{segments[0]}").version == 1
            assert max(int(n.rsplit("-", 1)[1]) for n in client.get_children(f"{directory}/{segments[1]}")) \
                < SEGMENT_LIMIT


def test_records_from_before_segments_are_read_as_the_oldest(zk_harness: ZooKeeperHarness) -> None:
    with zk_harness.connect() as store:
        client: Any = store.backend.client  # type: ignore[attr-defined]
        layout = store.backend.layout  # type: ignore[attr-defined]
        for i in range(3):  # as an earlier version wrote them: straight into events/
            event = tenure.HistoryEvent(f"old{i}", Op.SUBMIT, None, 0, float(i), None)
            client.create(f"{layout.events}/e-", zl.dump_event(event), sequence=True)
        store.submit("new")
        assert [e.job_id for e in store.history()] == ["old0", "old1", "old2", "new"]
        assert [e.job_id for e in store.history(limit=2)] == ["old2", "new"]


@pytest.mark.parametrize(("name", "number"), [
    ("e-0000000042", 42), ("e-2147483647", 2147483647),
    ("e--2147483648", -2147483648), ("e--000000005", -5),  # the wrap ZooKeeper's guide describes
    ("e-42", None), ("r-0000000042", None), ("e-00000000042", None), ("garbage", None),
])
def test_sequence_numbers_are_read_as_signed_32_bit_counters(name: str, number: int | None) -> None:
    assert zl.sequence(name, "e-") == number


def test_a_log_is_listed_to_trim_it_once_per_retention_numbers(zk_harness: ZooKeeperHarness) -> None:
    """Each trim lists the whole log: every 256 records, batches of thousands of renewals spent
    most of their CPU and requests listing it. Now once per ``retention`` record numbers (deletes
    advance them too), so a log keeps from ``retention`` to twice as many records."""
    retention = 1000
    with zk_harness.connect(f"{zk_harness.url()}?retention={retention}") as store:
        client: Any = store.backend.client  # type: ignore[attr-defined]
        events = store.backend.layout.events  # type: ignore[attr-defined]
        listed = []
        call = client._call

        def counted(request: Any, async_object: Any) -> Any:
            if type(request).__name__ == "GetChildren" and request.path.startswith(events + "/"):
                listed.append(request.path)
            return call(request, async_object)

        for n in range(12):  # 3,000 records in multis of 250 (submit_many's), 12 commits
            client._call = counted
            store.submit_many([f"j{n}-{i}" for i in range(250)])
            assert store.backend.session.settled(PATIENCE)  # type: ignore[attr-defined]  # the trim, in the background
            client._call = call  # our own listing below is not the store's
            kept = sum(len(client.get_children(f"{events}/{s}")) for s in client.get_children(events))
            assert retention <= kept <= 2 * retention or kept == 250 * (n + 1)
        assert 2 <= len(listed) <= 5  # about 5,000 numbers: every 1,000 (every 256: 12 or more)


def test_a_trim_does_not_hold_up_the_commit_it_follows(zk_harness: ZooKeeperHarness) -> None:
    """A renewal's answer waited for the audit trim its commit set off: 18 s on a loaded
    machine, and the leases it renewed were lost meanwhile. The trim runs in the background now:
    here its listing is held back, and the commits go on."""
    retention = 100
    # Requests time out after 2 x PATIENCE: a commit waiting for the trim fails the test first.
    with zk_harness.connect(f"{zk_harness.url()}?retention={retention}&timeout={2 * PATIENCE:g}") as store:
        client: Any = store.backend.client  # type: ignore[attr-defined]
        events = store.backend.layout.events  # type: ignore[attr-defined]
        call = client._call
        held_back: list[tuple[Any, Any]] = []

        def holding_back(request: Any, async_object: Any) -> Any:
            if type(request).__name__ == "GetChildren" and request.path.startswith(events):
                held_back.append((request, async_object))  # the trim's listing: not sent yet
                return True
            return call(request, async_object)

        client._call = holding_back
        pool = concurrent.futures.ThreadPoolExecutor(1)
        try:
            for n in range(3):  # 250 records a commit: each crosses a trim period
                pool.submit(store.submit_many, [f"j{n}-{i}" for i in range(250)]).result(timeout=PATIENCE)
            assert held_back, "no trim was started"
            assert not store.backend.session.settled(0)  # type: ignore[attr-defined]  # still waiting
        finally:
            client._call = call
            pool.shutdown(wait=False)
        for request, async_object in held_back:  # let the trim go on
            call(request, async_object)
        assert store.backend.session.settled(PATIENCE)  # type: ignore[attr-defined]
        kept = sum(len(client.get_children(f"{events}/{s}")) for s in client.get_children(events))
        assert retention <= kept <= 2 * retention
