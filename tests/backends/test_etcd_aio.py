"""etcd:// in tenure.aio: the protocol runs in the event loop on grpc.aio requests, never on the
sync transaction or a blocking wait in the loop's thread; the async requests keep the sync
connection's timeout, endpoint rotation, retry rules, logins and error mapping. (The conformance
suite runs on it too: TestEtcdAio.)"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
import uuid
from typing import Any

import pytest

import tenure
import tenure.aio
from devservers.etcd import EtcdCluster
from devservers.ports import free_port
from tenure.backends.etcd import client as ec
from tenure.backends.etcd.aio import AsyncEtcdBackend
from tenure.backends.etcd.backend import EtcdBackend
from tests.aio_sync import every_operation, outside
from tests.servers.etcd import EtcdHarness


def sent_rpcs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The etcd methods tenure.aio sends from now on, by name (until ``monkeypatch.undo()``)."""
    sent: list[str] = []
    answer = ec.AioConnection._answer

    async def sending(self: ec.AioConnection, step: Any) -> Any:
        if isinstance(step, ec.Rpc):
            sent.append(step.method.name)
        return await answer(self, step)

    monkeypatch.setattr(ec.AioConnection, "_answer", sending)
    return sent


def _url(harness: EtcdHarness) -> str:
    return f"etcd://{harness.cluster.endpoints}/aio-{uuid.uuid4().hex[:6]}"


def test_the_protocol_awaits_grpc_aio_in_the_loop_without_the_sync_transaction(
        etcd_harness: EtcdHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    loop = threading.current_thread()  # asyncio.run's loop runs here; queries go to a worker thread
    awaited: list[str] = []
    answer = ec.AioConnection._answer

    async def counted(self: ec.AioConnection, step: Any) -> Any:
        awaited.append(step.method.name if isinstance(step, ec.Rpc) else type(step).__name__)
        return await answer(self, step)

    def not_in_the_loop(blocking: Any) -> Any:
        return outside(loop, blocking)

    async def scenario() -> None:
        async with tenure.aio.connect(_url(etcd_harness)) as store:
            assert isinstance(store.backend, AsyncEtcdBackend)
            assert (await store.health())["io"].startswith("native")
            monkeypatch.setattr(EtcdBackend, "transaction", not_in_the_loop(EtcdBackend.transaction))
            monkeypatch.setattr(ec.Connection, "run", not_in_the_loop(ec.Connection.run))  # every blocking request
            monkeypatch.setattr(ec.Pending, "result", not_in_the_loop(ec.Pending.result))
            monkeypatch.setattr(ec.AioConnection, "_answer", counted)
            # no pooled etcd lease: the claim's grant goes beside its read; a renewal's keep-alive
            # (a stream) beside its Txn; claim_next: the indexes, the candidate, the Txn
            await every_operation(store, ttl=5.0)

    asyncio.run(scenario())
    assert {"Txn", "LeaseGrant", "LeaseKeepAlive", "AioPending"} <= set(awaited), awaited


def test_a_claim_that_reads_is_one_transaction_as_in_sync(etcd_harness: EtcdHarness,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim with no pooled etcd lease reads the job (granting one beside the read), and
    decides on what it read, though the claim has a lease at hand once the read is answered
    (a guess then would cost a second transaction): one transaction, as in sync, one grant."""
    opened: list[bool] = []
    transaction = AsyncEtcdBackend.transaction
    sent: list[str] = []
    answer = ec.AioConnection._answer

    def counted(self: AsyncEtcdBackend, fresh: bool = False, context: Any = None) -> Any:
        opened.append(fresh)
        return transaction(self, fresh, context)

    async def sending(self: ec.AioConnection, step: Any) -> Any:
        if isinstance(step, ec.Rpc):
            sent.append(step.method.name)
        return await answer(self, step)

    async def scenario() -> None:
        async with tenure.aio.connect(_url(etcd_harness)) as store:
            await store.submit("j")
            monkeypatch.setattr(AsyncEtcdBackend, "transaction", counted)
            monkeypatch.setattr(ec.AioConnection, "_answer", sending)
            lease = await store.claim("j", owner="w", ttl=5.0)
            assert opened == [False] and sorted(sent) == ["LeaseGrant", "Txn", "Txn"], (opened, sent)
            opened.clear()
            sent.clear()
            lease = await store.renew(lease)  # the holder's guess: one Txn, a keep-alive beside it
            assert opened == [False] and sorted(sent) == ["LeaseKeepAlive", "Txn"], (opened, sent)
            await store.complete(lease)

    asyncio.run(scenario())


def test_awaited_requests_keep_the_timeout_rotation_and_error_mapping(etcd_private: EtcdCluster) -> None:
    """Reads go on to the next endpoint when one is unreachable, a Txn is never retried there,
    and a frozen server is BackendUnavailable after the timeout, as in the sync connection."""
    dead = ("127.0.0.1", free_port())  # nothing listens: refused at once
    live = ("127.0.0.1", etcd_private.nodes[0].client_port)
    key = b"/aio-rotation/k"

    async def scenario() -> None:
        conn = ec.Connection([dead, live], timeout=1.0)
        aio = ec.AioConnection(conn)
        writer = ec.Connection([dead, live], timeout=1.0)
        writing = ec.AioConnection(writer)
        alone = ec.Connection([live], timeout=1.0)
        frozen = ec.AioConnection(alone)
        try:
            kvs, revision, _ = await aio.range(key)  # refused by the first, answered by the second
            assert kvs == [] and revision > 0 and conn.endpoint.name == f"127.0.0.1:{live[1]}"
            with pytest.raises(tenure.BackendUnavailable, match="unavailable"):
                await writing.txn([], [ec.put(key, b"v")], [])  # a write: never sent twice
            assert (await writing.txn([], [ec.get(key)], [], retry=True)).ranges == [[]]  # a read goes on
            etcd_private.nodes[0].pause()  # SIGSTOP: connected, nothing answers
            try:
                start = time.monotonic()
                with pytest.raises(tenure.BackendUnavailable, match="did not answer within 1s"):
                    await aio.txn([], [ec.get(key)], [])
                assert time.monotonic() - start < 1 + 4
                with pytest.raises(tenure.BackendUnavailable, match="did not answer within 1s"):
                    await (await frozen.keepalive_started(1)).result()  # a stream, under the same deadline
            finally:
                etcd_private.nodes[0].resume()
        finally:
            await aio.close()
            await writing.close()
            await frozen.close()
            for each in (conn, writer, alone):
                each.close()

    asyncio.run(scenario())


def test_an_expired_login_is_renewed_in_the_loop(etcd_auth: EtcdCluster) -> None:
    async def scenario() -> None:
        url = f"etcd://{etcd_auth.endpoints}/auth?timeout=2"
        async with tenure.aio.connect(url, user="root", password="s3cret") as store:
            lease = await store.claim("j", owner="a", ttl=5.0)
            await asyncio.sleep(2.5)  # real time: let etcd drop the idle auth token (1 s here)
            await store.complete(lease)  # logs in again by itself
            assert (await store.get("j")).state is tenure.JobState.COMPLETED  # type: ignore[union-attr]
        with pytest.raises(tenure.AuthenticationFailed) as info:
            await tenure.aio.connect(url, user="root", password="wrong")
        assert "wrong" not in str(info.value)

    asyncio.run(scenario())


def test_keys_read_for_a_retry_are_the_failure_branch_s(etcd_harness: EtcdHarness) -> None:
    """A claim that lost a race answers its retry from the Txn's failure branch, as in sync:
    another writer claims the job between this claim's read and its Txn."""
    async def scenario() -> None:
        url = _url(etcd_harness)
        async with tenure.aio.connect(url) as store:
            await store.submit("j")
            txn = ec.AioConnection.txn
            other = tenure.connect(url)
            raced: list[tenure.Lease] = []

            async def racing(self: ec.AioConnection, compares: Any, success: Any, failure: Any,
                             **kwargs: Any) -> Any:
                if compares and not raced:  # the claim's commit: someone else claims first
                    raced.append(await asyncio.to_thread(other.claim, "j", "other", 5.0))
                return await txn(self, compares, success, failure, **kwargs)

            ec.AioConnection.txn = racing  # type: ignore[method-assign]
            try:
                with pytest.raises(tenure.AlreadyClaimed):
                    await store.claim("j", owner="w", ttl=5.0)
            finally:
                ec.AioConnection.txn = txn  # type: ignore[method-assign]
                other.close()
            assert raced
            assert [e.owner for e in await store.history("j")][-1] == "other"

    asyncio.run(scenario())



def test_a_renewal_whose_etcd_lease_another_connection_revoked_moves_to_a_new_one(
        etcd_harness: EtcdHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another connection renews the lease (moving its key to an etcd lease of its own, and
    revoking this one's): the Txn of this store's next renewal names a revoked etcd lease, and
    the same transaction goes once more on a new one, awaited like the first."""
    node = etcd_harness.cluster.nodes[0]

    async def scenario() -> None:
        url = _url(etcd_harness)
        async with tenure.aio.connect(url) as store:
            backend: Any = store.backend
            key = base64.b64encode(backend.sync.keys.lease("j")).decode()

            def etcd_lease() -> tuple[int, int]:
                kv = node.api("/v3/kv/range", {"key": key})["kvs"][0]
                return int(kv["lease"]), int(node.api("/v3/lease/timetolive", {"ID": int(kv["lease"])}).get("TTL", -1))

            lease = await store.claim("j", owner="a", ttl=5.0)
            first = etcd_lease()
            with tenure.connect(url) as other:
                lease = await asyncio.to_thread(other.renew, lease)  # no etcd lease cached there: a new one
            second = etcd_lease()
            sent = sent_rpcs(monkeypatch)
            lease = await store.renew(lease)  # the etcd lease cached here is gone
            monkeypatch.undo()
            # Refused; the audit's retention lease looked up again (it might have been the one
            # missing); a new etcd lease; the same Txn again.
            assert sent == ["Txn", "LeaseKeepAlive", "Range", "LeaseTimeToLive", "LeaseGrant", "Txn"], sent
            third = etcd_lease()
            assert len({first[0], second[0], third[0]}) == 3 and 4 <= third[1] <= 5, (first, second, third)
            await store.complete(lease)
            assert await store.rejections() == []
            # Two renewals, by two connections: the claim keeps one renewal event, the latest.
            assert [e.op for e in await store.history("j")] == [tenure.Op.CLAIM, tenure.Op.RENEW, tenure.Op.COMPLETE]

    asyncio.run(scenario())


def _sync_rpcs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``sent_rpcs`` for the blocking connection."""
    sent: list[str] = []
    answer = ec.Connection._answer

    def sending(self: ec.Connection, step: Any) -> Any:
        if isinstance(step, ec.Rpc):
            sent.append(step.method.name)
        return answer(self, step)

    monkeypatch.setattr(ec.Connection, "_answer", sending)
    return sent


@pytest.mark.parametrize("flavour", ["sync", "aio"])
def test_a_renewal_whose_key_another_connection_moved_moves_it_again_at_once(
        etcd_harness: EtcdHarness, monkeypatch: pytest.MonkeyPatch, flavour: str) -> None:
    """Another connection renewed the lease, moving its key onto an etcd lease of its own, and its
    revoke of this store's has not landed: this store's renewal applies (its keep-alive finds its
    etcd lease alive) and learns the key was elsewhere. That revoke may land on the key, so the
    core renews once more at once (the transaction's ``resend``): a grant and a Txn, as before
    the core made that decision, the key on a third etcd lease and both earlier ones revoked."""
    node = etcd_harness.cluster.nodes[0]
    url = _url(etcd_harness)

    def etcd_lease(key: str) -> int:
        return int(node.api("/v3/kv/range", {"key": key})["kvs"][0]["lease"])

    def ttl_of(lease_id: int) -> int:
        return int(node.api("/v3/lease/timetolive", {"ID": lease_id}).get("TTL", -1))

    async def scenario() -> tuple[list[str], list[int], list[tenure.Op]]:
        sync = flavour == "sync"
        async with tenure.aio.connect(url) as astore:
            store = tenure.connect(url) if sync else None
            try:
                backend: Any = store.backend if store is not None else astore.backend.sync
                key = base64.b64encode(backend.keys.lease("j")).decode()
                lease = store.claim("j", owner="a", ttl=5.0) if store is not None \
                    else await astore.claim("j", owner="a", ttl=5.0)
                first = etcd_lease(key)
                with tenure.connect(url) as other:
                    monkeypatch.setattr(other.backend._leases, "revoke_later", lambda lease_id: None)
                    lease = other.renew(lease)  # onto an etcd lease of its own; ours not revoked
                second = etcd_lease(key)
                sent = _sync_rpcs(monkeypatch) if sync else sent_rpcs(monkeypatch)
                lease = store.renew(lease) if store is not None else await astore.renew(lease)
                monkeypatch.undo()
                third = etcd_lease(key)
                assert len({first, second, third}) == 3 and 4 <= ttl_of(third) <= 5
                time.sleep(0.5)  # real time: a revoke is sent without waiting for its answer
                if store is not None:
                    store.complete(lease)
                    history = [e.op for e in store.history("j")]
                else:
                    await astore.complete(lease)
                    history = [e.op for e in await astore.history("j")]
                return sent, [ttl_of(first), ttl_of(second)], history
            finally:
                if store is not None:
                    store.close()

    sent, ended, history = asyncio.run(scenario())
    # The renewal on our etcd lease (its keep-alive beside), then a new etcd lease and the Txn again.
    assert [name for name in sent if name != "LeaseKeepAlive"] == ["Txn", "LeaseGrant", "Txn"], sent
    assert ended == [-1, -1]  # both revoked: neither can take the key with it
    assert history == [tenure.Op.CLAIM, tenure.Op.RENEW, tenure.Op.COMPLETE]  # one renewal event per claim


def test_claim_next_passes_over_a_queued_job_whose_keys_are_corrupt_in_both_flavours(
        etcd_harness: EtcdHarness) -> None:
    """A queue entry whose job key is not tenure's: the candidate's read finds it corrupt, and
    claim_next takes the next one (it is listed as corrupt by jobs(), never claimed)."""
    node = etcd_harness.cluster.nodes[0]
    url = _url(etcd_harness)
    with tenure.connect(url) as store:
        keys: Any = store.backend.keys  # type: ignore[attr-defined]
        node.put(keys.job("bad"), b"\xff\xfe")
        node.put(keys.queue("bad", time.time() - 60), b"")  # the oldest in the queue
        store.submit_many(["good-1", "good-2"])
        first = store.claim_next(owner="w", ttl=5.0)
        assert first is not None and first.job_id.startswith("good")

    async def scenario() -> None:
        async with tenure.aio.connect(url) as aio_store:
            second = await aio_store.claim_next(owner="w", ttl=5.0)
            assert second is not None and second.job_id.startswith("good") and second.job_id != first.job_id
            assert await aio_store.claim_next(owner="w", ttl=5.0) is None

    asyncio.run(scenario())


def test_requests_in_flight_when_the_connection_closes_are_backend_unavailable(etcd_private: EtcdCluster) -> None:
    """A request still waiting on etcd when the store closes (a frozen server, a long timeout)
    ends as BackendUnavailable, never as a CancelledError its caller did not ask for."""
    live = ("127.0.0.1", etcd_private.nodes[0].client_port)

    async def scenario() -> None:
        conn = ec.Connection([live], timeout=30.0)
        aio = ec.AioConnection(conn)
        try:
            await aio.range(b"/aio-close/k")  # connected
            etcd_private.nodes[0].pause()  # SIGSTOP: nothing answers from here on
            grant = await aio.grant_started(5)  # started beside the caller's next request
            read = asyncio.ensure_future(aio.range(b"/aio-close/k"))  # awaited directly
            waiting = asyncio.ensure_future(aio.run(_answer_of(grant)))  # as the protocol awaits it
            await asyncio.sleep(0.2)  # both requests sent and waiting on the frozen server
            await aio.close()
            for caller in (read, waiting):
                with pytest.raises(tenure.BackendUnavailable, match="closed"):
                    await caller
        finally:
            etcd_private.nodes[0].resume()
            conn.close()

    asyncio.run(scenario())


def _answer_of(pending: Any) -> Any:
    """An ``Io`` that waits for one started request (what a claim's grant step yields)."""
    return (yield pending)
