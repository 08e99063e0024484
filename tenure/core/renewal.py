"""Held leases and the one background scheduler per store that renews all of them.

A held lease is trusted until its *safe local deadline*: the holder's suspend-proof
monotonic time (``Clock.monotonic``) when it sent the claim or the last successful renewal,
plus the TTL shortened by the drift margin. The store can only have started the lease after
the request was sent, so by then the lease may have expired but cannot have been handed to
someone else earlier than that (up to the clock-rate drift the margin allows). Past that
point, ``check()`` fails even if the store is unreachable and nothing has been heard, and the
scheduler sets ``lost`` (and calls ``on_lost`` callbacks) whether or not a renewal is stuck
in a request that hangs.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from tenure.core import telemetry
from tenure.core.errors import BackendUnavailable, InvalidArgument, LeaseError, LeaseLost, StaleLease
from tenure.core.records import Lease, Reason
from tenure.core.threads import ElasticPool

if TYPE_CHECKING:
    from tenure.core.backend import Backend, Characteristics
    from tenure.core.clock import Clock

log = logging.getLogger("tenure.renewal")

RENEW_FRACTION = 1 / 3  # renew when a third of the TTL has gone by since the last renewal
RENEWAL_WORKERS = 4  # threads kept for renewals; more start while requests hang
MAX_RENEWAL_THREADS = 64  # renewals in flight at once per store, at most
RETRY_FRACTION = 1 / 20  # after a failed attempt, retry this much later (of the TTL)
# The safe window, TTL * (1 - drift_margin), must hold the first renewal and retries after it
# (a margin above 2/3 loses every held lease before its first renewal is sent); etcd's claim
# slack covers a store clock up to 50 % fast (docs/backends/etcd.md). Checked by Store.
MAX_DRIFT_MARGIN = 0.5
# The scheduler's waits run on the OS's monotonic clock, which stops while the machine is
# suspended; deadlines are on the suspend-proof one. Waking at least this often bounds how
# late ``lost`` is set after a resume (``check()`` is exact either way).
MAX_SLEEP = 1.0
_RENEW, _DEADLINE = 0, 1
LostCallback = Callable[["HeldLease"], object]


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

    def complete(self, lease: Lease, result: str | bytes | None = None) -> None: ...

    def release(self, lease: Lease) -> None: ...


class HeldLease:
    """A lease kept alive in the background until ``complete()``, ``release()`` or exit."""

    def __init__(self, store: LeaseStore, lease: Lease, link_epoch: int | None = None) -> None:
        self._store = store
        self._lease = lease
        # The connection epoch before the claim (or last renewal) was sent; see Backend.link().
        self._verified = store.backend.link().epoch if link_epoch is None else link_epoch
        self._lock = threading.Lock()  # one of: renewal in flight, complete, release
        self._done = False
        self._completing = False  # a complete() failed in a way that may have landed
        self._lost_lock = threading.Lock()
        self._callbacks: list[LostCallback] = []
        self._finished_first = False  # lost only after complete() or release(): callbacks never run
        self._dispatch: Callable[[Callable[[], None]], bool] | None = None  # set by the Renewer
        self.lost = threading.Event()
        self.lost_reason: str | None = None

    # What holders read.
    @property
    def lease(self) -> Lease:
        return self._lease

    @property
    def job_id(self) -> str:
        return self._lease.job_id

    @property
    def owner(self) -> str:
        return self._lease.owner

    @property
    def token(self) -> int:
        return self._lease.token

    @property
    def deadline(self) -> float:
        return self._lease.deadline

    @property
    def finished(self) -> bool:
        """Completed or released (or given up after a failed release)."""
        return self._done

    def remaining(self) -> float:
        """Seconds until the safe local deadline (negative once it has passed)."""
        return self._lease.deadline - self._store.clock.monotonic()

    def check(self) -> None:
        """Raise LeaseLost unless effects may still be produced under this lease."""
        link = self._store.backend.link()
        if not self.lost.is_set() and self.remaining() <= 0:
            self._lose("the safe local deadline passed before a renewal succeeded")
        if link.lost_epoch > self._verified:
            self._lose("the store session was lost")
        if self.lost.is_set():
            raise LeaseLost(f"lease on {self.job_id!r} (token {self.token}) lost: {self.lost_reason}")
        if not link.connected or link.epoch > self._verified:
            # Not lost yet: a renewal after reconnecting verifies the lease again.
            raise LeaseLost(f"lease on {self.job_id!r} (token {self.token}) at risk: the connection "
                            "to the store was interrupted and the lease is not verified since")

    def on_lost(self, callback: LostCallback) -> None:
        """Call ``callback(held)`` once, when this lease can no longer be trusted.

        That is when ``lost`` is set: a renewal refused, the store session lost, or the safe
        local deadline passed (a timer sets it then, even while a renewal hangs). Callbacks
        run on a renewal thread (never while tenure holds a lock: a callback may call ``check()``,
        ``release()`` or ``on_lost()``), in the order added; one that raises is logged and the
        others still run. Added to a lease already lost, the callback runs at once in this
        thread. Never called for a lease completed or released before it was lost.
        """
        with self._lost_lock:
            if not self.lost.is_set():
                self._callbacks.append(callback)
                return
            if self._finished_first:
                return  # completed or released before it was lost: nothing to hear
        self._call_back([callback])  # in the caller's thread, holding none of our locks

    # What holders do.
    def complete(self, result: str | bytes | None = None) -> None:
        """Mark the job completed. If the store could not be reached (``BackendUnavailable``)
        or the result was refused (``InvalidArgument``), the lease is still held and renewed:
        call ``complete()`` again while it lives. A retry that finds the job completed under
        this very lease (the first attempt landed, its answer did not) returns normally."""
        with self._lock:
            if self._done:
                raise LeaseLost(f"lease on {self.job_id!r} was already completed or released")
            try:
                self._store.complete(self._lease, result)
            except InvalidArgument:
                raise  # nothing was written: the lease is held and renewed as before
            except BackendUnavailable:
                self._completing = True  # it may have landed; renewals go on (see _renew_once)
                raise
            except StaleLease as exc:
                if not (self._completing and self._landed(exc)):
                    self._lose(str(exc))
                    self._done = True
                    raise
                self._done = True
            except BaseException:
                self._done = True
                raise
            self._done = True

    def release(self) -> None:
        with self._finishing():
            if not self.lost.is_set():  # a lost lease is not ours to give back
                self._store.release(self._lease)

    def _landed(self, exc: StaleLease) -> bool:
        """Whether a refusal shows this lease's own completion: an earlier attempt landed."""
        r = exc.rejection
        return (r.reason == Reason.COMPLETED.value and r.current_token == self.token
                and r.current_owner == self.owner)

    @contextlib.contextmanager
    def _finishing(self) -> Iterator[None]:
        """Stop renewal (waiting out one in flight), then mark the lease done either way."""
        with self._lock:
            if self._done:
                raise LeaseLost(f"lease on {self.job_id!r} was already completed or released")
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
    def _renew_once(self) -> bool:
        """Renew if still held; False when there is nothing more to renew."""
        with self._lock:
            if self._done or self.lost.is_set():
                return False
            if self.remaining() <= 0:
                self._lose("the safe local deadline passed before a renewal succeeded")
                return False
            link = self._store.backend.link()
            if link.lost_epoch > self._verified:
                self._lose("the store session was lost")  # never renewed from a new session
                return False
            try:
                renewed = self._store.renew(self._lease)
            except StaleLease as exc:
                if self._completing and self._landed(exc):
                    self._done = True  # the failed complete() did land: nothing to lose
                else:
                    self._lose(str(exc))
                return False
            if self.lost.is_set():
                return False  # the deadline passed while the renewal was on its way: too late
            self._lease = renewed
            self._verified = link.epoch
            return True

    def _expire_if_due(self) -> bool:
        """The deadline timer: lose the lease if its deadline passed; False once nothing is left
        to watch (finished, lost, or just lost now)."""
        if self._done or self.lost.is_set():
            return False
        if self.remaining() > 0:
            return True
        self._lose("the safe local deadline passed before a renewal succeeded")
        return False

    def _lose(self, reason: str) -> None:
        """Mark the lease lost. Callers may hold ``_lock`` or the renewer's condition, so the
        callbacks never run here: on a renewal thread, or on a thread of their own once the
        renewer is closed. A callback may then call ``check()``, ``release()`` or ``on_lost()``."""
        with self._lost_lock:
            if self.lost.is_set():
                return
            self.lost_reason = reason
            self.lost.set()
            self._finished_first = self._done
            callbacks, self._callbacks = ([] if self._done else self._callbacks), []
        telemetry.lost(self._store.characteristics.name)
        log.warning("lease on %r (token %d) lost: %s", self.job_id, self.token, reason)
        if not callbacks:
            return

        def call() -> None:
            self._call_back(callbacks)

        if not (self._dispatch and self._dispatch(call)):
            threading.Thread(target=call, name="tenure-on-lost", daemon=True).start()

    def _call_back(self, callbacks: list[LostCallback]) -> None:
        for callback in callbacks:
            try:
                callback(self)
            except Exception:
                log.exception("an on_lost callback of the lease on %r raised", self.job_id)

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else ("done" if self._done else "held")
        return f"<HeldLease {self.job_id!r} owner={self.owner!r} token={self.token} {state}>"


class Renewer:
    """Renews every held lease of a store and watches their deadlines: one scheduler thread
    keeps a time-ordered heap of renewals and deadlines and hands due renewals to a pool that
    starts another thread rather than queue one behind a request that hangs. A worker holding
    1,000 leases on a healthy store runs a handful of threads, not 1,000."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, int, HeldLease]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pool = ElasticPool("tenure-renew", keep=RENEWAL_WORKERS, limit=MAX_RENEWAL_THREADS)
        self._closed = False

    def add(self, held: HeldLease) -> None:
        with self._cond:
            if self._closed:
                raise LeaseError("the store is closed")
            held._dispatch = self._pool.submit
            renew_at = self._clock.monotonic() + held.lease.ttl * RENEW_FRACTION
            self._push(held, min(renew_at, held.deadline), _RENEW)  # never past the deadline
            self._push(held, held.deadline, _DEADLINE)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tenure-renewer", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _push(self, held: HeldLease, at: float, kind: int) -> None:
        heapq.heappush(self._heap, (at, next(self._order), kind, held))

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    wait = self._heap[0][0] - self._clock.monotonic() if self._heap else None
                    if wait is not None and wait <= 0:
                        break
                    stalled = self._pool.unstall()  # renewals queued behind hung ones: one more thread
                    waits = [w for w in (wait, stalled) if w is not None]
                    self._cond.wait(min(*waits, MAX_SLEEP) if waits else None)
                if self._closed:
                    return
                _, _, kind, held = heapq.heappop(self._heap)
                if kind == _DEADLINE:
                    # Cheap and never blocks: done here, so no hung request can delay it.
                    if held._expire_if_due():
                        self._push(held, held.deadline, _DEADLINE)  # renewed since: watch the new one
                    continue
            # A held lease is back in the heap only after its renewal ends: never two at once.
            self._pool.submit(functools.partial(self._renew, held))

    def _renew(self, held: HeldLease) -> None:
        ttl = held.lease.ttl
        try:
            again = held._renew_once()
            delay = ttl * RENEW_FRACTION
        except BackendUnavailable as exc:
            log.info("renewing %r failed, retrying: %s", held.job_id, exc)
            again, delay = True, ttl * RETRY_FRACTION
        except LeaseError as exc:  # corrupt record and the like: nothing to retry
            held._lose(str(exc))
            again, delay = False, 0.0
        except Exception:  # a bug or a client-library surprise must not kill the thread
            log.exception("unexpected error renewing %r", held.job_id)
            again, delay = True, ttl * RETRY_FRACTION
        if again:
            with self._cond:
                if self._closed:
                    return
                # Never schedule past the point where the lease would be lost anyway.
                at = min(self._clock.monotonic() + delay, held.deadline)
                self._push(held, at, _RENEW)
                self._cond.notify()  # the scheduler may be asleep on an empty heap

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._pool.close()
