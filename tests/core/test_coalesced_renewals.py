"""Coalesced renewals on real stores: 200 held leases renew in a few requests per tick.

Requests are counted at each store's client boundary, not mocked: the transactions a record
store opens (memory, SQLite: one ``BEGIN IMMEDIATE`` ... ``COMMIT`` each), the statements the
PostgreSQL backend sends, the requests kazoo sends for ZooKeeper (a multi is one). Without
coalescing, 200 leases at TTL 3 s would take 200 requests a second (one per lease every
TTL/3); with it, one per tick (every TTL/6 to TTL/3), each carrying the leases due soon.
etcd renews one lease per request for now (``EtcdBackend.renew_many``), so it is not here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
from benchmarks.many_leases import count_requests
from tests.aio_sync import SyncStore
from tests.conftest import BACKENDS
from tests.harness import Harness

LEASES = 200
TTL = 3.0  # seconds: a renewal every second per lease; ZooKeeper's guesses need a real clock
WINDOW = 2 * TTL  # seconds counted: every lease renews at least twice
MOST = 60  # requests in WINDOW: a few per tick, housekeeping (clock stamps, audit trims) included;
# uncoalesced renewals alone would be some 1,200
STORES = ("memory", "sqlite", "postgres", "zk")


# Each store once, the flavours alternating (both share the scheduler; the conformance suite's
# renewal cases run every store in both).
@pytest.fixture(params=[("memory", "sync"), ("sqlite", "aio"), ("postgres", "sync"), ("zk", "aio")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def opened(request: pytest.FixtureRequest) -> Iterator[tuple[Any, str]]:
    backend, flavour = request.param
    if backend not in BACKENDS:
        pytest.skip(f"{backend} not in TENURE_TEST_BACKENDS")
    harness: Harness = request.getfixturevalue(f"{backend}_harness")
    # The machine's own clock: ZooKeeper's one-round-trip guesses trust no injected one.
    options = {name: value for name, value in harness.options().items() if name != "clock"}
    store: Any = tenure.connect(harness.url(), **options) if flavour == "sync" else \
        SyncStore.open(harness.url(), **options)
    yield store, backend
    store.close()


def test_many_held_leases_renew_in_a_few_requests_per_tick(opened: tuple[Any, str]) -> None:
    store, backend = opened
    held = [store.hold(f"j{i}", owner="a", ttl=TTL) for i in range(LEASES)]
    counter = count_requests(store.backend, backend)  # the benchmark's count, at the client boundary
    first = {h.job_id: h.lease.expires_at for h in held}
    time.sleep(WINDOW)  # real time: the renewer works on its own schedule
    counted = counter.count
    assert counted <= MOST, f"{counted} requests renewed {LEASES} leases in {WINDOW} s"
    for h in held:
        h.check()  # none lost
        assert h.lease.expires_at > first[h.job_id] + TTL, f"{h.job_id} was not renewed through the window"


def test_a_batch_counts_every_audit_row_it_adds_toward_trims() -> None:
    """PostgreSQL trims the audit every TRIM_EVERY rows, not every TRIM_EVERY statements: a
    renew_many of thousands of leases would otherwise let the events grow by thousands of rows
    per statement between trims, and the next trim (run inline after a write) grow as long."""
    from tenure.backends.postgres.ops import TRIM_EVERY, Trims

    trims = Trims()
    assert not trims.due(TRIM_EVERY - 1)
    assert trims.due(1)  # the TRIM_EVERY-th row
    assert trims.due(5 * TRIM_EVERY)  # one statement of many rows: one trim
    assert not trims.due()
