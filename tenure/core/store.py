"""``Store``: the public face of a lease store, the same over every backend.

It validates every argument before the backend sees it, stamps each lease with the
holder's safe local deadline, and runs the one renewal thread that serves ``hold()``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
import time
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any

from tenure.core import telemetry, validation, waiting
from tenure.core.backend import Backend, Characteristics
from tenure.core.clock import SYSTEM_CLOCK, Clock
from tenure.core.errors import AlreadyClaimed, InvalidArgument, LeaseError, NotYetClaimable, quoted
from tenure.core.records import (
    Change,
    HistoryEvent,
    JobPage,
    JobState,
    JobStatus,
    Lease,
    Op,
    Reason,
    Rejection,
    RejectionKind,
    Summary,
)
from tenure.core.renewal import MAX_DRIFT_MARGIN, HeldLease, Renewer
from tenure.core.stamps import Stamps

DEFAULT_DRIFT_MARGIN = 0.05
PAGE_ORDERS = ("expiry", "job")
MAX_PAGE = 1000
_WAITS = 3  # NotYetClaimable waits one claim() sits out before it raises


class Store:
    """A lease store. Thread-safe; one per process is the usual shape."""

    def __init__(self, backend: Backend, *, clock: Clock = SYSTEM_CLOCK,
                 drift_margin: float = DEFAULT_DRIFT_MARGIN, url: str = "",
                 warnings: tuple[str, ...] = ()) -> None:
        margin = validation.number("drift_margin", drift_margin, what="fraction of the TTL")
        if not 0 <= margin <= MAX_DRIFT_MARGIN:
            raise InvalidArgument(f"drift_margin must be from 0 to {MAX_DRIFT_MARGIN:g} (a larger one leaves too "
                                  f"little time to renew before the safe deadline), got {quoted(drift_margin)}")
        resolution = backend.characteristics.clock_resolution
        if margin == 0 and resolution > 0:
            raise InvalidArgument(f"drift_margin=0 leaves no room for the {backend.characteristics.name} "
                                  f"store clock's steps of {resolution:g}s; give it a margin above 0")
        self.backend = backend
        self.clock = clock
        self.drift_margin = margin
        self.url = url  # redacted: safe to show
        self.warnings = warnings  # what connect() found unsafe (credentials without TLS), no secrets
        self._renewer = Renewer(clock)
        self._stamps = Stamps()  # the deadlines stamped here, the only ones a backend sees
        self._changes = waiting.Changes(backend)  # what blocking claims sleep on

    @property
    def characteristics(self) -> Characteristics:
        return self.backend.characteristics

    # -- validation shared by every operation -------------------------------------------
    def _ttl(self, ttl: object) -> float:
        c = self.characteristics
        seconds = validation.ttl(ttl, minimum=c.min_ttl, maximum=c.max_ttl, backend=c.name)
        if seconds * self.drift_margin < c.clock_resolution:
            raise InvalidArgument(f"ttl {seconds:g}s with drift_margin {self.drift_margin:g} leaves a margin "
                                  f"below the {c.name} store clock's steps of {c.clock_resolution:g}s")
        return seconds

    def _lease(self, lease: object) -> Lease:
        """A lease handed back to us, checked field by field like a claim's arguments: a Lease is
        a plain dataclass anyone can build, and its fields reach the backend and the audit."""
        if not isinstance(lease, Lease):
            raise InvalidArgument(f"expected a tenure.Lease, not {type(lease).__name__}")
        validation.job_id(lease.job_id)
        validation.owner(lease.owner)
        validation.token(lease.token)
        self._ttl(lease.ttl)
        validation.store_time("expires_at", lease.expires_at)
        given = validation.deadline(lease.deadline)
        trusted = self._stamps.trusted(lease.job_id, lease.token, given)  # see tenure.core.stamps
        return lease if trusted == given else dataclasses.replace(lease, deadline=trusted)

    def _result(self, result: object) -> bytes | None:
        data = validation.result(result)
        limit = self.characteristics.max_result_bytes
        if data is not None and len(data) > limit:
            raise InvalidArgument(f"result of {len(data)} bytes is above the {limit} bytes "
                                  f"{self.characteristics.name} can store with a job")
        return data

    def _stamped(self, lease: Lease, sent_at: float) -> Lease:
        # The store started this lease no earlier than sent_at, on a clock that may run a
        # little faster than ours: trust it for ttl shortened by the drift margin.
        deadline = sent_at + lease.ttl * (1 - self.drift_margin)
        self._stamps.stamp(lease.job_id, lease.token, deadline)
        return dataclasses.replace(lease, deadline=deadline)

    # -- the protocol ----------------------------------------------------------------------
    def submit(self, job_id: str, *, actor: str | None = None) -> None:
        """Make a job pending; a no-op on a pending or leased job; a new run of a completed one.

        ``actor`` names an operator who asked for it; history records it as the owner.
        """
        self.backend.submit(validation.job_id(job_id), None if actor is None else validation.owner(actor))

    def submit_many(self, job_ids: Iterable[str]) -> None:
        """Submit several jobs at once; all are validated before any is written."""
        if isinstance(job_ids, (str, bytes, bytearray, memoryview)):  # "abc" would be jobs "a", "b", "c"
            raise InvalidArgument(f"submit_many takes an iterable of job ids, not one {type(job_ids).__name__}; "
                                  "use submit() for one job")
        try:
            each = iter(job_ids)
        except TypeError:
            raise InvalidArgument(f"submit_many takes an iterable of job ids, not {type(job_ids).__name__}") from None
        self.backend.submit_many([validation.job_id(job_id) for job_id in each])

    def claim(self, job_id: str, owner: str, ttl: float, *, wait: float | None = None) -> Lease:
        """Claim a job that is unowned or whose lease expired by the store's clock.

        ``wait``: seconds to block while the job is held by someone else, woken by the store's
        watch where it has one (see ``tenure.core.waiting``); AlreadyClaimed once it is over.
        Where the store may end leases early (etcd before 3.4.28), a lease it ended is taken
        only once its holder must have stopped: this waits up to one TTL (NotYetClaimable).
        """
        args = validation.job_id(job_id), validation.owner(owner), self._ttl(ttl)
        blocking = waiting.seconds(wait)
        if blocking:
            return self._claim_waiting(args, blocking)
        for _ in range(_WAITS):  # each wait is for a newer claim (tokens grow): few rounds
            try:
                return self._claim_once(*args)
            except NotYetClaimable as exc:
                time.sleep(exc.retry_after)
        return self._claim_once(*args)

    def _claim_waiting(self, args: tuple[str, str, float], wait: float) -> Lease:
        waiter = waiting.Waiter(self._changes, wait)
        while True:
            try:
                return self._claim_once(*args)
            except NotYetClaimable as exc:
                due_in: float | None = exc.retry_after
                if not waiter.pause(due_in):
                    raise
            except AlreadyClaimed as exc:
                due_in = None if exc.expires_at is None else exc.expires_at - self.backend.now()
                if not waiter.pause(due_in):
                    raise

    def _claim_once(self, job_id: str, owner: str, ttl: float) -> Lease:
        sent_at = self.clock.monotonic()  # after any wait: the deadline counts from the send
        lease = telemetry.timed(self.characteristics.name, "claim", lambda: self.backend.claim(job_id, owner, ttl))
        return self._stamped(lease, sent_at)

    def claim_next(self, owner: str, ttl: float, *, wait: float | None = None) -> Lease | None:
        """Claim some pending or expired job (never a completed one), or return None.

        ``wait``: seconds to block while nothing is claimable (see ``claim``).
        """
        args = validation.owner(owner), self._ttl(ttl)
        blocking = waiting.seconds(wait)
        lease = self._claim_next_once(*args)
        if lease is None and blocking:
            waiter = waiting.Waiter(self._changes, blocking)
            while lease is None and waiter.pause():
                lease = self._claim_next_once(*args)
        return lease

    def _claim_next_once(self, owner: str, ttl: float) -> Lease | None:
        sent_at = self.clock.monotonic()
        lease = telemetry.timed(self.characteristics.name, "claim_next", lambda: self.backend.claim_next(owner, ttl))
        return None if lease is None else self._stamped(lease, sent_at)

    def renew(self, lease: Lease, ttl: float | None = None) -> Lease:
        """Extend a current lease; raises StaleLease (audited) if it is no longer current."""
        lease = self._lease(lease)
        seconds = self._ttl(lease.ttl if ttl is None else ttl)
        sent_at = self.clock.monotonic()
        renewed = telemetry.timed(self.characteristics.name, "renew", lambda: self.backend.renew(lease, seconds))
        return self._stamped(renewed, sent_at)

    def complete(self, lease: Lease, result: str | bytes | None = None) -> None:
        """Mark the job completed; raises StaleLease (audited) if the lease is not current."""
        args = self._lease(lease), self._result(result)
        telemetry.timed(self.characteristics.name, "complete", lambda: self.backend.complete(*args))
        self._stamps.forget(lease.job_id, lease.token)

    def release(self, lease: Lease) -> None:
        """Give the job back unfinished, so it can be claimed at once."""
        lease = self._lease(lease)
        telemetry.timed(self.characteristics.name, "release", lambda: self.backend.release(lease))
        self._stamps.forget(lease.job_id, lease.token)

    def hold(self, job_id: str, owner: str, ttl: float, *, wait: float | None = None) -> HeldLease:
        """Claim a job and keep renewing it in the background; use it as a context manager."""
        epoch = self.backend.link().epoch  # before the claim is sent, like its deadline
        return self._hold_claimed(self.claim(job_id, owner, ttl, wait=wait), epoch)

    def hold_next(self, owner: str, ttl: float, *, wait: float | None = None) -> HeldLease | None:
        """``claim_next`` and hold the lease it gives, or None when nothing is claimable."""
        epoch = self.backend.link().epoch
        lease = self.claim_next(owner, ttl, wait=wait)
        return None if lease is None else self._hold_claimed(lease, epoch)

    def _hold_claimed(self, lease: Lease, epoch: int) -> HeldLease:
        """Hold a lease just claimed; if it cannot be held (the store was closed meanwhile),
        give it back rather than leave the job blocked until the lease runs out."""
        try:
            return self.hold_lease(lease, _link_epoch=epoch)
        except LeaseError:
            with contextlib.suppress(LeaseError):
                self.release(lease)
            raise

    def hold_lease(self, lease: Lease, *, _link_epoch: int | None = None) -> HeldLease:
        """Hold a lease this process already claimed (stamped with its safe deadline here)."""
        checked = self._lease(lease)
        if not math.isfinite(checked.deadline):  # not stamped here: it would be trusted forever
            raise InvalidArgument(f"lease on {quoted(checked.job_id)} has no safe deadline from this store: "
                                  "hold a lease returned by its claim() or renew(), not one built by hand")
        held = HeldLease(self, checked, _link_epoch)
        self._renewer.add(held)
        return held

    # -- reading -----------------------------------------------------------------------------
    def get(self, job_id: str) -> JobStatus | None:
        return self.backend.get(validation.job_id(job_id))

    def jobs(self) -> Iterator[JobStatus]:
        return self.backend.jobs()

    def rejections(self, since: float | None = None, limit: int | None = None, *,
                   job_id: str | None = None) -> list[Rejection]:
        """Audited rejections, oldest first; with ``limit``, the most recent ones; with
        ``job_id``, that job's alone (read through an index where the store has one)."""
        args = _since(since), validation.limit(limit)
        if job_id is None:
            return self.backend.rejections(*args)
        return self.backend.job_rejections(validation.job_id(job_id), *args)

    def history(self, job_id: str | None = None, since: float | None = None,
                limit: int | None = None) -> list[HistoryEvent]:
        """Accepted claims, renewals, completions ... oldest first, with bounded retention."""
        job = None if job_id is None else validation.job_id(job_id)
        return self.backend.history(job, _since(since), validation.limit(limit))

    def summary(self, soon: float = 30.0) -> Summary:
        """Jobs counted by state now (store time), leases ending within ``soon`` seconds, and
        rejections in the last hour."""
        window = validation.seconds("soon", soon, maximum=validation.MAX_TTL)  # no lease runs longer
        return self.backend.summary(self.backend.now(), window)

    def page(self, *, states: Iterable[JobState | str] | None = None, job: str | None = None,
             owner: str | None = None, order: str = "expiry", offset: int = 0,
             limit: int = 50) -> JobPage:
        """One page of jobs, for listings that must not load every job.

        ``states`` keeps jobs in any of those states (judged by the store's clock now); ``job``
        and ``owner`` keep those whose id or owner contains the text (ASCII case ignored).
        ``order`` is ``"expiry"`` (soonest lease end first, jobs without a lease last, then by
        id) or ``"job"`` (by id).
        """
        return self.backend.page(self.backend.now(), *page_arguments(states, job, owner, order, offset, limit))

    def watch(self, stop: threading.Event | None = None, interval: float = 1.0) -> Iterator[Change]:
        """Changes to jobs and new rejections until ``stop`` is set."""
        every = validation.seconds("interval", interval, maximum=validation.MAX_WAIT, positive=True)
        return self.backend.watch(stop or threading.Event(), every)

    def now(self) -> float:
        """The store's clock, seconds since the epoch."""
        return self.backend.now()

    def health(self) -> dict[str, Any]:
        """The backend's facts, and ``warnings`` about this connection when there are any."""
        facts = self.backend.health()
        return {**facts, "warnings": "; ".join(self.warnings)} if self.warnings else facts

    # -- operators and destinations ------------------------------------------------------
    def force_expire(self, job_id: str, *, token: int | None = None, actor: str | None = None) -> None:
        """End a job's current lease now, so it can be claimed again (an operator action).

        ``token``: the token the operator confirmed; if the job's current token is another
        (claimed again since the operator looked), nothing changes and ``TokenChanged`` is
        raised. ``actor`` names the operator; history records it as the owner of the EXPIRE
        event. A holder whose lease is ended this way can still act until its next renewal or
        its safe deadline: fencing at the destination is what protects the effects then.
        """
        self.backend.force_expire(validation.job_id(job_id), None if actor is None else validation.owner(actor),
                                  None if token is None else validation.token(token))

    def report_rejection(self, job_id: str, owner: str, token: int, *, resource: str,
                         highest: int, reason: str = "") -> Rejection:
        """Add a rejection seen at a fenced destination to this store's audit.

        Every field is checked like a claim's arguments and bounded (``reason`` to 512
        characters), so the record fits every backend's largest write.
        """
        checked = (validation.job_id(job_id), validation.owner(owner), validation.token(token),
                   validation.resource(resource), validation.highest(highest), validation.reason(reason))
        rejection = Rejection(
            job_id=checked[0], op=Op.EFFECT, owner=checked[1], token=checked[2], current_owner=None,
            current_token=checked[4], at=self.now(), reason=checked[5] or str(Reason.STALE_TOKEN),
            kind=RejectionKind.DESTINATION, resource=checked[3])
        self.backend.record_rejection(rejection)
        telemetry.rejected(self.characteristics.name, Op.EFFECT.value, Reason.STALE_TOKEN.value)  # bounded labels
        return rejection

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        self._changes.close()
        self._renewer.close()
        self.backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<tenure.Store {self.url or self.characteristics.name}>"


PageArguments = tuple[frozenset[JobState] | None, str | None, str | None, str, int, int]


def page_arguments(states: Iterable[JobState | str] | None, job: object, owner: object, order: object,
                   offset: object, limit: object) -> PageArguments:
    """``Store.page``'s arguments checked, in ``Backend.page``'s order after ``now``."""
    wanted = None if states is None else frozenset(_state(s) for s in states)
    if order not in PAGE_ORDERS:
        raise InvalidArgument(f"order must be one of {', '.join(PAGE_ORDERS)}, got {quoted(order)}")
    start = validation.limit(offset)
    size = validation.limit(limit)
    if start is None or size is None or not 1 <= size <= MAX_PAGE:
        raise InvalidArgument(f"offset must be an int >= 0 and limit from 1 to {MAX_PAGE}")
    return wanted, _needle("job", job), _needle("owner", owner), str(order), start, size


def _state(value: object) -> JobState:
    try:
        return JobState(value)
    except ValueError:
        names = ", ".join(s.value for s in JobState)
        raise InvalidArgument(f"unknown job state {quoted(value)}; states are {names}") from None


def _needle(kind: str, value: object) -> str | None:
    """Search text: None or "" means no filter; otherwise validated like the field it matches."""
    if value is None or value == "":
        return None
    return validation.job_id(value) if kind == "job" else validation.owner(value)


def _since(value: object) -> float | None:
    return None if value is None else validation.store_time("since", value)
