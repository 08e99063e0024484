"""The asyncio backend interface, and the worker-thread backend that serves memory and SQLite.

``AsyncBackend`` is ``tenure.Backend`` with coroutines: the same atomic operations, called
with arguments ``AsyncStore`` already checked (``tenure.core.store_rules``), deciding with the
store's clock. A backend whose client library has asyncio I/O implements it natively
(PostgreSQL: ``tenure.backends.postgres.aio``); ``ThreadedBackend`` serves a sync backend
from ONE worker thread per store, as aiosqlite does: SQLite answers from a local file in
about a millisecond, so one thread is enough and never grows. The memory store, which never
waits on I/O, is called in the loop itself.

Closing does not queue behind a request that hangs (a database another process holds locked,
up to its busy timeout): the sync backend is closed from a thread of its own, waited for up to
``CLOSE_WAIT``, and calls still queued then fail with ``BackendUnavailable``. The worker thread
ends once the request that hangs returns.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, TypeVar

from tenure.core import audit
from tenure.core.backend import Backend, Characteristics, Link
from tenure.core.errors import BackendUnavailable, LeaseError
from tenure.core.holding import CLOSE_WAIT
from tenure.core.lifecycle import Retry
from tenure.core.records import Change, HistoryEvent, JobPage, JobState, JobStatus, Lease, Rejection, Summary
from tenure.core.steps import Claims, Completion, Renewal
from tenure.core.threads import OneWorker
from tenure.core.watch import Polled, RejectionFilter

T = TypeVar("T")
log = logging.getLogger("tenure.aio")
_BATCH = 500  # jobs fetched per trip to the worker thread by jobs()


class AsyncBackend(abc.ABC):
    """A handful of atomic operations on one store, as coroutines (see ``tenure.Backend``)."""

    characteristics: Characteristics
    io: str  # how it reaches the store, in words, for health() and the docs

    @property
    @abc.abstractmethod
    def native_watch(self) -> bool:
        """Whether ``watch`` is pushed by the store (blocking claims then sleep until a change)."""

    async def open(self) -> None:  # noqa: B027 - most backends are ready once built
        """Connect, in the loop; ``connect()`` calls it once after building the backend."""

    @abc.abstractmethod
    async def submit_many(self, job_ids: list[str], actor: str | None = None, *, max_attempts: int | None = None,
                          delay: float = 0.0) -> None: ...

    @abc.abstractmethod
    async def claim(self, job_id: str, owner: str, ttl: float, *, max_attempts: int | None = None) -> Lease: ...

    @abc.abstractmethod
    async def claim_next(self, owner: str, ttl: float) -> Lease | None: ...

    @abc.abstractmethod
    async def renew(self, lease: Lease, ttl: float) -> Lease: ...

    @property
    def renews_in_batches(self) -> bool:
        """``tenure.Backend.RENEWS_IN_BATCHES``: whether ``renew_many`` is one round trip."""
        return False

    @property
    def renew_batch(self) -> int:
        """``tenure.Backend.RENEW_BATCH``: leases per request of ``renew_many`` (0: all)."""
        return 0

    async def renew_many(self, renewals: Sequence[Renewal]) -> list[Lease | LeaseError]:
        """``tenure.Backend.renew_many``: each lease's outcome in order; this default renews
        one lease per request, a store that renews many in one round trip overrides it."""
        found: list[Lease | LeaseError] = []
        for lease, ttl in renewals:
            try:
                found.append(await self.renew(lease, ttl))
            except LeaseError as exc:
                found.append(exc)
        return found

    @abc.abstractmethod
    async def complete(self, lease: Lease, result: bytes | None) -> None: ...

    @property
    def claims_in_batches(self) -> bool:
        """``tenure.Backend.CLAIMS_IN_BATCHES``: whether ``claim_next_many`` is one round trip."""
        return False

    @property
    def completes_in_batches(self) -> bool:
        """``tenure.Backend.COMPLETES_IN_BATCHES``: whether ``complete_many`` is one round trip."""
        return False

    async def claim_next_many(self, owner: str, ttl: float, n: int) -> list[Lease]:
        """``tenure.Backend.claim_next_many``: this default claims one per request, and an
        error after some were claimed ends the batch with those."""
        claims = Claims(n, 1)
        while claims.next():
            try:
                lease = await self.claim_next(owner, ttl)
            except LeaseError as exc:
                claims.failed(exc)
                continue
            claims.took([] if lease is None else [lease], more=lease is not None)
        return claims.found

    async def complete_many(self, completions: Sequence[Completion]) -> list[LeaseError | None]:
        """``tenure.Backend.complete_many``: this default completes one lease per request."""
        found: list[LeaseError | None] = []
        for lease, result in completions:
            try:
                await self.complete(lease, result)
                found.append(None)
            except LeaseError as exc:
                found.append(exc)
        return found

    @abc.abstractmethod
    async def release(self, lease: Lease) -> None: ...

    @abc.abstractmethod
    async def fail(self, lease: Lease, error: str | None, retry: Retry) -> None: ...

    @abc.abstractmethod
    async def requeue(self, job_id: str, actor: str | None = None, delay: float = 0.0,
                      token: int | None = None) -> None: ...

    @abc.abstractmethod
    async def force_expire(self, job_id: str, actor: str | None = None, token: int | None = None) -> None: ...

    @abc.abstractmethod
    async def record_rejection(self, rejection: Rejection) -> None: ...

    @abc.abstractmethod
    async def get(self, job_id: str) -> JobStatus | None: ...

    @abc.abstractmethod
    def jobs(self) -> AsyncIterator[JobStatus]: ...

    @abc.abstractmethod
    async def rejections(self, since: float | None, limit: int | None) -> list[Rejection]: ...

    async def job_rejections(self, job_id: str, since: float | None, limit: int | None) -> list[Rejection]:
        """One job's rejections; by default the whole audit's, filtered (the sync core's rule)."""
        return audit.of_job(await self.rejections(since, None), job_id, since, limit)

    @abc.abstractmethod
    async def history(self, job_id: str | None, since: float | None, limit: int | None) -> list[HistoryEvent]: ...

    @abc.abstractmethod
    async def now(self) -> float: ...

    async def next_due(self) -> float | None:
        """As ``tenure.core.backend.Backend.next_due``; this default: None (no I/O)."""
        return None

    @abc.abstractmethod
    async def summary(self, now: float, soon: float) -> Summary: ...

    @abc.abstractmethod
    async def page(self, now: float, states: frozenset[JobState] | None, job: str | None,
                   owner: str | None, order: str, offset: int, limit: int) -> JobPage: ...

    @abc.abstractmethod
    def watch(self, interval: float) -> AsyncIterator[Change]: ...

    @abc.abstractmethod
    async def health(self) -> dict[str, Any]: ...

    def link(self) -> Link:
        """The connection's state for ``AsyncHeldLease.check()``; read without I/O."""
        return Link()

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections and threads. Idempotent."""


class ThreadedBackend(AsyncBackend):
    """A sync backend served by one worker thread per store, calls queued in order, renewals
    before the rest (``OneWorker``); or, for a backend that never waits on I/O (memory), called
    in the loop itself (``inline``)."""

    def __init__(self, sync: Backend, *, inline: bool = False) -> None:
        self.sync = sync
        self.characteristics = sync.characteristics
        self.io = "in the event loop (no I/O)" if inline else "one worker thread per store"
        self._worker = None if inline else OneWorker("tenure-aio")
        self._closed = False

    @property
    def native_watch(self) -> bool:
        return type(self.sync).watch is not Backend.watch

    def _check_open(self) -> None:
        if self._closed:
            raise BackendUnavailable("the store is closed")

    async def _call(self, fn: Callable[..., T], *args: Any, renewal: bool = False) -> T:
        self._check_open()
        if self._worker is None:
            return fn(*args)  # microseconds under the memory store's lock: a hop would cost more
        # A caller cancelled while its call waits in the queue or runs does not stop the call:
        # the worker finishes it. AsyncStore decides what that means (claims are released).
        # Renewals go before the calls queued (claims of many tasks): only the one running delays them.
        return await asyncio.wrap_future(self._worker.submit(functools.partial(self._unless_closed, fn, *args),
                                                             urgent=renewal))

    def _unless_closed(self, fn: Callable[..., T], *args: Any) -> T:
        """In the worker: a call still queued when the store closed is not sent to a closed backend."""
        self._check_open()
        return fn(*args)

    async def submit_many(self, job_ids: list[str], actor: str | None = None, *, max_attempts: int | None = None,
                          delay: float = 0.0) -> None:
        await self._call(functools.partial(self.sync.submit_many, **_new_run(max_attempts, delay)), job_ids, actor)

    async def claim(self, job_id: str, owner: str, ttl: float, *, max_attempts: int | None = None) -> Lease:
        return await self._call(functools.partial(self.sync.claim, **_new_run(max_attempts, 0.0)), job_id, owner, ttl)

    async def claim_next(self, owner: str, ttl: float) -> Lease | None:
        return await self._call(self.sync.claim_next, owner, ttl)

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        return await self._call(self.sync.renew, lease, ttl, renewal=True)

    @property
    def renews_in_batches(self) -> bool:
        return self.sync.RENEWS_IN_BATCHES

    @property
    def renew_batch(self) -> int:
        return self.sync.RENEW_BATCH

    async def renew_many(self, renewals: Sequence[Renewal]) -> list[Lease | LeaseError]:
        return await self._call(self.sync.renew_many, renewals, renewal=True)  # one trip to the worker thread

    async def complete(self, lease: Lease, result: bytes | None) -> None:
        await self._call(self.sync.complete, lease, result)

    @property
    def claims_in_batches(self) -> bool:
        return self.sync.CLAIMS_IN_BATCHES

    @property
    def completes_in_batches(self) -> bool:
        return self.sync.COMPLETES_IN_BATCHES

    async def claim_next_many(self, owner: str, ttl: float, n: int) -> list[Lease]:
        return await self._call(self.sync.claim_next_many, owner, ttl, n)  # one trip to the worker thread

    async def complete_many(self, completions: Sequence[Completion]) -> list[LeaseError | None]:
        return await self._call(self.sync.complete_many, completions)

    async def release(self, lease: Lease) -> None:
        await self._call(self.sync.release, lease)

    async def fail(self, lease: Lease, error: str | None, retry: Retry) -> None:
        await self._call(self.sync.fail, lease, error, retry)

    async def requeue(self, job_id: str, actor: str | None = None, delay: float = 0.0,
                      token: int | None = None) -> None:
        await self._call(self.sync.requeue, job_id, actor, delay, token)

    async def force_expire(self, job_id: str, actor: str | None = None, token: int | None = None) -> None:
        await self._call(self.sync.force_expire, job_id, actor, token)

    async def record_rejection(self, rejection: Rejection) -> None:
        await self._call(self.sync.record_rejection, rejection)

    async def get(self, job_id: str) -> JobStatus | None:
        return await self._call(self.sync.get, job_id)

    async def jobs(self) -> AsyncIterator[JobStatus]:
        found = await self._call(self.sync.jobs)
        while batch := await self._call(lambda: list(itertools.islice(found, _BATCH))):
            for job in batch:
                yield job

    async def rejections(self, since: float | None, limit: int | None) -> list[Rejection]:
        return await self._call(self.sync.rejections, since, limit)

    async def job_rejections(self, job_id: str, since: float | None, limit: int | None) -> list[Rejection]:
        return await self._call(self.sync.job_rejections, job_id, since, limit)

    async def history(self, job_id: str | None, since: float | None, limit: int | None) -> list[HistoryEvent]:
        return await self._call(self.sync.history, job_id, since, limit)

    async def now(self) -> float:
        return await self._call(self.sync.now)

    async def next_due(self) -> float | None:
        if type(self.sync).next_due is Backend.next_due:
            return None  # the default tells nothing: no hop to the worker for it
        return await self._call(self.sync.next_due)

    async def summary(self, now: float, soon: float) -> Summary:
        return await self._call(self.sync.summary, now, soon)

    async def page(self, now: float, states: frozenset[JobState] | None, job: str | None,
                   owner: str | None, order: str, offset: int, limit: int) -> JobPage:
        return await self._call(self.sync.page, now, states, job, owner, order, offset, limit)

    def watch(self, interval: float) -> AsyncIterator[Change]:
        if self.native_watch:  # the backend's own feed, which blocks: followed in a thread
            return in_thread(lambda stop: self.sync.watch(stop, interval), "tenure-aio-watch")
        return poll(self, interval)

    async def health(self) -> dict[str, Any]:
        return {**await self._call(self.sync.health), "io": self.io}

    def link(self) -> Link:
        return self.sync.link()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._worker is None:
            self.sync.close()
            return
        self._worker.shutdown()  # its thread ends after the call it runs, if that hangs
        closed: concurrent.futures.Future[None] = concurrent.futures.Future()
        threading.Thread(target=_settle, args=(closed, self.sync.close), name="tenure-aio-close", daemon=True).start()
        try:  # not queued behind a request that hangs: bounded like the releases before it
            await asyncio.wait_for(asyncio.wrap_future(closed), CLOSE_WAIT)
        except asyncio.TimeoutError:
            log.warning("closing the store waits on a request that hangs: not waiting longer than %s s", CLOSE_WAIT)


def _settle(future: concurrent.futures.Future[None], fn: Callable[[], None]) -> None:
    """Run ``fn`` and hand its outcome to ``future`` (in a thread of its own)."""
    try:
        fn()
    except BaseException as exc:  # raised to whoever still waits
        future.set_exception(exc)
    else:
        future.set_result(None)


async def poll(backend: AsyncBackend, interval: float) -> AsyncIterator[Change]:
    """``tenure.core.watch.poll`` on an async backend: the same ``Polled`` decides."""
    polled, rejections = Polled(), RejectionFilter(None)
    while True:
        for change in polled.jobs([job async for job in backend.jobs()]):
            yield change
        fresh = rejections.fresh(await backend.rejections(rejections.since, None))
        if fresh is None:
            rejections.start_at(await backend.now())
        for rejection in fresh or ():
            yield Change(rejection=rejection)
        await asyncio.sleep(interval)


async def in_thread(follow: Callable[[threading.Event], Iterator[T]], name: str) -> AsyncIterator[T]:
    """A blocking change feed followed in a thread of its own, its items handed to the loop.

    The feed runs while the async iterator is open: closing it (``aclose()``, leaving an
    ``async for`` early, cancelling its task) sets the feed's stop flag, and the thread ends
    at the feed's next look at it.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[bool, Any]] = asyncio.Queue()
    stop = threading.Event()

    def post(item: tuple[bool, Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody reads any more
            loop.call_soon_threadsafe(queue.put_nowait, item)

    def run() -> None:
        try:
            for item in follow(stop):
                if stop.is_set():
                    break
                post((True, item))
        except BaseException as exc:  # handed to the reader, raised there
            post((False, exc))
        else:
            post((False, None))

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        while True:
            ok, item = await queue.get()
            if ok:
                yield item
            elif item is None:
                return
            else:
                raise item
    finally:
        stop.set()


def _new_run(max_attempts: int | None, delay: float) -> dict[str, Any]:
    """A sync backend's keywords for a new run, those at their defaults left out: a backend
    written before them still takes the call (as ``Store`` does)."""
    found: dict[str, Any] = {} if max_attempts is None else {"max_attempts": max_attempts}
    if delay:
        found["delay"] = delay
    return found
