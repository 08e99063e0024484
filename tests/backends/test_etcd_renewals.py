"""etcd's renewals in batches (``tenure.backends.etcd.holders``): one Txn for many leases, keys
moved onto a shared etcd lease, which no later write revokes; what the conformance suite's
renewal cases cannot see from outside."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
import tenure.aio
from tenure.backends.etcd import client as ec
from tenure.backends.etcd import nesting
from tests.aio_sync import outside
from tests.backends.test_etcd_aio import sent_rpcs
from tests.servers.etcd import EtcdHarness


@pytest.fixture
def store(etcd_harness: EtcdHarness) -> Iterator[tenure.Store]:
    with etcd_harness.connect() as s:
        yield s


def _lease_keys(etcd_harness: EtcdHarness, store: tenure.Store) -> dict[str, tuple[int, dict[str, Any]]]:
    """Every lease key under the store's prefix: its etcd lease and its value, by job key."""
    start, end = store.backend.keys.span("lease")  # type: ignore[attr-defined]
    found = etcd_harness.cluster.nodes[0].api("/v3/kv/range", {"key": base64.b64encode(start).decode(),
                                                              "range_end": base64.b64encode(end).decode()})
    return {base64.b64decode(kv["key"]).decode(): (int(kv["lease"]), json.loads(base64.b64decode(kv["value"])))
            for kv in found.get("kvs", [])}


def _left(etcd_harness: EtcdHarness, etcd_id: int) -> int:
    """Seconds etcd still gives the etcd lease (-1 once it is gone)."""
    return int(etcd_harness.cluster.nodes[0].api("/v3/lease/timetolive", {"ID": etcd_id}).get("TTL", -1))


def _counting(store: tenure.Store) -> list[str]:
    """The requests the store's connection sends from now on, by name."""
    conn: Any = store.backend._conn  # type: ignore[attr-defined]
    sent: list[str] = []
    for name in ("txn", "range", "grant", "time_to_live", "grant_started", "keepalive_started", "keepalives_started"):
        method = getattr(conn, name)

        def counted(*args: Any, _m: Any = method, _n: str = name, **kwargs: Any) -> Any:
            sent.append(_n)
            return _m(*args, **kwargs)

        setattr(conn, name, counted)
    return sent


def test_a_batch_is_one_txn_that_moves_every_key_onto_one_shared_etcd_lease(
        etcd_harness: EtcdHarness, store: tenure.Store) -> None:
    leases = [store.claim(f"j{i}", owner="a", ttl=5.0) for i in range(150)]  # three nested groups
    claimed = {etcd_id for etcd_id, _ in _lease_keys(etcd_harness, store).values()}
    assert len(claimed) == 150  # a claim hangs its key on an etcd lease of its own
    sent = _counting(store)
    renewed = store.renew_many(leases)
    assert sorted(sent) == ["grant", "txn"], sent  # the shared lease's grant, then one Txn
    assert all(isinstance(r, tenure.Lease) for r in renewed)
    keys = _lease_keys(etcd_harness, store)
    shared = {etcd_id for etcd_id, _ in keys.values()}
    assert len(shared) == 1 and not shared & claimed
    assert all(value["shared"] is True for _, value in keys.values())
    sent.clear()
    again = store.renew_many([r for r in renewed if isinstance(r, tenure.Lease)])
    assert sent == ["txn"] or sorted(sent) == ["grant", "txn"], sent  # a grant once the lease is not fresh
    assert len({etcd_id for etcd_id, _ in _lease_keys(etcd_harness, store).values()}) == 1
    # Ending one lease leaves the shared etcd lease to the others: no revoke reaches it.
    done = again[0]
    assert isinstance(done, tenure.Lease)
    store.complete(done)
    store.force_expire("j1", token=leases[1].token)
    (etcd_id,) = {etcd_id for etcd_id, _ in _lease_keys(etcd_harness, store).values()}
    time.sleep(0.5)  # real time: a revoke is sent without waiting for its answer
    assert _left(etcd_harness, etcd_id) > 0 and len(_lease_keys(etcd_harness, store)) == 148
    assert store.history("j2")[-1].op is tenure.Op.RENEW and store.rejections() == []


def test_requests_are_split_under_etcds_limits(etcd_harness: EtcdHarness, store: tenure.Store,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nesting, "GROUP", 3)
    monkeypatch.setattr(nesting, "GROUPS", 2)
    leases = [store.claim(f"j{i}", owner="a", ttl=5.0) for i in range(14)]
    store.force_expire("j5", token=leases[5].token)
    sent = _counting(store)
    renewed = store.renew_many(leases)
    assert sent.count("txn") == 3 + 2, sent  # 13 guesses that hold in requests of 6, and j5 alone (guess, read)
    assert [type(r) for r in renewed] == [tenure.Lease] * 5 + [tenure.StaleLease] + [tenure.Lease] * 8
    assert [(r.job_id, r.op) for r in store.rejections()] == [("j5", tenure.Op.RENEW)]


def test_a_shared_etcd_lease_gone_behind_our_back_is_replaced(etcd_harness: EtcdHarness,
                                                              store: tenure.Store) -> None:
    leases = [store.claim(f"j{i}", owner="a", ttl=5.0) for i in range(3)]
    renewed = store.renew_many(leases)
    (etcd_id,) = {etcd_id for etcd_id, _ in _lease_keys(etcd_harness, store).values()}
    etcd_harness.cluster.nodes[0].api("/v3/lease/revoke", {"ID": etcd_id})  # the keys go with it
    assert _lease_keys(etcd_harness, store) == {}
    # Each holder's deadline still runs: the lease etcd ended is restored, on a new shared lease
    # (its holder alone, then the next batch: the key is back, so its guess holds again).
    again = store.renew_many([r for r in renewed if isinstance(r, tenure.Lease)])
    assert all(isinstance(r, tenure.Lease) for r in again), again
    once_more = store.renew_many([r for r in again if isinstance(r, tenure.Lease)])
    assert all(isinstance(r, tenure.Lease) for r in once_more), once_more
    keys = _lease_keys(etcd_harness, store)
    assert len(keys) == 3 and etcd_id not in {i for i, _ in keys.values()}
    assert store.rejections() == []


def test_a_lease_renewed_no_more_ends_with_its_shared_etcd_lease(etcd_harness: EtcdHarness,
                                                                 store: tenure.Store) -> None:
    """The shared lease is never kept alive: a lease whose holder stopped renewing ends with the
    last one its key was moved to, however long the others go on."""
    kept, dropped = store.claim("kept", owner="a", ttl=2.0), store.claim("dropped", owner="a", ttl=2.0)
    renewed = store.renew_many([kept, dropped])
    first = {etcd_id for etcd_id, _ in _lease_keys(etcd_harness, store).values()}
    lease = renewed[0]
    ends = time.monotonic() + 2 + 1 + 1.5  # the TTL, the slack, and etcd's expiry sweep and grace
    while time.monotonic() < ends:
        time.sleep(0.6)  # real time: each renewal finds the shared lease stale, so it moves on
        assert isinstance(lease, tenure.Lease)
        (lease,) = store.renew_many([lease])
    keys = _lease_keys(etcd_harness, store)
    assert list(keys) == [store.backend.keys.lease("kept").decode()]  # type: ignore[attr-defined]
    assert keys[store.backend.keys.lease("kept").decode()][0] not in first  # type: ignore[attr-defined]
    assert store.get("dropped").state is tenure.JobState.EXPIRED  # type: ignore[union-attr]


def test_tenure_aio_renews_a_batch_in_the_loop_in_one_txn(etcd_harness: EtcdHarness,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The same ``holders`` code awaited on grpc.aio: a grant and one Txn, no blocking request."""
    loop = threading.current_thread()
    awaited: list[list[str]] = []

    async def scenario() -> None:
        async with tenure.aio.connect(f"{etcd_harness.url()}-aio") as store:
            leases = [await store.claim(f"j{i}", owner="a", ttl=5.0) for i in range(70)]
            monkeypatch.setattr(ec.Connection, "run", outside(loop, ec.Connection.run))  # every blocking request
            awaited.append(sent_rpcs(monkeypatch))
            renewed = await store.renew_many(leases)
            assert all(isinstance(r, tenure.Lease) for r in renewed), renewed
            assert {e.job_id for e in await store.history() if e.op is tenure.Op.RENEW} == {f"j{i}" for i in range(70)}

    asyncio.run(scenario())
    assert awaited[0][:2] == ["LeaseGrant", "Txn"], awaited  # then the history read
