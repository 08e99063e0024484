"""zk:// in tenure.aio: the protocol runs in the event loop on kazoo's async requests, never on
the sync transaction or a thread; the bridge from kazoo's results to asyncio keeps ``get``'s
timeout and errors. (The conformance suite runs on it too: TestZooKeeperAio.)"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import uuid
from typing import Any

import kazoo.handlers.utils as kazoo_utils
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

import tenure
import tenure.aio
from devservers.zookeeper import ZooKeeperServer
from tenure.backends.zookeeper import calls
from tenure.backends.zookeeper import session as zk_session
from tenure.backends.zookeeper.aio import AsyncZooKeeperBackend
from tenure.backends.zookeeper.backend import ZooKeeperBackend
from tests.aio_sync import every_operation, outside


def test_the_protocol_awaits_kazoo_in_the_loop_without_the_sync_transaction(
        zk_server: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch) -> None:
    loop = threading.current_thread()  # asyncio.run's loop runs here; queries go to a worker thread
    awaited: list[object] = []
    wait = calls.awaited

    async def counted(result: Any, timeout: float) -> Any:
        awaited.append(result)
        return await wait(result, timeout)

    def not_in_the_loop(blocking: Any) -> Any:
        return outside(loop, blocking)

    async def scenario() -> None:
        async with tenure.aio.connect(f"zk://{zk_server.hosts}/aio-{uuid.uuid4().hex[:6]}") as store:
            assert isinstance(store.backend, AsyncZooKeeperBackend)
            assert (await store.health())["io"].startswith("native")
            monkeypatch.setattr(ZooKeeperBackend, "transaction", not_in_the_loop(ZooKeeperBackend.transaction))
            monkeypatch.setattr(kazoo_utils.AsyncResult, "get", not_in_the_loop(kazoo_utils.AsyncResult.get))
            monkeypatch.setattr(calls, "awaited", counted)
            await every_operation(store, ttl=10.0)

    asyncio.run(scenario())
    assert awaited  # the protocol's requests were awaited


def test_an_awaited_result_keeps_gets_timeout_and_errors() -> None:
    handler = KazooClient().handler  # not started: results are set by hand below

    async def scenario() -> None:
        with pytest.raises(KazooTimeoutError):
            await calls.awaited(handler.async_result(), 0.01)  # never answered
        failing = handler.async_result()
        threading.Timer(0.01, failing.set_exception, (NoNodeError(),)).start()  # as kazoo's thread would
        with pytest.raises(NoNodeError):
            await calls.awaited(failing, 5.0)
        answered = handler.async_result()
        threading.Timer(0.01, answered.set, ("value",)).start()
        assert await calls.awaited(answered, 5.0) == "value"

    asyncio.run(scenario())


def test_an_io_runs_the_same_with_get_and_awaited() -> None:
    handler = KazooClient().handler

    def io() -> calls.ZkIo[str]:
        first = handler.async_result()
        first.set("a")
        missing = handler.async_result()
        missing.set_exception(NoNodeError())
        with contextlib.suppress(NoNodeError):  # handled where it was waited for, as with get()
            yield missing
        return str((yield first))

    assert calls.run(io(), 1.0) == asyncio.run(calls.run_async(io(), 1.0)) == "a"


def test_calls_types_kazoos_requests_as_kazoo_takes_them() -> None:
    """kazoo has no types: ``calls.Client``, ``Multi`` and ``Answer`` say what tenure calls, and
    mypy checks the calls against them. Each is kazoo's, each parameter named in kazoo's place."""
    multi = type(KazooClient().transaction())
    for owner, typed in ((KazooClient, calls.Client), (multi, calls.Multi), (kazoo_utils.AsyncResult, calls.Answer)):
        members = {n: v for n, v in vars(typed).items() if not n.startswith("__") and callable(v)}
        assert members
        for name, ours in members.items():
            if ours.__name__ == "_overload_dummy":  # overloads are not kept at run time
                assert callable(getattr(owner, name)), name
                continue
            named = list(inspect.signature(ours).parameters)
            assert named == list(inspect.signature(getattr(owner, name)).parameters)[:len(named)], name


def test_a_claim_that_reads_is_one_transaction_as_in_sync(zk_server: ZooKeeperServer,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim that found the leader's clock stamp too old to guess reads the job, which
    stamps the clock anew, and decides on what it read (a guess then would cost a second
    transaction): one transaction, as in sync."""
    monkeypatch.setattr(zk_session, "FRESH", 0.2)
    opened: list[bool] = []
    transaction = AsyncZooKeeperBackend.transaction

    def counted(self: AsyncZooKeeperBackend, fresh: bool = False) -> Any:
        opened.append(fresh)
        return transaction(self, fresh)

    async def scenario() -> None:
        async with tenure.aio.connect(f"zk://{zk_server.hosts}/aio-{uuid.uuid4().hex[:6]}") as store:
            await store.submit("j")
            await asyncio.sleep(0.3)  # real time: the leader's clock stamp ages past FRESH
            monkeypatch.setattr(AsyncZooKeeperBackend, "transaction", counted)
            lease = await store.claim("j", owner="w", ttl=10.0)
            assert lease.token == 1 and opened == [False]

    asyncio.run(scenario())
