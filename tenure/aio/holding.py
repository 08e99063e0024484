"""``AsyncHeldLease``: a lease renewed by the event loop, not by a thread.

Its decisions are ``tenure.core.holding``'s, the same as ``tenure.HeldLease``'s. Every held
lease of a store is renewed by ONE task (``AsyncRenewer``, with the sync renewer's
``Schedule``): it sleeps until the next renewal or deadline, judges deadlines itself (so
``lost`` is set at the deadline even while a renewal hangs) and sends each batch of renewals
due as one ``renew_many``, in a task of its own. The loop's timers stop while the machine is
suspended, so the task wakes at least every ``MAX_SLEEP`` seconds to read the suspend-proof
clock.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterable
from types import TracebackType
from typing import Any, Protocol

from tenure.aio.backend import AsyncBackend
from tenure.core.backend import Link
from tenure.core.clock import Clock
from tenure.core.errors import LeaseError, StaleLease
from tenure.core.holding import MAX_SLEEP, HeldState, RenewalBatch, in_parts, log, next_attempt
from tenure.core.records import Lease, Reason
from tenure.core.schedule import CLAIM_YIELD, Schedule


class HoldingStore(Protocol):
    """What a held lease needs of its store (``AsyncStore``)."""

    clock: Clock
    backend: AsyncBackend

    @property
    def name(self) -> str: ...

    def link(self) -> Link: ...

    async def renew(self, lease: Lease, ttl: float | None = None) -> Lease: ...

    async def renew_many(self, leases: Iterable[Lease], ttl: float | None = None) -> list[Lease | LeaseError]: ...

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
            except BaseException as exc:
                if self._complete_failed(exc):
                    raise
            self._done = True  # its renewals end: the renewer finds nothing more to renew

    async def fail(self, error: str | None = None, *, retry_in: float | None = None) -> None:
        """Give the job back as failed (``AsyncStore.fail``); what a failed call means is as
        for ``complete()``."""
        async with self._lock:
            self._ensure_open()
            try:
                await self._store.fail(self._lease, error, retry_in=retry_in)
            except BaseException as exc:
                if self._complete_failed(exc, Reason.NOT_LEASED):
                    raise
            self._done = True  # its renewals end: the renewer finds nothing more to renew

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

    # What the renewer does.
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


def end_on_close(held: Iterable[AsyncHeldLease]) -> list[Coroutine[Any, Any, None]]:
    """For a store that closes: lose every lease still held, now, and return the releases that
    give them back (the store runs them in the background and bounds how long it waits)."""
    return [h._give_back_on_close() for h in held if h._closing()]


class AsyncRenewer:
    """Renews every held lease of one ``AsyncStore``: one task, batches of ``renew_many``."""

    def __init__(self, store: HoldingStore) -> None:
        self._store = store
        self._schedule: Schedule[AsyncHeldLease] = Schedule()
        self._changed = asyncio.Event()
        self._answered = asyncio.Event()  # set (and replaced) whenever renewals are answered
        self._task: asyncio.Task[None] | None = None
        self.active = False  # a lease was held: until then no claim has renewals to wait for

    def add(self, held: AsyncHeldLease) -> None:
        """Renew ``held`` from now on, not from when the task next runs (called in the loop)."""
        self._schedule.add(held, self._store.clock.monotonic())
        self.active = True
        if self._task is None or self._task.done():
            self._task = self._store.background(self._run(), renewal=True)  # ends at the store's close()
        self._changed.set()

    async def yield_to_renewals(self) -> None:
        """Before a claim is sent: wait while a renewal is late, until it is answered,
        ``CLAIM_YIELD`` seconds at most (``tenure.core.renewal.Renewer.yield_to_renewals``)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + CLAIM_YIELD
        while self._schedule.behind(self._store.clock.monotonic()):
            left = until - loop.time()
            if left <= 0:
                return
            try:  # only _wake_claims sets it, replacing it: a set one is never waited on again
                await asyncio.wait_for(self._answered.wait(), left)
            except asyncio.TimeoutError:
                return

    async def _run(self) -> None:
        while True:
            at = self._schedule.next_at()
            wait = None if at is None else min(at - self._store.clock.monotonic(), MAX_SLEEP)
            if wait is None or wait > 0:
                self._changed.clear()
                # A timer, not wait_for: no task of its own per sleep (a store's tasks are its holds').
                timer = None if wait is None else asyncio.get_running_loop().call_later(wait, self._changed.set)
                try:
                    await self._changed.wait()
                finally:
                    if timer is not None:
                        timer.cancel()
                continue
            batch = self._schedule.take(self._store.clock.monotonic(), AsyncHeldLease._expire_if_due)
            # Not awaited: deadlines are watched while renewals are on their way.
            if batch and self._store.backend.renews_in_batches:
                self._store.background(self._renew_batch(batch), renewal=True)
            else:  # a request per lease anyway (a third-party backend's default loop): side by side
                for held in batch:
                    self._store.background(self._renew(held), renewal=True)

    async def _renew_batch(self, batch: list[AsyncHeldLease]) -> None:
        """``renew_many`` for the leases of ``batch`` that are free, a request's worth at a time
        (``in_parts``); a lease whose lock a complete() or release() holds renews alone once it
        is free, as it always did."""
        free = [held for held in batch if not held._lock.locked()]
        for held in set(batch).difference(free):
            self._store.background(self._renew(held), renewal=True)
        for held in free:
            await held._lock.acquire()  # free: taken at once, with no await in between
        parts = in_parts(free, self._store.backend.renew_batch)
        try:
            while parts:
                await self._renew_part(parts.pop(0))
        finally:  # cancelled (the store closes): the parts not renewed are let go too
            for held in (held for part in parts for held in part):
                held._lock.release()

    async def _renew_part(self, part: list[AsyncHeldLease]) -> None:
        """One ``renew_many`` for ``part`` (their locks taken, released here)."""
        try:
            renewals = RenewalBatch(part)
            found: list[Lease | BaseException] | BaseException = []
            if renewals.due:
                try:
                    found = list(await self._store.renew_many(renewals.leases))
                except Exception as exc:
                    found = exc
            outcomes = renewals.answered(found)
        finally:
            for held in part:
                held._lock.release()
        for held, outcome in outcomes.items():
            self._reschedule(held, outcome)
        self._wake_claims()

    async def _renew(self, held: AsyncHeldLease) -> None:
        outcome: bool | BaseException
        try:
            outcome = await held._renew_once()
        except Exception as exc:  # judged by next_attempt: retried, or the lease lost
            outcome = exc
        self._reschedule(held, outcome)
        self._wake_claims()

    def _reschedule(self, held: AsyncHeldLease, outcome: bool | BaseException) -> None:
        delay = next_attempt(held, outcome)
        if delay is None:
            self._schedule.answered(held)
        else:
            self._schedule.renew_at(held, self._store.clock.monotonic() + delay)
            self._changed.set()

    def _wake_claims(self) -> None:
        """Claims waiting for late renewals look again (``yield_to_renewals``)."""
        self._answered.set()
        self._answered = asyncio.Event()
