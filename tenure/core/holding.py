"""What a held lease decides, free of I/O and of threads: one implementation for both flavours.

``tenure.HeldLease`` (renewed by a thread) and ``tenure.aio.AsyncHeldLease`` (renewed by a
task) keep their state here and ask these methods what a deadline, a connection's state, a
renewal's answer or a completion's failure means; they differ only in how they wait, lock
and call the store.

A held lease is trusted until its *safe local deadline*: the holder's suspend-proof
monotonic time (``Clock.monotonic``) when it sent the claim or the last successful renewal,
plus the TTL shortened by the drift margin (docs/protocol.md).
"""

from __future__ import annotations

import abc
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

from tenure.core import telemetry
from tenure.core.backend import Link
from tenure.core.errors import BackendUnavailable, InvalidArgument, LeaseError, LeaseLost, StaleLease
from tenure.core.records import Lease, Reason

log = logging.getLogger("tenure.renewal")

RENEW_FRACTION = 1 / 3  # renew when a third of the TTL has gone by since the last renewal
RETRY_FRACTION = 1 / 20  # after a failed attempt, retry this much later (of the TTL)
# The safe window, TTL * (1 - drift_margin), must hold the first renewal and retries after it
# (a margin above 2/3 loses every held lease before its first renewal is sent); etcd's claim
# slack covers a store clock up to 50 % fast (docs/backends/etcd.md). Checked by the stores.
MAX_DRIFT_MARGIN = 0.5
# Timers run on the OS's monotonic clock (threading waits, the asyncio loop), which stops while
# the machine is suspended; deadlines are on the suspend-proof one. Waking at least this often
# bounds how late ``lost`` is set after a resume (``check()`` is exact either way).
MAX_SLEEP = 1.0
DEADLINE_PASSED = "the safe local deadline passed before a renewal succeeded"
SESSION_LOST = "the store session was lost"
STORE_CLOSED = "the store was closed, so nothing renews the lease any more"
# Seconds closing a store gives background work to end: releases of the leases it still holds
# (and, in tenure.aio, of cancelled claims). Past it the backend is closed anyway, which ends
# requests still on their way; a lease whose release did not land expires by its TTL.
CLOSE_WAIT = 10.0


class Flag(Protocol):
    """``threading.Event`` or ``asyncio.Event``: what ``lost`` is in each flavour."""

    def is_set(self) -> bool: ...

    def set(self) -> None: ...


class HeldState(abc.ABC):
    """A held lease's state and decisions; subclasses renew it and call the store."""

    lost: Flag

    def __init__(self, lease: Lease, verified: int, store_name: str,
                 lost_lock: contextlib.AbstractContextManager[Any]) -> None:
        self._lease = lease
        # The connection epoch before the claim (or last renewal) was sent; see Backend.link().
        self._verified = verified
        self._store_name = store_name
        self._done = False
        # A complete() or fail() that may have landed: the refusal a retry gets if it did.
        self._landed_as: Reason | None = None
        self._callbacks: list[Callable[[Any], object]] = []
        self._lost_lock = lost_lock  # a threading.Lock where callers run in several threads
        self._finished_first = False  # lost only after complete() or release(): callbacks never run
        # Lost because the store closed, not yet given back: the store still has it as this
        # holder's, so whichever release comes first (the closing store's, or the holder's own
        # on hearing of the loss) sends it.
        self._held_at_close = False
        self.lost_reason: str | None = None

    @abc.abstractmethod
    def _monotonic(self) -> float:
        """The holder's suspend-proof clock (the store's injected ``Clock``)."""

    @abc.abstractmethod
    def _link(self) -> Link: ...

    @abc.abstractmethod
    def _run_callbacks(self, callbacks: list[Callable[[Any], object]]) -> None:
        """Run ``on_lost`` callbacks off the caller's path (a renewal thread, the loop)."""

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
        return self._lease.deadline - self._monotonic()

    def check(self) -> None:
        """Raise LeaseLost unless effects may still be produced under this lease."""
        link = self._link()
        if not self.lost.is_set() and self.remaining() <= 0:
            self._lose(DEADLINE_PASSED)
        if link.lost_epoch > self._verified:
            self._lose(SESSION_LOST)
        if self.lost.is_set():
            raise LeaseLost(f"lease on {self.job_id!r} (token {self.token}) lost: {self.lost_reason}")
        if not link.connected or link.epoch > self._verified:
            # Not lost yet: a renewal after reconnecting verifies the lease again.
            raise LeaseLost(f"lease on {self.job_id!r} (token {self.token}) at risk: the connection "
                            "to the store was interrupted and the lease is not verified since")

    # Decisions around the store's answers.
    def _ensure_open(self) -> None:
        if self._done:
            raise LeaseLost(f"lease on {self.job_id!r} was already completed or released")

    def _complete_failed(self, exc: BaseException, landed_as: Reason = Reason.COMPLETED) -> bool:
        """What a failed complete() means; True when the caller must raise ``exc``.

        A refused result (``InvalidArgument``, nothing written) or an unknown outcome (the
        store could not be reached, ``BackendUnavailable`` or ``OutcomeUnknown``; the call was
        cancelled or interrupted) leaves the lease held and renewed: complete() may be called
        again while it lives, and leaving the block releases it. A retry that finds the job
        completed under this very lease (the first attempt landed, its answer did not) is a
        success.
        """
        if isinstance(exc, InvalidArgument):
            return True  # nothing was written: the lease is held and renewed as before
        if not isinstance(exc, StaleLease):
            # BackendUnavailable, a cancellation, an interrupt, a bug: the request may or may
            # not have landed. Renewals go on, and the next request under the lease (a renewal,
            # a retry, the release on leaving the block) is fenced by owner and token, so its
            # answer tells which (see _own_completion).
            self._landed_as = landed_as
            return True
        if self._own_completion(exc):
            self._done = True
            return False
        self._lose(str(exc))  # before it is done: lost while held, so on_lost callbacks run
        self._done = True
        return True

    def _own_completion(self, exc: StaleLease) -> bool:
        """Whether a refusal shows that a complete() (or fail()) of this lease whose outcome was
        unknown did land: the job is completed by this owner at this token (or given back,
        owned by nobody, at this token: a failure is pending or parked)."""
        r = exc.rejection
        if self._landed_as is None or r.reason != self._landed_as.value or r.current_token != self.token:
            return False
        return r.current_owner == (self.owner if self._landed_as is Reason.COMPLETED else None)

    def _renewal_due(self) -> Link | None:
        """Before a renewal: the link to verify against, or None when there is nothing to renew."""
        if self._done or self.lost.is_set():
            return None
        if self.remaining() <= 0:
            self._lose(DEADLINE_PASSED)
            return None
        link = self._link()
        if link.lost_epoch > self._verified:
            self._lose(SESSION_LOST)  # never renewed from a new session
            return None
        return link

    def _renewed(self, renewed: Lease, link: Link) -> bool:
        """After a renewal the store accepted; False when it came too late to count."""
        if self.lost.is_set():
            return False  # the deadline passed while the renewal was on its way: too late
        self._lease = renewed
        self._verified = link.epoch
        return True

    def _renewal_answered(self, found: Lease | BaseException, link: Link) -> bool | BaseException:
        """This lease's answer in a batch of renewals (``renew_many``): what a single renewal
        returns (True: renewed, False: nothing more to renew) or raised, for ``next_attempt``."""
        if isinstance(found, StaleLease):
            return self._renewal_refused(found)
        if isinstance(found, BaseException):
            return found
        return self._renewed(found, link)

    def _renewal_refused(self, exc: StaleLease) -> bool:
        if self._own_completion(exc):
            self._done = True  # the failed complete() did land: nothing to lose
        else:
            self._lose(str(exc))
        return False

    @contextlib.contextmanager
    def _giving_back(self) -> Iterator[None]:
        """Around a release: a refusal that shows this lease's own completion landed (after a
        complete() whose outcome was unknown) is no error; the job is done."""
        try:
            yield
        except StaleLease as exc:
            if not self._own_completion(exc):
                raise

    def _closing(self) -> bool:
        """The store closes: nothing will renew the lease, so the holder must stop now. Lose it
        (``lost`` set, callbacks run) before any release is sent, so no holder still works on
        a job the release hands on; True when it was still held and should be given back."""
        if self._done or self.lost.is_set():
            return False
        self._held_at_close = True  # before the loss is heard: a callback may release at once
        self._lose(STORE_CLOSED)
        if self.lost_reason != STORE_CLOSED:  # lost another way meanwhile (refused): not ours
            self._held_at_close = False
            return False
        return True

    def _ours_to_give_back(self) -> bool:
        """Whether a release must be sent: a lost lease is not ours to give back, but one lost
        only because the store closed still is (else a holder that releases when told of the
        loss would leave the job blocked until its TTL runs out)."""
        return not self.lost.is_set() or self._held_at_close

    @contextlib.contextmanager
    def _giving_back_on_close(self) -> Iterator[None]:
        """Around the release a closing store sends: a failure is logged, never raised (the
        lease then expires by its TTL, as for any holder that stopped)."""
        try:
            with self._giving_back():
                yield
        except LeaseError as err:
            log.warning("releasing %r as the store closed failed: %s", self.job_id, err)
        else:
            log.info("gave %r (token %d) back: the store was closed", self.job_id, self.token)

    def _expire_if_due(self) -> bool:
        """The deadline timer: lose the lease if its deadline passed; False once nothing is left
        to watch (finished, lost, or just lost now)."""
        if self._done or self.lost.is_set():
            return False
        if self.remaining() > 0:
            return True
        self._lose(DEADLINE_PASSED)
        return False

    def on_lost(self, callback: Callable[[Any], object]) -> None:
        """Call ``callback(held)`` once, when this lease can no longer be trusted.

        That is when ``lost`` is set: a renewal refused, the store session lost, or the safe
        local deadline passed (a timer sets it then, even while a renewal hangs). Callbacks
        run off the caller's path and never while tenure holds a lock (a renewal thread; the
        event loop in tenure.aio): a callback may call ``check()``, ``release()`` or
        ``on_lost()``. They run in the order added; one that raises is logged and the others
        still run. Added to a lease already lost, the callback runs at once in the caller's
        thread. Never called for a lease completed or released before it was lost.
        """
        with self._lost_lock:
            if not self.lost.is_set():
                self._callbacks.append(callback)
                return
            if self._finished_first:
                return  # completed or released before it was lost: nothing to hear
        self._call_back([callback])  # in the caller's thread, holding none of our locks

    def _lose(self, reason: str) -> None:
        with self._lost_lock:
            if self.lost.is_set():
                return
            self.lost_reason = reason
            self.lost.set()
            self._finished_first = self._done
            callbacks, self._callbacks = ([] if self._done else self._callbacks), []
        telemetry.lost(self._store_name)
        log.warning("lease on %r (token %d) lost: %s", self.job_id, self.token, reason)
        if callbacks:
            self._run_callbacks(callbacks)

    def _call_back(self, callbacks: list[Callable[[Any], object]]) -> None:
        for callback in callbacks:
            try:
                callback(self)
            except Exception:
                log.exception("an on_lost callback of the lease on %r raised", self.job_id)

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else ("done" if self._done else "held")
        return f"<{type(self).__name__} {self.job_id!r} owner={self.owner!r} token={self.token} {state}>"


def next_attempt(held: HeldState, outcome: bool | BaseException) -> float | None:
    """Seconds until the next renewal after one that returned ``outcome`` (or raised it); None
    when renewals end. Never past the point where the lease would be lost anyway."""
    ttl = held.lease.ttl
    if isinstance(outcome, BackendUnavailable):
        log.info("renewing %r failed, retrying: %s", held.job_id, outcome)
        delay = ttl * RETRY_FRACTION
    elif isinstance(outcome, LeaseError):  # corrupt record and the like: nothing to retry
        held._lose(str(outcome))
        return None
    elif isinstance(outcome, BaseException):  # a bug or a client-library surprise must not end renewals
        log.error("unexpected error renewing %r", held.job_id, exc_info=outcome)
        delay = ttl * RETRY_FRACTION
    elif outcome:
        delay = ttl * RENEW_FRACTION
    else:
        return None
    return max(0.0, min(delay, held.remaining()))


H = TypeVar("H", bound=HeldState)


class RenewalBatch(Generic[H]):
    """The held leases of one ``renew_many`` (their locks taken), both flavours: which are due,
    with the link each renewal verifies, and what each answer means."""

    def __init__(self, free: list[H]) -> None:
        self.free = free
        self.due = [(held, link) for held in free if (link := held._renewal_due()) is not None]

    @property
    def leases(self) -> list[Lease]:
        return [held.lease for held, _ in self.due]

    def answered(self, found: list[Lease | BaseException] | BaseException) -> dict[H, bool | BaseException]:
        """Each lease's outcome for ``next_attempt``: its own answer, or the error of a request
        that failed whole (each lease judges it)."""
        answers = [found] * len(self.due) if isinstance(found, BaseException) else found
        outcomes: dict[H, bool | BaseException] = dict.fromkeys(self.free, False)
        for (held, link), one in zip(self.due, answers, strict=True):
            outcomes[held] = held._renewal_answered(one, link)
        return outcomes


def in_parts(held: list[H], size: int) -> list[list[H]]:
    """A batch of held leases in parts of ``size`` (0: one part), renewed one after another,
    a request each (``Backend.RENEW_BATCH``): each part's leases are renewed, their deadlines
    counted from when the part was sent, as soon as its answer is in, not when the last part's is
    (a batch of 5,000 leases on ZooKeeper is nine multis)."""
    step = size or len(held) or 1
    return [held[i:i + step] for i in range(0, len(held), step)]
