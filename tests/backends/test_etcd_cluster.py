"""A 3-node etcd cluster losing its leader while leases are held and claims are running.

The store's own record is the judge: every event on the lease keys since the start is read
back through an etcd watch, and no lease key may be created while another one is live.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import tenure
from tenure.backends import etcd_client
from tests.servers.etcd import EtcdCluster, EtcdNode, start_or_fail

pytestmark = pytest.mark.cluster

TTL = 2.0
ELECTION = 1.0  # etcd's default election timeout
JOBS = [f"job-{i}" for i in range(6)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[EtcdCluster]:
    c = start_or_fail(tmp_path, 3)
    yield c
    c.close()


def _worker(url: str, name: str, stop: threading.Event, wins: list[tuple[str, int]]) -> None:
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


def _lease_events(cluster: EtcdCluster, prefix: bytes, since: int, until: int) -> list[etcd_client.Event]:
    hosts = [("127.0.0.1", n.client_port) for n in cluster.nodes if n.alive()]
    conn = etcd_client.Connection(hosts, timeout=5)
    start = prefix + b"lease/"
    stream = conn.watch(start, start[:-1] + b"0", since)
    events: list[etcd_client.Event] = []
    try:
        for batch in stream.events():
            events.extend(e for e in batch if e.kv.mod_revision <= until)
            if batch[-1].kv.mod_revision >= until:
                break
    finally:
        stream.cancel()
        conn.close()
    return events


def _check_one_holder_at_a_time(events: list[etcd_client.Event]) -> int:
    """Each lease key is created only when absent, and renewed only by the same claim."""
    live: dict[bytes, int] = {}
    claims = 0
    for e in events:
        key = e.kv.key
        if e.deleted:
            live.pop(key, None)
        elif e.kv.create_revision == e.kv.mod_revision:  # a new claim
            assert key not in live, f"{key!r} claimed at {e.kv.create_revision} while {live[key]} held it"
            live[key] = e.kv.create_revision
            claims += 1
        else:  # a renewal keeps the claim's create revision: the token
            assert live.get(key) == e.kv.create_revision
    return claims


def _failover(cluster: EtcdCluster, fault: Callable[[EtcdNode], None]) -> dict[str, float]:
    url = f"etcd://{cluster.endpoints}/failover?timeout=1"
    with tenure.connect(url) as store:
        for job_id in JOBS:
            store.submit(job_id)
        since = store.health()["revision"] + 1
        stop = threading.Event()
        wins: list[list[tuple[str, int]]] = [[] for _ in range(3)]
        threads = [threading.Thread(target=_worker, args=(url, f"w{i}", stop, wins[i])) for i in range(3)]
        for t in threads:
            t.start()
        victim = store.claim("victim", owner="frozen", ttl=TTL)  # held and never renewed
        claimed = time.monotonic()
        leader = cluster.leader()
        fault(leader)
        faulted = time.monotonic()
        while True:
            try:
                rescued = store.claim("victim", owner="rescuer", ttl=TTL)
                break
            except (tenure.AlreadyClaimed, tenure.BackendUnavailable):
                time.sleep(0.05)  # polling for the moment etcd ends the victim's lease
        reclaimed = time.monotonic()
        stop.set()
        for t in threads:
            t.join(timeout=30)
        assert rescued.token > victim.token
        until = store.health()["revision"]
        claims = _check_one_holder_at_a_time(_lease_events(cluster, store.backend.keys.root, since, until))
    all_wins = [w for ws in wins for w in ws]
    assert len(set(all_wins)) == len(all_wins) and claims >= len(all_wins) + 2
    for ws in wins:  # each worker saw its tokens for a job grow
        for job_id in JOBS:
            tokens = [t for j, t in ws if j == job_id]
            assert tokens == sorted(set(tokens))
    return {"from_claim": reclaimed - claimed, "from_fault": reclaimed - faulted}


def test_leader_killed(cluster: EtcdCluster) -> None:
    timing = _failover(cluster, lambda node: node.kill9())
    print(f"reclaim after leader kill -9: {timing}")
    # etcd's new leader restarts every lease's TTL plus an election timeout when it takes over.
    assert timing["from_fault"] < TTL + 2 * ELECTION + 5  # slack for a shared, busy machine


def test_leader_frozen(cluster: EtcdCluster) -> None:
    frozen: list[EtcdNode] = []

    def freeze(node: EtcdNode) -> None:
        node.stop()
        frozen.append(node)

    try:
        timing = _failover(cluster, freeze)
    finally:
        for node in frozen:
            node.cont()
    print(f"reclaim after leader SIGSTOP: {timing}")
    assert timing["from_fault"] < TTL + 2 * ELECTION + 5
