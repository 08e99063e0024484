"""ZooKeeper's floor and kazoo's own recipes, measured on the same server as tenure."""

from __future__ import annotations

import contextlib
import datetime
import json
import time
import uuid
from collections.abc import Callable, Iterator

from kazoo.client import KazooClient
from kazoo.recipe.lease import NonBlockingLease


@contextlib.contextmanager
def _client(hosts: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _timed(hosts: str, n: int, cycle: Callable[[KazooClient, str, int], object]) -> float:
    """Seconds for n cycles, each on a fresh path under a fresh root."""
    with _client(hosts) as client:
        root = f"/peer-{uuid.uuid4().hex[:8]}"
        start = time.perf_counter()
        for i in range(n):
            cycle(client, root, i)
        return time.perf_counter() - start


def floor(hosts: str, n: int) -> float:
    """Two multis per cycle with the writes of a tenure claim and completion.

    Claim: set the job record, bump the generation znode, add a history znode; completion:
    set the job record, add a history znode. No reads and no clock stamp: what is left is
    the bare cost of the writes themselves.
    """
    with _client(hosts) as client:
        root = f"/floor-{uuid.uuid4().hex[:8]}"
        for path in (f"{root}/jobs", f"{root}/gen", f"{root}/events"):
            client.ensure_path(path)
        record = json.dumps({"state": "leased", "owner": "bench", "ttl": 30}).encode()
        for i in range(n):
            client.create(f"{root}/jobs/j{i}", record)
            client.create(f"{root}/gen/j{i}", b"")
        start = time.perf_counter()
        for i in range(n):
            floor_cycle(client, root, record, i)
        return time.perf_counter() - start


def floor_cycle(client: KazooClient, root: str, record: bytes, i: int) -> None:
    """``floor``'s cycle of job ``i`` under ``root`` (its jobs/ and gen/ znodes made first)."""
    tx = client.transaction()
    tx.set_data(f"{root}/jobs/j{i}", record)
    tx.set_data(f"{root}/gen/j{i}", b"")
    tx.create(f"{root}/events/e-", record, sequence=True)
    tx.commit()
    tx = client.transaction()
    tx.set_data(f"{root}/jobs/j{i}", record)
    tx.create(f"{root}/events/e-", record, sequence=True)
    tx.commit()


def same_operations(hosts: str, n: int) -> float:
    """Two multis per cycle with the operations of tenure's own claim of a new job and its
    completion (what ``floor`` leaves out: the generation znode created and moved, the index
    entry, the checks of the generation and of the audit segment). What tenure's cycle costs
    beyond it is its client's own work; what this costs beyond the floor, its operations'."""
    with _client(hosts) as client:
        root = f"/same-{uuid.uuid4().hex[:8]}"
        segment = f"{root}/events/0000000000"
        for path in (f"{root}/jobs", f"{root}/gen", f"{root}/leased", segment):
            client.ensure_path(path)
        record = json.dumps({"state": "leased", "owner": "bench", "ttl": 30, "padding": "x" * 200}).encode()
        event = json.dumps({"op": "claim", "owner": "bench", "padding": "x" * 60}).encode()
        start = time.perf_counter()
        for i in range(n):
            job, gen, entry = f"{root}/jobs/j{i}", f"{root}/gen/j{i}", f"{root}/leased/j{i}"
            tx = client.transaction()
            tx.create(job, record)
            tx.create(gen, b"")
            tx.set_data(gen, b"", version=0)
            tx.create(entry, b"")
            tx.check(segment, 0)
            tx.create(f"{segment}/e-", event, sequence=True)
            tx.commit()
            tx = client.transaction()
            tx.set_data(job, record, version=0)
            tx.check(gen, 1)
            tx.delete(entry)
            tx.check(segment, 0)
            tx.create(f"{segment}/e-", event, sequence=True)
            tx.commit()
        return time.perf_counter() - start


def _lock_cycle(client: KazooClient, root: str, i: int) -> None:
    lock = client.Lock(f"{root}/l{i}", "bench")
    lock.acquire()
    lock.release()


def _lease_cycle(client: KazooClient, root: str, i: int) -> None:
    lease = NonBlockingLease(client, f"{root}/l{i}", datetime.timedelta(seconds=30), "bench")
    assert lease, "an uncontended lease must be granted"


def kazoo_lock(hosts: str, n: int) -> float:
    """kazoo's Lock: acquire and release, a fresh lock path per cycle like tenure's fresh jobs."""
    return _timed(hosts, n, _lock_cycle)


def kazoo_lease(hosts: str, n: int) -> float:
    """kazoo's NonBlockingLease: one acquisition per cycle (it has no release)."""
    return _timed(hosts, n, _lease_cycle)
