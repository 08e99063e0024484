"""``tenure.aio`` behind a sync face, so the conformance suite runs its cases, unchanged, on it.

Each store opened through ``AioHarness`` gets an event loop of its own in a thread; every call
a test makes is run there as a coroutine and its result handed back. The cases see the sync
API's shape (``store.claim(...)``, ``with store.hold(...) as held``, ``for job in store.jobs()``)
while every operation goes through ``AsyncStore``, ``AsyncHeldLease`` and an async backend.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

import tenure
import tenure.aio
from tenure.aio.backend import ThreadedBackend
from tenure.testing.kit import Tampering
from tests.harness import Harness

CALL_TIMEOUT = 120.0  # seconds: far beyond any call a case makes; reached only by a hang


class LoopThread:
    """An event loop running in a thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="aio-conformance", daemon=True)
        self._thread.start()

    def call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` in the loop, awaited if it returns an awaitable, its result made sync."""
        async def run() -> Any:
            result = fn()
            if isinstance(result, tenure.aio.Holding) or inspect.isawaitable(result):
                result = await result
            return result

        return self.sync(asyncio.run_coroutine_threadsafe(run(), self.loop).result(CALL_TIMEOUT))

    def sync(self, value: Any) -> Any:
        if isinstance(value, tenure.aio.AsyncHeldLease):
            return SyncHeld(value, self)
        if isinstance(value, list) and value and isinstance(value[0], tenure.aio.AsyncHeldLease):
            return [SyncHeld(one, self) for one in value]  # hold_next_many's
        if isinstance(value, AsyncIterator):
            return self._iterate(value)
        return value

    def _iterate(self, items: AsyncIterator[Any]) -> Iterator[Any]:
        while True:
            try:
                yield self.call(lambda: items.__anext__())
            except StopAsyncIteration:
                return

    def stop(self) -> None:
        # Async iterators a case left open (a watch it stopped reading) are closed first, and
        # tasks still pending (a release a closed store gave up on) cancelled, as asyncio.run does.
        asyncio.run_coroutine_threadsafe(self.loop.shutdown_asyncgens(), self.loop).result(CALL_TIMEOUT)
        asyncio.run_coroutine_threadsafe(_cancel_pending(), self.loop).result(CALL_TIMEOUT)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


async def _cancel_pending() -> None:
    pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


class Proxy:
    """Attributes as they are; methods run in the loop."""

    def __init__(self, target: Any, loop: LoopThread) -> None:
        self._target = target
        self._loop = loop

    def __eq__(self, other: object) -> bool:
        # A callback handed the async object (on_lost) compares equal to the case's proxy of it.
        return other is self._target or (isinstance(other, Proxy) and other._target is self._target)

    def __hash__(self) -> int:
        return hash(self._target)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value) or isinstance(value, type):
            return value
        return lambda *args, **kwargs: self._loop.call(lambda: value(*args, **kwargs))


class SyncEvent:
    """``held.lost`` (an asyncio.Event) as the sync cases use a threading.Event."""

    def __init__(self, event: asyncio.Event, loop: LoopThread) -> None:
        self._event = event
        self._loop = loop

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        async def waited() -> bool:
            try:
                await asyncio.wait_for(self._event.wait(), timeout)
            except asyncio.TimeoutError:
                return False
            return True

        return bool(asyncio.run_coroutine_threadsafe(waited(), self._loop.loop).result())


class SyncHeld(Proxy):
    def __enter__(self) -> SyncHeld:
        return self

    @property
    def lost(self) -> SyncEvent:
        return SyncEvent(self._target.lost, self._loop)

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        self._loop.call(lambda: self._target.__aexit__(kind, exc, tb))


class SyncStore(Proxy):
    """An ``AsyncStore`` that looks like a ``tenure.Store`` to the conformance cases."""

    @classmethod
    def open(cls, url: str, **options: Any) -> SyncStore:
        loop = LoopThread()
        try:
            store = loop.call(lambda: tenure.aio.connect(url, **options))
        except BaseException:
            loop.stop()
            raise
        return cls(store, loop)

    @classmethod
    def around(cls, build: Callable[[], tenure.aio.AsyncStore]) -> SyncStore:
        """A store ``build()`` makes in the loop (for a backend a case built itself)."""
        loop = LoopThread()
        return cls(loop.call(build), loop)

    @property
    def backend(self) -> Any:
        """The sync backend a worker thread serves, or the native async one (what harnesses
        reach into to plant corrupt records)."""
        backend = self._target.backend
        return backend.sync if isinstance(backend, ThreadedBackend) else backend

    def watch(self, stop: threading.Event | None = None, interval: float = 1.0) -> Iterator[tenure.Change]:
        return self._loop.call(lambda: self._target.watch(interval))  # type: ignore[no-any-return]

    def close(self) -> None:
        if self._loop.loop.is_closed():  # closed already, as tenure.Store.close() may be again
            return
        try:
            self._loop.call(self._target.close)
        finally:
            self._loop.stop()

    def __enter__(self) -> SyncStore:
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        self.close()


class AioHarness(Harness):
    """A backend's harness whose stores are ``tenure.aio`` stores behind ``SyncStore``."""

    def __init__(self, inner: Harness) -> None:
        self.inner = inner
        self.name = inner.name
        self.shared_between_processes = inner.shared_between_processes
        self.ttl = inner.ttl
        self.short_ttl = inner.short_ttl

    def url(self) -> str:
        return self.inner.url()

    def connect(self, url: str | None = None, **options: Any) -> tenure.Store:
        opened: Any = SyncStore.open(url or self.url(), **{**self.inner.options(), **options})
        return opened  # type: ignore[no-any-return]

    def expire(self, store: tenure.Store, lease: tenure.Lease) -> None:
        self.inner.expire(store, lease)

    def corrupt(self, store: tenure.Store, job_id: str) -> None:
        self.inner.corrupt(store, job_id)

    def plant(self, store: tenure.Store, job_id: str, tampering: Tampering) -> bool:
        return self.inner.plant(store, job_id, tampering)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def outside(thread: threading.Thread, blocking: Callable[..., Any]) -> Callable[..., Any]:
    """``blocking``, failing the test when it is called in ``thread`` (an event loop's): the
    tests that prove a backend's protocol never waits in the loop wrap the blocking calls."""

    def guarded(*args: Any, **kwargs: Any) -> Any:
        assert threading.current_thread() is not thread, "a blocking wait in the event loop"
        return blocking(*args, **kwargs)

    return guarded


async def every_operation(store: tenure.aio.AsyncStore, ttl: float) -> None:
    """Each protocol operation once on a fresh ``tenure.aio`` store, and two queries: what the
    tests that prove a backend awaits its requests in the loop run."""
    await store.submit_many(["a", "b", "c"])
    lease = await store.claim("a", owner="w", ttl=ttl)
    lease = await store.renew(lease)
    await store.complete(lease, result=b"done")
    nxt = await store.claim_next(owner="w", ttl=ttl)
    assert nxt is not None and nxt.job_id in ("b", "c")  # one of the oldest (order.spread_start)
    with pytest.raises(tenure.StaleLease):
        await store.renew(lease)  # completed: refused, and audited
    await store.release(nxt)
    await store.force_expire("c")
    assert len(await store.rejections()) == 1  # queries: in the worker thread
    assert (await store.get("a")).state is tenure.JobState.COMPLETED
