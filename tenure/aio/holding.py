"""``AsyncHeldLease``: a lease renewed by a task of the event loop, not by a thread.

Its decisions are ``tenure.core.holding``'s, the same as ``tenure.HeldLease``'s. One task per
held lease sleeps until a third of the TTL has passed, renews, and meanwhile watches the safe
local deadline on the store's suspend-proof clock: ``lost`` is set at the deadline even while
a renewal hangs, because the task waits for the renewal with a timeout instead of awaiting it.
The loop's own timers stop while the machine is suspended, so the task wakes at least every
``MAX_SLEEP`` seconds to read the suspend-proof clock.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterable
from types import TracebackType
from typing import Any, Protocol

from tenure.core.backend import Link
from tenure.core.clock import Clock
from tenure.core.errors import LeaseError, StaleLease
from tenure.core.holding import MAX_SLEEP, RENEW_FRACTION, HeldState, log, next_attempt
from tenure.core.records import Lease, Reason


class HoldingStore(Protocol):
    """What a held lease needs of its store (``AsyncStore``)."""

    clock: Clock

    @property
    def name(self) -> str: ...

    def link(self) -> Link: ...

    async def renew(self, lease: Lease, ttl: float | None = None) -> Lease: ...

    async def complete(self, lease: Lease, result: str | bytes | None = None) -> None: ...

    async def release(self, lease: Lease) -> None: ...

    async def fail(self, lease: Lease, error: str | None = None, *, retry_in: float | None = None) -> None: ...

    def background(self, work: Coroutine[Any, Any, Any], *, renewal: bool = False) -> asyncio.Task[Any]:
        """Run ``work`` as a task the store keeps; renewal tasks end at its ``close()``."""
        ...


class AsyncHeldLease(HeldState):
    """A lease kept alive by a task until ``await complete()``, ``await release()`` or exit.

    ``lost`` is an ``asyncio.Event``: ``await held.lost.wait()`` to stop work the moment the
    lease can no longer be trusted.
    """

    lost: asyncio.Event

    def __init__(self, store: HoldingStore, lease: Lease, link_epoch: int | None = None) -> None:
        verified = store.link().epoch if link_epoch is None else link_epoch
        super().__init__(lease, verified, store.name, contextlib.nullcontext())  # one thread: no lock
        self._store = store
        self._lock = asyncio.Lock()  # one of: renewal in flight, complete, release
        self.lost = asyncio.Event()
        # From now, not from when the task first runs; never past the deadline.
        first = min(self._monotonic() + lease.ttl * RENEW_FRACTION, lease.deadline)
        self._keeper = store.background(self._keep(first), renewal=True)

    def _monotonic(self) -> float:
        return self._store.clock.monotonic()

    def _link(self) -> Link:
        return self._store.link()

    def _run_callbacks(self, callbacks: list[Callable[[Any], object]]) -> None:
        asyncio.get_running_loop().call_soon(self._call_back, callbacks)

    # What holders do.
    async def complete(self, result: str | bytes | None = None) -> None:
        """Mark the job completed. If the store could not be reached (``BackendUnavailable``),
        the result was refused (``InvalidArgument``) or the call was cancelled, the lease is
        still held and renewed: call ``complete()`` again while it lives, or leave the block to
        release it. A retry that finds the job completed under this very lease (the first
        attempt landed, its answer did not) returns normally."""
        async with self._lock:
            self._ensure_open()
            try:
                await self._store.complete(self._lease, result)
                self._done = True
            except BaseException as exc:
                if self._complete_failed(exc):
                    raise
            finally:
                if self._done:
                    self._keeper.cancel()

    async def fail(self, error: str | None = None, *, retry_in: float | None = None) -> None:
        """Give the job back as failed (``AsyncStore.fail``); what a failed call means is as
        for ``complete()``."""
        async with self._lock:
            self._ensure_open()
            try:
                await self._store.fail(self._lease, error, retry_in=retry_in)
                self._done = True
            except BaseException as exc:
                if self._complete_failed(exc, Reason.NOT_LEASED):
                    raise
            finally:
                if self._done:
                    self._keeper.cancel()

    async def release(self) -> None:
        """Give the job back; a lost lease is not ours to give back, so nothing is sent then
        (but one lost only because the store is closing is: ``_ours_to_give_back``)."""
        async with self._lock:
            self._ensure_open()
            try:
                if self._ours_to_give_back():
                    with self._giving_back():
                        await self._store.release(self._lease)
            finally:
                self._done = True
                self._keeper.cancel()

    async def __aenter__(self) -> AsyncHeldLease:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._done:
            return
        # Shielded: a task cancelled inside the block (or again while leaving it) still gives
        # the job back; the release goes on in the background if this await is cancelled.
        release = self._store.background(self._release_quietly())
        await asyncio.shield(release)

    async def _release_quietly(self) -> None:
        try:
            await self.release()
        except LeaseError as err:
            # Never replace the exception leaving the block; without one, a failed release
            # still leaves a lease that expires by itself, so it is logged, not raised.
            log.warning("releasing %r on exit failed: %s", self.job_id, err)

    async def _give_back_on_close(self) -> None:
        """Release a lease ``_closing()`` just lost, after a request under it (a renewal, a
        complete()) ends, unless that finished it; the closing store bounds how long it waits."""
        async with self._lock:
            try:
                if not self._done and self._held_at_close:
                    with self._giving_back_on_close():
                        await self._store.release(self._lease)
            finally:
                self._held_at_close = False

    # What the renewal task does.
    async def _renew_once(self) -> bool:
        """Renew if still held; False when there is nothing more to renew."""
        async with self._lock:
            link = self._renewal_due()
            if link is None:
                return False
            try:
                renewed = await self._store.renew(self._lease)
            except StaleLease as exc:
                return self._renewal_refused(exc)
            return self._renewed(renewed, link)

    async def _attempt(self) -> bool | BaseException:
        try:
            return await self._renew_once()
        except Exception as exc:  # judged by next_attempt: retried, or the lease lost
            return exc

    async def _keep(self, due: float) -> None:
        while True:
            while (left := due - self._monotonic()) > 0:
                if not self._expire_if_due():
                    return
                await asyncio.sleep(min(left, max(self.remaining(), 0.0), MAX_SLEEP))
            attempt = self._store.background(self._attempt())
            while not attempt.done():
                if not self._expire_if_due():
                    return  # lost while the renewal hangs; it ends by itself, its answer too late
                await asyncio.wait({attempt}, timeout=min(max(self.remaining(), 0.0), MAX_SLEEP))
            delay = next_attempt(self, attempt.result())
            if delay is None:
                return
            due = self._monotonic() + delay


def end_on_close(held: Iterable[AsyncHeldLease]) -> list[Coroutine[Any, Any, None]]:
    """For a store that closes: lose every lease still held, now, and return the releases that
    give them back (the store runs them in the background and bounds how long it waits)."""
    return [h._give_back_on_close() for h in held if h._closing()]
