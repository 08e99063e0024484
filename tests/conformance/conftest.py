"""Every conformance case runs twice per backend: on ``tenure.Store`` and on ``tenure.aio``.

The aio flavour opens its stores through ``tests.aio_sync.AioHarness``: the same cases, run
through an event loop. ``TENURE_TEST_FLAVOURS=sync`` (or ``aio``) keeps one of them.
tenure.aio does not serve etcd and ZooKeeper yet, so those run the sync flavour only.
"""

from __future__ import annotations

import os

import pytest

from tests.aio_sync import AioHarness
from tests.conftest import BACKENDS
from tests.harness import Harness

FLAVOURS = [f for f in os.environ.get("TENURE_TEST_FLAVOURS", "sync,aio").split(",") if f]
AIO_BACKENDS = ("memory", "sqlite", "postgres")
# Cases about sync-only companions of the store, not about the store's contract.
SYNC_ONLY = {
    "test_the_store_proves_the_tokens_it_issued_and_no_other": "fencing.Proof takes a sync tenure.Store",
}
CASES = [(b, f) for b in BACKENDS for f in FLAVOURS if f == "sync" or b in AIO_BACKENDS]


@pytest.fixture(params=CASES, ids=[f"{b}-{f}" for b, f in CASES])
def harness(request: pytest.FixtureRequest) -> Harness:
    backend, flavour = request.param
    h: Harness = request.getfixturevalue(f"{backend}_harness")
    if flavour == "sync":
        return h
    reason = SYNC_ONLY.get(request.function.__name__)
    if reason:
        pytest.skip(reason)
    return AioHarness(h)
