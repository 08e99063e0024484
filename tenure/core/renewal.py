"""Held leases and the one background thread per store that renews all of them.

A held lease is trusted until its *safe local deadline*: the holder's monotonic time when
it sent the claim or the last successful renewal, plus the TTL shortened by the drift
margin. The store can only have started the lease after the request was sent, so by then
the lease may have expired but cannot have been handed to someone else earlier than that
(up to the clock-rate drift the margin allows). Past that point, ``check()`` fails even if
the store is unreachable and nothing has been heard.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import heapq
import itertools
import logging
import threading
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING

from tenure.core import telemetry
from tenure.core.errors import BackendUnavailable, LeaseError, LeaseLost, StaleLease
from tenure.core.records import Lease

if TYPE_CHECKING:
    from tenure.core.clock import Clock
    from tenure.core.store import Store

log = logging.getLogger("tenure.renewal")

RENEW_FRACTION = 1 / 3  # renew when a third of the TTL has gone by since the last renewal
RENEWAL_WORKERS = 4  # renewals in flight at once per store
RETRY_FRACTION = 1 / 20  # after a failed attempt, retry this much later (of the TTL)


class HeldLease:
    """A lease kept alive in the background until ``complete()``, ``release()`` or exit."""

    def __init__(self, store: Store, lease: Lease, link_epoch: int | None = None) -> None:
        self._store = store
        self._lease = lease
        # The connection epoch before the claim (or last renewal) was sent; see Backend.link().
        self._verified = store.backend.link().epoch if link_epoch is None else link_epoch
        self._lock = threading.Lock()  # one of: renewal in flight, complete, release
        self._done = False
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

    # What holders do.
    def complete(self, result: str | bytes | None = None) -> None:
        with self._finishing():
            try:
                self._store.complete(self._lease, result)
            except StaleLease as exc:
                self._lose(str(exc))
                raise

    def release(self) -> None:
        with self._finishing():
            if not self.lost.is_set():  # a lost lease is not ours to give back
                self._store.release(self._lease)

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
                self._lease = self._store.renew(self._lease)
            except StaleLease as exc:
                self._lose(str(exc))
                return False
            self._verified = link.epoch
            return True

    def _lose(self, reason: str) -> None:
        if not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()
            telemetry.lost(self._store.characteristics.name)
            log.warning("lease on %r (token %d) lost: %s", self.job_id, self.token, reason)

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else ("done" if self._done else "held")
        return f"<HeldLease {self.job_id!r} owner={self.owner!r} token={self.token} {state}>"


class Renewer:
    """Renews every held lease of a store: one scheduler thread keeps a time-ordered heap and
    hands due renewals to a few worker threads, so a slow round trip delays only itself and a
    worker holding 1,000 leases runs RENEWAL_WORKERS + 1 threads, not 1,000."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, HeldLease]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False

    def add(self, held: HeldLease) -> None:
        with self._cond:
            if self._closed:
                raise LeaseError("the store is closed")
            self._push(held, self._clock.monotonic() + held.lease.ttl * RENEW_FRACTION)
            if self._thread is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(RENEWAL_WORKERS, "tenure-renew")
                self._thread = threading.Thread(target=self._run, name="tenure-renewer", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _push(self, held: HeldLease, at: float) -> None:
        heapq.heappush(self._heap, (at, next(self._order), held))

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    wait = self._heap[0][0] - self._clock.monotonic() if self._heap else None
                    if wait is not None and wait <= 0:
                        break
                    self._cond.wait(wait)
                if self._closed:
                    return
                _, _, held = heapq.heappop(self._heap)
            assert self._pool is not None
            # A held lease is back in the heap only after its renewal ends: never two at once.
            self._pool.submit(self._renew, held)

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
                # Never schedule past the point where the lease would be lost anyway.
                at = min(self._clock.monotonic() + delay, held.deadline)
                self._push(held, at)
                self._cond.notify()  # the scheduler may be asleep on an empty heap

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
