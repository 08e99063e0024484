"""etcd's floor and etcd3's own Lock, measured on the same server as tenure."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import etcd3


@contextlib.contextmanager
def _client(endpoint: str) -> Iterator[Any]:
    host, _, port = endpoint.rpartition(":")
    client = etcd3.client(host=host, port=int(port), timeout=10)
    try:
        yield client
    finally:
        client.close()


def floor(endpoint: str, n: int) -> float:
    """Two transactions per cycle with the writes of a tenure claim and completion.

    Claim: if the lease key is absent, put the job key, the lease key (on an etcd lease) and a
    history key, and delete the end key; completion: if the lease key is as created, put the
    end key and a history key and delete the lease key. The etcd lease is granted once up
    front: what is left is the bare cost of the two transactions.
    """
    with _client(endpoint) as client:
        root = f"/floor-{uuid.uuid4().hex[:8]}"
        lease = client.lease(60)
        record = json.dumps({"state": "leased", "owner": "bench", "ttl": 30})
        start = time.perf_counter()
        for i in range(n):
            job, held, end = f"{root}/job/{i}", f"{root}/lease/{i}", f"{root}/end/{i}"
            ok, _ = client.transaction(
                compare=[client.transactions.version(held) == 0],
                success=[client.transactions.put(job, record), client.transactions.put(held, record, lease),
                         client.transactions.delete(end),
                         client.transactions.put(f"{root}/history/{uuid.uuid4().hex}", record)],
                failure=[])
            assert ok
            ok, _ = client.transaction(
                compare=[client.transactions.version(held) == 1],
                success=[client.transactions.put(end, record), client.transactions.delete(held),
                         client.transactions.put(f"{root}/history/{uuid.uuid4().hex}", record)],
                failure=[])
            assert ok
        return time.perf_counter() - start


def etcd3_lock(endpoint: str, n: int) -> float:
    """etcd3's Lock: acquire and release, a fresh lock name per cycle like tenure's fresh jobs."""
    with _client(endpoint) as client:
        root = f"floor-lock-{uuid.uuid4().hex[:8]}"
        start = time.perf_counter()
        for i in range(n):
            lock = client.lock(f"{root}-{i}", ttl=30)
            assert lock.acquire(timeout=10)
            lock.release()
        return time.perf_counter() - start
