"""The pauses of a blocking claim (``claim(..., wait=)``, ``claim_next(..., wait=)``).

Between attempts a waiting claim sleeps until the store's watch reports a change (a release,
a completion, a new job), the lease it ran into is due to end (for claim_next: the store's
next job to become claimable by time, a scheduled one or a lease's end, where the store can
tell, ``Backend.next_due``), or a backoff delay passes, whichever comes first. Backends with a
native watch (etcd, ZooKeeper) wake it at once: one watch per store, started by the first
claim that waits and shared by all later ones, so many waiting workers cost the store one
watch. The others (memory, SQLite) are polled, starting at 50 ms and doubling up to one
second, so an idle waiter costs about one claim attempt a second.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from tenure.core import validation
from tenure.core.backend import Backend
from tenure.core.errors import AlreadyClaimed, LeaseError, NotYetClaimable
from tenure.core.records import Change, JobState, Lease

log = logging.getLogger("tenure.waiting")
T = TypeVar("T")

CLAIM_WAITS = 3  # NotYetClaimable waits one claim() without wait sits out before it raises
FIRST_DELAY = 0.05
MAX_POLL_DELAY = 1.0  # without a watch: also how late an expiry nobody announces is noticed
MAX_WATCH_DELAY = 2.0  # with a watch: a fallback for changes a watch does not report (expiry)
WATCH_INTERVAL = 0.5  # how often the watch thread looks at its stop flag


def seconds(wait: object) -> float:
    """A validated wait: None and 0 mean "do not wait"."""
    return 0.0 if wait is None else validation.seconds("wait", wait, maximum=validation.MAX_WAIT)


def has_native_watch(backend: Backend) -> bool:
    """Whether the backend overrides the polling watch with one the store pushes."""
    return type(backend).watch is not Backend.watch


def may_free_a_job(change: Change) -> bool:
    """Whether a change can make a job claimable: renewals, claims, completions and
    rejections cannot, so a busy store does not wake every waiter at each renewal."""
    if change.job is not None:
        return change.job.state in (JobState.PENDING, JobState.EXPIRED)
    return change.removed is not None


class Changes:
    """A count of the changes a store's watch reported that may free a job, for waiting
    claims to sleep on.

    The watch runs in one thread per store, started by the first waiter and kept until
    ``close()``; if it fails, the next waiter starts it again (and backoff covers the gap).
    """

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.native = has_native_watch(backend)
        self._cond = threading.Condition()
        self._count = 0
        self._stop = threading.Event()
        self._running = False

    def seen(self) -> int:
        """The count now; starts the watch if none runs."""
        with self._cond:
            if self.native and not self._running and not self._stop.is_set():
                self._running = True
                threading.Thread(target=self._follow, name="tenure-claim-wait", daemon=True).start()
            return self._count

    def wait(self, seen: int, timeout: float) -> None:
        """Until a change after ``seen`` is reported, or ``timeout`` seconds."""
        with self._cond:
            self._cond.wait_for(lambda: self._count != seen or self._stop.is_set(), timeout)

    def _follow(self) -> None:
        try:
            for change in self._backend.watch(self._stop, WATCH_INTERVAL):
                if not may_free_a_job(change):
                    continue
                with self._cond:
                    self._count += 1
                    self._cond.notify_all()
        except Exception as exc:  # the backoff goes on without it; a closed store ends it too
            if not self._stop.is_set():
                log.info("the watch behind waiting claims ended: %s", exc)
        finally:
            with self._cond:
                self._running = False

    def close(self) -> None:
        with self._cond:
            self._stop.set()
            self._cond.notify_all()


class Pacing:
    """When the next attempt of one blocking claim is due; no I/O, shared by both flavours."""

    def __init__(self, wait: float, native: bool) -> None:
        # The wait is the caller's real time (like the sleeps between attempts), not the
        # store's clock: an injected test clock must not stretch or shrink it.
        self._end = time.monotonic() + wait
        self._delay = FIRST_DELAY
        self._native = native

    def next_sleep(self, due_in: float | None) -> float | None:
        """Seconds to sleep before the next attempt, at most until a change wakes the claim;
        None once the wait is over (do not try again).

        ``due_in``: seconds until the obstacle ends by itself (a lease's expiry), if known.
        """
        remaining = self._end - time.monotonic()
        if remaining <= 0:
            return None
        if self._native:  # changes are announced: sleep until the lease is due, or the cap
            timeout = min(MAX_WATCH_DELAY, self._delay if due_in is None else max(due_in, FIRST_DELAY))
        else:  # a release is seen only by trying: back off, but not past the lease's end
            timeout = self._delay if due_in is None else min(self._delay, max(due_in, FIRST_DELAY))
        self._delay = min(self._delay * 2, MAX_WATCH_DELAY if self._native else MAX_POLL_DELAY)
        return min(timeout, remaining)


def due_in(exc: LeaseError, store_now: float | None) -> float | None:
    """Seconds until what refused a claim ends by itself, if known: a lease the store may have
    ended early (``NotYetClaimable``), or the current holder's lease (``AlreadyClaimed``)."""
    if isinstance(exc, NotYetClaimable):
        return exc.retry_after
    if isinstance(exc, AlreadyClaimed) and exc.expires_at is not None and store_now is not None:
        return exc.expires_at - store_now
    return None


# The attempts of a claim, free of I/O: ``claim_steps`` and ``claim_next_steps`` yield what to do
# next and are sent its outcome; ``Store`` and ``tenure.aio.AsyncStore`` only carry it out.
@dataclass(frozen=True)
class Attempt:
    """Send the claim once; sent back its lease (or None), or thrown the store's refusal."""


@dataclass(frozen=True)
class StartWaiting:
    """Note the store's changes seen so far: one after this wakes the next ``Pause``."""


@dataclass(frozen=True)
class Pause:
    """A blocking claim's pause (``Waiter.pause``); sent back False once its wait is over."""

    due_in: float | None


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class ReadNow:
    """Sent back the store's clock."""


@dataclass(frozen=True)
class NextDue:
    """Sent back the seconds until a job becomes claimable by time alone, if the store can tell
    (``Backend.next_due``): a scheduled job or a lease's end wakes a waiting claim_next then."""


Step = Attempt | StartWaiting | Pause | Sleep | ReadNow | NextDue
Steps = Generator[Step, Any, T]


def claim_steps(blocking: bool) -> Steps[Lease]:
    """``claim``: with a wait, pause while the job is held or not yet claimable, until the wait
    is over; without one, sit out only a lease the store may have ended early, ``CLAIM_WAITS``
    times (each is for a newer claim, as tokens grow: few rounds)."""
    if blocking:
        yield StartWaiting()
    sat_out = 0
    while True:
        try:
            lease: Lease = yield Attempt()
            return lease
        except NotYetClaimable as exc:  # first: it is an AlreadyClaimed too
            if blocking:
                if not (yield Pause(exc.retry_after)):
                    raise
            elif sat_out < CLAIM_WAITS:
                yield Sleep(exc.retry_after)
                sat_out += 1
            else:
                raise
        except AlreadyClaimed as exc:
            if not blocking:
                raise
            now = (yield ReadNow()) if exc.expires_at is not None else None
            if not (yield Pause(due_in(exc, now))):
                raise


def claim_next_steps(blocking: bool) -> Steps[Any]:
    """``claim_next`` (and ``claim_next_many``): with a wait, try again after each pause until
    something is claimed (a lease, a non-empty list) or the wait is over; a pause ends when the
    store says a job becomes claimable, if it can tell."""
    claimed = yield Attempt()
    if not claimed and blocking:
        yield StartWaiting()
        while not claimed and (yield Pause((yield NextDue()))):
            claimed = yield Attempt()
    return claimed


class Waiter:
    """Paces the attempts of one blocking claim."""

    def __init__(self, changes: Changes, wait: float) -> None:
        self._changes = changes
        self._pacing = Pacing(wait, changes.native)
        self._seen = changes.seen()  # before the next attempt: a change after it wakes us

    def pause(self, due_in: float | None = None) -> bool:
        """Sleep before the next attempt; False once the wait is over (do not try again).

        ``due_in``: seconds until the obstacle ends by itself (a lease's expiry), if known.
        """
        timeout = self._pacing.next_sleep(due_in)
        if timeout is None:
            return False
        self._changes.wait(self._seen, timeout)
        self._seen = self._changes.seen()
        return True
