"""Held leases and the one background scheduler per store that renews all of them.

What a held lease decides (its safe local deadline, what a renewal's or a completion's
answer means) is in ``tenure.core.holding``, shared with ``tenure.aio``; this module adds
threads: a lock around each renewal, completion and release, and one scheduler thread per
store that sets ``lost`` (and calls ``on_lost`` callbacks) at the deadline whether or not a
renewal is stuck in a request that hangs.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from tenure.core.errors import LeaseError, StaleLease
from tenure.core.holding import (
    CLOSE_WAIT,
    MAX_DRIFT_MARGIN,
    MAX_SLEEP,
    RENEW_FRACTION,
    RETRY_FRACTION,
    HeldState,
    RenewalBatch,
    in_parts,
    log,
    next_attempt,
)
from tenure.core.records import Lease, Reason
from tenure.core.schedule import CLAIM_YIELD, Schedule
from tenure.core.threads import ElasticPool

if TYPE_CHECKING:
    from tenure.core.backend import Backend, Characteristics, Link
    from tenure.core.clock import Clock

__all__ = ["MAX_DRIFT_MARGIN", "MAX_SLEEP", "RENEWAL_WORKERS", "RENEW_FRACTION", "RETRY_FRACTION", "HeldLease",
           "LeaseStore", "Renewer"]

RENEWAL_WORKERS = 2  # threads kept for renewals (a batch each); more start while requests hang
MAX_RENEWAL_THREADS = 64  # renewals in flight at once per store, at most


class LeaseStore(Protocol):
    """What a held lease uses of its store (``tenure.Store``), named here because the store
    imports this module."""

    @property
    def backend(self) -> Backend: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def characteristics(self) -> Characteristics: ...

    def renew(self, lease: Lease, ttl: float | None = None) -> Lease: ...

    def renew_many(self, leases: Iterable[Lease], ttl: float | None = None) -> list[Lease | LeaseError]: ...

    def complete(self, lease: Lease, result: str | bytes | None = None) -> None: ...

    def release(self, lease: Lease) -> None: ...

    def fail(self, lease: Lease, error: str | None = None, *, retry_in: float | None = None) -> None: ...


class HeldLease(HeldState):
    """A lease kept alive in the background until ``complete()``, ``release()`` or exit."""

    lost: threading.Event

    def __init__(self, store: LeaseStore, lease: Lease, link_epoch: int | None = None) -> None:
        verified = store.backend.link().epoch if link_epoch is None else link_epoch
        super().__init__(lease, verified, store.characteristics.name, threading.Lock())
        self._store = store
        self._lock = threading.Lock()  # one of: renewal in flight, complete, release
        self._dispatch: Callable[[Callable[[], None]], bool] | None = None  # set by the Renewer
        self.lost = threading.Event()

    def _monotonic(self) -> float:
        return self._store.clock.monotonic()

    def _link(self) -> Link:
        return self._store.backend.link()

    def _run_callbacks(self, callbacks: list[Callable[[Any], object]]) -> None:
        # Callers of _lose may hold _lock or the renewer's condition: never call back here, but
        # on a renewal thread, or on a thread of their own once the renewer is closed.
        def call() -> None:
            self._call_back(callbacks)

        if not (self._dispatch and self._dispatch(call)):
            threading.Thread(target=call, name="tenure-on-lost", daemon=True).start()

    # What holders do.
    def complete(self, result: str | bytes | None = None) -> None:
        """Mark the job completed. If the store could not be reached (``BackendUnavailable``),
        the result was refused (``InvalidArgument``) or the call was interrupted, the lease is
        still held and renewed: call ``complete()`` again while it lives, or leave the block to
        release it. A retry that finds the job completed under this very lease (the first
        attempt landed, its answer did not) returns normally."""
        with self._lock:
            self._ensure_open()
            try:
                self._store.complete(self._lease, result)
            except BaseException as exc:
                if self._complete_failed(exc):
                    raise
            self._done = True

    def fail(self, error: str | None = None, *, retry_in: float | None = None) -> None:
        """Give the job back as failed (``Store.fail``): retried after ``retry_in`` seconds or
        the store's backoff, or parked on its last attempt. What a failed call means is as
        for ``complete()``."""
        with self._lock:
            self._ensure_open()
            try:
                self._store.fail(self._lease, error, retry_in=retry_in)
            except BaseException as exc:
                if self._complete_failed(exc, Reason.NOT_LEASED):
                    raise
            self._done = True

    def release(self) -> None:
        with self._finishing(), self._giving_back():
            if self._ours_to_give_back():
                self._store.release(self._lease)

    @contextlib.contextmanager
    def _finishing(self) -> Iterator[None]:
        """Stop renewal (waiting out one in flight), then mark the lease done either way."""
        with self._lock:
            self._ensure_open()
            try:
                yield
            finally:
                self._done = True

    def __enter__(self) -> HeldLease:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._done:
            return
        try:
            self.release()
        except LeaseError as err:
            # Never replace the exception leaving the block; without one, a failed release
            # still leaves a lease that expires by itself, so it is logged, not raised.
            log.warning("releasing %r on exit failed: %s", self.job_id, err)

    # What the renewer does.
    def _give_back_on_close(self, until: float) -> None:
        """Release a lease ``_closing()`` just lost, unless a request under it (a renewal, a
        complete()) is still on its way at ``until`` (``time.monotonic``) or finished it."""
        if not self._lock.acquire(timeout=max(0.0, until - time.monotonic())):
            self._held_at_close = False  # the backend closes now: a later release could not land
            log.warning("%r was not given back as the store closed: a request under it still hangs", self.job_id)
            return
        try:
            if not self._done and self._held_at_close:
                with self._giving_back_on_close():
                    self._store.release(self._lease)
        finally:
            self._held_at_close = False
            self._lock.release()

    def _renew_once(self) -> bool:
        """Renew if still held; False when there is nothing more to renew."""
        with self._lock:
            link = self._renewal_due()
            if link is None:
                return False
            try:
                renewed = self._store.renew(self._lease)
            except StaleLease as exc:
                return self._renewal_refused(exc)
            return self._renewed(renewed, link)


class Renewer:
    """Renews every held lease of a store and watches their deadlines: one scheduler thread
    keeps the ``Schedule`` (renewals and deadlines by time) and hands each batch of renewals
    due (one ``renew_many``, one round trip on most stores) to a pool that starts another
    thread rather than queue one behind a request that hangs. A worker holding 10,000 leases on
    a healthy store runs a handful of threads and a few requests a second, not 10,000."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._schedule: Schedule[HeldLease] = Schedule()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pool = ElasticPool("tenure-renew", keep=RENEWAL_WORKERS, limit=MAX_RENEWAL_THREADS)
        self._closed = False
        self.active = False  # a lease was held: until then no claim has renewals to wait for

    def add(self, held: HeldLease) -> None:
        with self._cond:
            if self._closed:
                raise LeaseError("the store is closed")
            held._dispatch = self._pool.submit
            self._schedule.add(held, self._clock.monotonic())
            self.active = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tenure-renewer", daemon=True)
                self._thread.start()
            self._cond.notify()

    def yield_to_renewals(self) -> None:
        """Before a claim is sent: wait while a renewal is late (``Schedule.behind``), until it
        is answered, ``CLAIM_YIELD`` seconds at most. The leases already held are renewed
        first; a claim never delays them on a machine or a store short of time."""
        until = time.monotonic() + CLAIM_YIELD  # real waiting, whatever the store's clock
        with self._cond:
            while not self._closed and self._schedule.behind(self._clock.monotonic()):
                left = until - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    at = self._schedule.next_at()
                    wait = None if at is None else at - self._clock.monotonic()
                    if wait is not None and wait <= 0:
                        break
                    stalled = self._pool.unstall()  # renewals queued behind hung ones: one more thread
                    waits = [w for w in (wait, stalled) if w is not None]
                    self._cond.wait(min(*waits, MAX_SLEEP) if waits else None)
                if self._closed:
                    return
                batch = self._schedule.take(self._clock.monotonic(), HeldLease._expire_if_due)  # and deadlines due
            # A held lease is back in the schedule only after its renewal ends: never two at once.
            if batch and batch[0]._store.backend.RENEWS_IN_BATCHES:
                self._pool.submit(functools.partial(self._renew_batch, batch))
            else:  # a request per lease anyway (the default loop): side by side, as the pool allows
                for held in batch:
                    self._pool.submit(functools.partial(self._renew, held))

    def _renew_batch(self, batch: list[HeldLease]) -> None:
        """``renew_many`` for the leases of ``batch`` that are free, a request's worth at a time
        (``in_parts``); a lease whose lock a complete() or release() holds renews alone once it
        is free, as it always did."""
        free = [held for held in batch if held._lock.acquire(blocking=False)]
        for held in set(batch).difference(free):
            self._pool.submit(functools.partial(self._renew, held))
        parts = in_parts(free, free[0]._store.backend.RENEW_BATCH) if free else []
        try:
            while parts:
                self._renew_part(parts.pop(0))
                self._pool.progress()  # a request answered: not a hung one to start threads for
        finally:
            for held in (held for part in parts for held in part):
                held._lock.release()

    def _renew_part(self, part: list[HeldLease]) -> None:
        """One ``renew_many`` for ``part`` (their locks taken, released here)."""
        outcomes: dict[HeldLease, bool | BaseException] = dict.fromkeys(part, False)
        try:
            renewals = RenewalBatch(part)
            if renewals.due:
                try:
                    outcomes = renewals.answered(list(part[0]._store.renew_many(renewals.leases)))
                except Exception as exc:
                    outcomes = renewals.answered(exc)
        finally:
            for held in part:
                held._lock.release()
        for held, outcome in outcomes.items():
            self._reschedule(held, outcome)

    def _renew(self, held: HeldLease) -> None:
        outcome: bool | BaseException
        try:
            outcome = held._renew_once()
        except Exception as exc:
            outcome = exc
        self._reschedule(held, outcome)

    def _reschedule(self, held: HeldLease, outcome: bool | BaseException) -> None:
        delay = next_attempt(held, outcome)
        with self._cond:
            if self._closed:
                return
            if delay is None:
                self._schedule.answered(held)
            else:
                self._schedule.renew_at(held, self._clock.monotonic() + delay)
            # The scheduler may be asleep on an empty heap; claims wait for renewals answered.
            self._cond.notify_all()

    def close(self) -> None:
        """Stop renewing, then end every lease still held: each is lost at once (``lost`` set,
        ``on_lost`` callbacks run), then given back, all at the same time, within CLOSE_WAIT."""
        with self._cond:
            self._closed = True
            held = set(self._schedule.held())
            self._cond.notify_all()
        self._pool.close()  # renewals not started are dropped; callbacks from now run on threads of their own
        ending = [h for h in held if h._closing()]
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if not ending:
            return
        until = time.monotonic() + CLOSE_WAIT  # a bound on real waiting, whatever the store's clock
        releases = ThreadPoolExecutor(min(len(ending), MAX_RENEWAL_THREADS), "tenure-close")
        try:
            concurrent.futures.wait([releases.submit(h._give_back_on_close, until) for h in ending],
                                    timeout=CLOSE_WAIT)
        finally:  # not waiting longer: the backend's close ends requests that still hang
            releases.shutdown(wait=False, cancel_futures=True)
