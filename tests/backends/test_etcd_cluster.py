"""A 3-node etcd cluster losing its leader while leases are held and claims are running.

The store's own record is the judge: every event on the lease keys since the start is read
back through an etcd watch, and no lease key may be created while another one is live. The
tests assert ordering and safety only and print how long the reclaim took (run with ``-s``):
a busy machine stretches it. ``benchmarks/failover.py`` measures it (docs/performance.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import tenure
from devservers.etcd import EtcdCluster, EtcdNode, start_or_fail
from devservers.failover import Reclaim, reclaim_after
from tenure.backends.etcd import client as etcd_client

pytestmark = pytest.mark.cluster

TTL = 2.0
JOBS = [f"job-{i}" for i in range(6)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[EtcdCluster]:
    c = start_or_fail(tmp_path, 3)
    yield c
    c.close()


def _worker(url: str, name: str, stop: threading.Event, wins: list[tuple[str, int]],
            errors: list[BaseException]) -> None:
    try:
        _work(url, name, stop, wins)
    except BaseException as exc:  # reported by the test, not lost in a thread
        errors.append(exc)


def _work(url: str, name: str, stop: threading.Event, wins: list[tuple[str, int]]) -> None:
    with tenure.connect(url) as store:
        while not stop.is_set():
            for job_id in JOBS:
                try:
                    lease = store.claim(job_id, owner=name, ttl=TTL)
                    wins.append((job_id, lease.token))
                    store.release(lease)
                except (tenure.AlreadyClaimed, tenure.StaleLease):
                    pass
                except tenure.BackendUnavailable:
                    stop.wait(0.05)  # the cluster is electing a leader; try again shortly


def _events(cluster: EtcdCluster, root: bytes, since: int, until: int) -> list[etcd_client.Event]:
    """Every change under ``root`` from ``since`` to ``until``, from etcd's own history."""
    hosts = [("127.0.0.1", n.client_port) for n in cluster.nodes if n.alive()]
    conn = etcd_client.Connection(hosts, timeout=5)
    try:
        for _ in hosts:  # a member still rejoining may refuse: the next one is asked
            events: list[etcd_client.Event] = []
            stream = conn.watch(root, root[:-1] + b"0", since)
            try:
                for batch in stream.events():
                    events.extend(e for e in batch if e.kv.mod_revision <= until)
                    if batch[-1].kv.mod_revision >= until:
                        return events
            except tenure.BackendUnavailable:
                continue
            finally:
                stream.cancel()
        raise AssertionError("no member served the watch")
    finally:
        conn.close()


def _check_one_holder_at_a_time(root: bytes, events: list[etcd_client.Event]) -> int:
    """Every claim (a job key written as leased) created its lease key, which was absent."""
    live: dict[bytes, int] = {}
    created: set[tuple[bytes, int]] = set()
    claimed: set[tuple[bytes, int]] = set()
    for e in events:
        section, _, job = e.kv.key[len(root):].partition(b"/")
        if section == b"job" and not e.deleted and b'"state":"leased"' in e.kv.value:
            claimed.add((job, e.kv.mod_revision))
        if section != b"lease":
            continue
        if e.deleted:
            live.pop(job, None)
        elif e.kv.create_revision == e.kv.mod_revision:  # a new claim's lease key
            assert job not in live, f"{job!r} claimed at {e.kv.create_revision} while {live[job]} held it"
            live[job] = e.kv.create_revision
            created.add((job, e.kv.create_revision))
        else:  # a renewal keeps the claim's create revision: the token
            assert live.get(job) == e.kv.create_revision
    assert claimed == created, f"claims without their own lease key: {claimed ^ created}"
    return len(claimed)


def _failover(cluster: EtcdCluster, fault: Callable[[EtcdNode], None],
              recover: Callable[[EtcdNode], None]) -> Reclaim:
    url = f"etcd://{cluster.endpoints}/failover?timeout=1"
    with tenure.connect(url) as store:
        for job_id in JOBS:
            store.submit(job_id)
        since = store.health()["revision"] + 1
        stop = threading.Event()
        wins: list[list[tuple[str, int]]] = [[] for _ in range(3)]
        errors: list[BaseException] = []
        threads = [threading.Thread(target=_worker, args=(url, f"w{i}", stop, wins[i], errors))
                   for i in range(3)]
        for t in threads:
            t.start()
        leader = cluster.leader()
        reclaim = reclaim_after(store, "victim", TTL, lambda: fault(leader))
        recover(leader)  # the old leader comes back as a follower and catches up
        cluster.wait_healthy()
        stop.set()
        for t in threads:
            t.join(timeout=30)
        assert errors == []
        reclaim.check_order()
        _, until, _ = store.backend._conn.range(b"-")  # type: ignore[attr-defined]  # a linearizable read
        root = store.backend.keys.root  # type: ignore[attr-defined]
        claims = _check_one_holder_at_a_time(root, _events(cluster, root, since, until))
    all_wins = [w for ws in wins for w in ws]
    assert len(set(all_wins)) == len(all_wins) and claims >= len(all_wins) + 2
    for ws in wins:  # each worker saw its tokens for a job grow
        for job_id in JOBS:
            tokens = [t for j, t in ws if j == job_id]
            assert tokens == sorted(set(tokens))
    return reclaim


def test_leader_killed(cluster: EtcdCluster) -> None:
    reclaim = _failover(cluster, EtcdNode.kill, EtcdNode.start)
    print(f"leader kill -9: {reclaim.describe()}")


def test_leader_frozen(cluster: EtcdCluster) -> None:
    reclaim = _failover(cluster, EtcdNode.pause, EtcdNode.resume)  # the fixture resumes it on failure
    print(f"leader SIGSTOP: {reclaim.describe()}")
