"""``Store``: the public face of a lease store, the same over every backend.

It validates every argument before the backend sees it, stamps each lease with the
holder's safe local deadline, and runs the one renewal thread that serves ``hold()``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, TypeVar

from tenure.core import store_rules, telemetry, validation, waiting
from tenure.core.backend import Backend, Characteristics
from tenure.core.clock import SYSTEM_CLOCK, Clock
from tenure.core.errors import LeaseError, StaleLease
from tenure.core.lifecycle import DEFAULT as DEFAULT_LIFECYCLE
from tenure.core.lifecycle import Lifecycle
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
    Summary,
)
from tenure.core.renewal import HeldLease, Renewer
from tenure.core.store_rules import DEFAULT_DRIFT_MARGIN, MAX_PAGE, PAGE_ORDERS, Checks

__all__ = ["DEFAULT_DRIFT_MARGIN", "MAX_PAGE", "PAGE_ORDERS", "Store"]
T = TypeVar("T")


class Store:
    """A lease store. Thread-safe; one per process is the usual shape."""

    def __init__(self, backend: Backend, *, clock: Clock = SYSTEM_CLOCK,
                 drift_margin: float = DEFAULT_DRIFT_MARGIN, url: str = "",
                 warnings: tuple[str, ...] = (), lifecycle: Lifecycle = DEFAULT_LIFECYCLE) -> None:
        self.checks = Checks(backend.characteristics, drift_margin)
        self.lifecycle = lifecycle  # attempts and retry backoff when a caller does not say
        self.backend = backend
        self.clock = clock
        self.drift_margin = self.checks.drift_margin
        self.url = url  # redacted: safe to show
        self.warnings = warnings  # what connect() found unsafe (credentials without TLS), no secrets
        self._renewer = Renewer(clock)
        self._changes = waiting.Changes(backend)  # what blocking claims sleep on

    @property
    def characteristics(self) -> Characteristics:
        return self.backend.characteristics

    # -- the protocol ----------------------------------------------------------------------
    def submit(self, job_id: str, *, actor: str | None = None, max_attempts: int | None = None,
               delay: float = 0.0) -> None:
        """Make a job pending; a no-op on a pending, leased or parked job; a new run of a
        completed one.

        ``actor`` names an operator who asked for it; history records it as the owner.
        ``max_attempts``: claims the run may have before it is parked (default: the store's
        ``max_attempts`` option, else unlimited). ``delay``: seconds of the store's clock
        before a claim may take it.
        """
        self.backend.submit(validation.job_id(job_id), store_rules.actor(actor), **self._new_run(max_attempts, delay))

    def submit_many(self, job_ids: Iterable[str], *, max_attempts: int | None = None, delay: float = 0.0) -> None:
        """Submit several jobs at once; all are validated before any is written."""
        self.backend.submit_many(store_rules.job_ids(job_ids), **self._new_run(max_attempts, delay))

    def _new_run(self, max_attempts: object, delay: object) -> dict[str, Any]:
        """A new run's keywords, checked; none at their defaults (a backend written before
        them still takes the call)."""
        return self.lifecycle.run(store_rules.max_attempts(max_attempts), store_rules.delay("delay", delay))

    def claim(self, job_id: str, owner: str, ttl: float, *, wait: float | None = None) -> Lease:
        """Claim a job that is unowned or whose lease expired by the store's clock.

        ``wait``: seconds to block while the job is held by someone else, woken by the store's
        watch where it has one (see ``tenure.core.waiting``); AlreadyClaimed once it is over.
        Where the store may end leases early (etcd, 3.5.16 too), a lease it ended is taken
        only once its holder must have stopped: this waits up to one TTL (NotYetClaimable).
        """
        args = self.checks.claim(job_id, owner, ttl)
        blocking = waiting.seconds(wait)
        return self._attempts(waiting.claim_steps(blocking > 0), lambda: self._claim_once(*args), blocking)

    def _attempts(self, steps: waiting.Steps[T], attempt: Callable[[], T], wait: float) -> T:
        """Carry out a claim's steps (``tenure.core.waiting``): they decide, this does the I/O."""
        waiter: waiting.Waiter | None = None
        step = next(steps)
        while True:
            try:
                if isinstance(step, waiting.Attempt):
                    if self._renewer.active:
                        self._renewer.yield_to_renewals()  # the leases held go first
                    try:
                        outcome: Any = attempt()
                    except LeaseError as exc:
                        step = steps.throw(exc)
                        continue
                elif isinstance(step, waiting.StartWaiting):
                    outcome = waiter = waiting.Waiter(self._changes, wait)
                elif isinstance(step, waiting.Pause):
                    assert waiter is not None
                    outcome = waiter.pause(step.due_in)
                elif isinstance(step, waiting.Sleep):
                    time.sleep(step.seconds)
                    outcome = None
                elif isinstance(step, waiting.NextDue):
                    outcome = self.backend.next_due()
                else:
                    outcome = self.backend.now()
                step = steps.send(outcome)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def _claim_once(self, job_id: str, owner: str, ttl: float) -> Lease:
        sent_at = self.clock.monotonic()  # after any wait: the deadline counts from the send
        kw = self.lifecycle.creating
        lease = telemetry.timed(self.characteristics.name, "claim",
                                lambda: self.backend.claim(job_id, owner, ttl, **kw))
        return self.checks.stamped(lease, sent_at)

    def claim_next(self, owner: str, ttl: float, *, wait: float | None = None) -> Lease | None:
        """Claim some pending or expired job (never a completed one), or return None.

        ``wait``: seconds to block while nothing is claimable (see ``claim``).
        """
        args = validation.owner(owner), self.checks.ttl(ttl)
        blocking = waiting.seconds(wait)
        steps: waiting.Steps[Lease | None] = waiting.claim_next_steps(blocking > 0)
        return self._attempts(steps, lambda: self._claim_next_once(*args), blocking)

    def _claim_next_once(self, owner: str, ttl: float) -> Lease | None:
        sent_at = self.clock.monotonic()
        lease = telemetry.timed(self.characteristics.name, "claim_next", lambda: self.backend.claim_next(owner, ttl))
        return None if lease is None else self.checks.stamped(lease, sent_at)

    def claim_next_many(self, owner: str, ttl: float, n: int, *, wait: float | None = None) -> list[Lease]:
        """Claim up to ``n`` (1 to 1,000) jobs as ``claim_next`` would, one after another, in
        as few round trips as the store allows (one on most stores: ``characteristics`` and the
        backend's CLAIMS_IN_BATCHES say). Each lease has its own token and safe deadline (from
        when this call was sent); fewer than ``n`` only when fewer are claimable.

        ``wait``: seconds to block while nothing is claimable (see ``claim``); returns as soon
        as at least one lease is won, or ``[]`` once the wait is over.
        """
        args = validation.owner(owner), self.checks.ttl(ttl), store_rules.batch(n)
        blocking = waiting.seconds(wait)
        steps: waiting.Steps[list[Lease]] = waiting.claim_next_steps(blocking > 0)
        return self._attempts(steps, lambda: self._claim_next_many_once(*args), blocking)

    def _claim_next_many_once(self, owner: str, ttl: float, n: int) -> list[Lease]:
        sent_at = self.clock.monotonic()
        found = telemetry.timed(self.characteristics.name, "claim_next_many",
                                lambda: self.backend.claim_next_many(owner, ttl, n))
        telemetry.claimed_many(self.characteristics.name, found)
        return [self.checks.stamped(lease, sent_at) for lease in found]

    def renew(self, lease: Lease, ttl: float | None = None) -> Lease:
        """Extend a current lease; raises StaleLease (audited) if it is no longer current."""
        lease = self.checks.lease(lease)
        seconds = self.checks.ttl(lease.ttl if ttl is None else ttl)
        sent_at = self.clock.monotonic()
        renewed = self._told_why(lambda: telemetry.timed(self.characteristics.name, "renew",
                                                         lambda: self.backend.renew(lease, seconds)))
        return self.checks.stamped(renewed, sent_at)

    def renew_many(self, leases: Iterable[Lease], ttl: float | None = None) -> list[Lease | LeaseError]:
        """Renew several current leases in as few round trips as the store allows (one on most
        stores), each judged alone: in order, each renewed lease (its safe deadline counted from
        when this call was sent) or the LeaseError its renewal alone ended in (``StaleLease``:
        refused and audited). Every lease is checked before anything is sent; an error of the
        whole call (the store unreachable) is raised."""
        renewals = self.checks.renewals(leases, ttl)
        sent_at = self.clock.monotonic()
        found = telemetry.timed(self.characteristics.name, "renew_many", lambda: self.backend.renew_many(renewals))
        telemetry.renewed_each(self.characteristics.name, found)
        return [self._explained(one) if isinstance(one, StaleLease) else one
                for one in self.checks.renewed(found, sent_at)]

    def complete(self, lease: Lease, result: str | bytes | None = None) -> None:
        """Mark the job completed; raises StaleLease (audited) if the lease is not current."""
        args = self.checks.lease(lease), self.checks.result(result)
        self._told_why(lambda: telemetry.timed(self.characteristics.name, "complete",
                                               lambda: self.backend.complete(*args)))
        self.checks.forget(args[0])

    def complete_many(self, leases: Iterable[Lease], results: Iterable[str | bytes | None] | None = None,
                      ) -> list[LeaseError | None]:
        """Complete several leases (up to 1,000, one per job) in as few round trips as the store
        allows, each judged alone: in order, None for each job completed, or the LeaseError its
        completion alone ended in (``StaleLease``: refused and audited alone). ``results``: one
        per lease, or None. Every lease and result is checked before anything is sent; an error
        of the whole call (the store unreachable) is raised."""
        completions = self.checks.completions(leases, results)
        found = telemetry.timed(self.characteristics.name, "complete_many",
                                lambda: self.backend.complete_many(completions))
        telemetry.completed_each(self.characteristics.name, found)
        for (lease, _), one in zip(completions, found, strict=True):
            if one is None:
                self.checks.forget(lease)
        return [self._explained(one) if isinstance(one, StaleLease) else one for one in found]

    def release(self, lease: Lease) -> None:
        """Give the job back unfinished, so it can be claimed at once; the claim's attempt is
        given back too (the worker did not try)."""
        lease = self.checks.lease(lease)
        self._told_why(lambda: telemetry.timed(self.characteristics.name, "release",
                                               lambda: self.backend.release(lease)))
        self.checks.forget(lease)

    def fail(self, lease: Lease, error: str | None = None, *, retry_in: float | None = None) -> None:
        """Give the job back as failed: claimable again after ``retry_in`` seconds of store
        time, or after the store's backoff for its attempts (``retry_base * retry_factor **
        (attempts - 1)``, at most ``retry_max``, jittered to between half and all of it); parked
        if it was the job's last attempt. ``error`` is kept with the job (``last_error``).
        Raises StaleLease (audited, op ``fail``) if the lease is not current."""
        args = self.checks.lease(lease), store_rules.error(error), self.lifecycle.retry(
            None if retry_in is None else store_rules.delay("retry_in", retry_in))
        self._told_why(lambda: telemetry.timed(self.characteristics.name, "fail", lambda: self.backend.fail(*args)))
        self.checks.forget(args[0])

    def _told_why(self, call: Callable[[], T]) -> T:
        """``call()``; a refusal of a lease an operator ended says so (one history read, made
        only for a refusal that says the lease ran out)."""
        try:
            return call()
        except StaleLease as exc:
            told = self._explained(exc)
            if told is exc:
                raise
            raise told from None

    def _explained(self, refused: StaleLease) -> StaleLease:
        """``refused``, naming the operator who ended the lease where one did."""
        if not store_rules.may_be_operator_ended(refused):
            return refused
        try:
            latest = self.backend.history(refused.rejection.job_id, None, 1)
        except LeaseError:
            return refused  # the refusal is the answer; who ended the lease is a detail
        return store_rules.explained(refused, latest)

    def hold(self, job_id: str, owner: str, ttl: float, *, wait: float | None = None) -> HeldLease:
        """Claim a job and keep renewing it in the background; use it as a context manager."""
        epoch = self.backend.link().epoch  # before the claim is sent, like its deadline
        return self._hold_claimed(self.claim(job_id, owner, ttl, wait=wait), epoch)

    def hold_next(self, owner: str, ttl: float, *, wait: float | None = None) -> HeldLease | None:
        """``claim_next`` and hold the lease it gives, or None when nothing is claimable."""
        epoch = self.backend.link().epoch
        lease = self.claim_next(owner, ttl, wait=wait)
        return None if lease is None else self._hold_claimed(lease, epoch)

    def hold_next_many(self, owner: str, ttl: float, n: int, *, wait: float | None = None) -> list[HeldLease]:
        """``claim_next_many`` and hold every lease it gives (renewed by this store's one
        renewer, in batches), ``[]`` when nothing is claimable."""
        epoch = self.backend.link().epoch
        leases = self.claim_next_many(owner, ttl, n, wait=wait)
        held: list[HeldLease] = []
        for i, lease in enumerate(leases):
            try:
                held.append(self._hold_claimed(lease, epoch))
            except LeaseError:  # the store closed meanwhile: the rest go back too
                for rest in leases[i + 1:]:
                    with contextlib.suppress(LeaseError):
                        self.release(rest)
                raise
        return held

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
        held = HeldLease(self, self.checks.held_lease(lease), _link_epoch)
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
        args = store_rules.since(since), validation.limit(limit)
        if job_id is None:
            return self.backend.rejections(*args)
        return self.backend.job_rejections(validation.job_id(job_id), *args)

    def history(self, job_id: str | None = None, since: float | None = None,
                limit: int | None = None) -> list[HistoryEvent]:
        """Accepted claims, renewals, completions ... oldest first, with bounded retention."""
        job = None if job_id is None else validation.job_id(job_id)
        return self.backend.history(job, store_rules.since(since), validation.limit(limit))

    def summary(self, soon: float = 30.0) -> Summary:
        """Jobs counted by state now (store time), leases ending within ``soon`` seconds, and
        rejections in the last hour."""
        seconds = store_rules.soon(soon)
        return self.backend.summary(self.backend.now(), seconds)

    def page(self, *, states: Iterable[JobState | str] | None = None, job: str | None = None,
             owner: str | None = None, order: str = "expiry", offset: int = 0,
             limit: int = 50) -> JobPage:
        """One page of jobs, for listings that must not load every job.

        ``states`` keeps jobs in any of those states (judged by the store's clock now); ``job``
        and ``owner`` keep those whose id or owner contains the text (ASCII case ignored).
        ``order`` is ``"expiry"`` (soonest lease end first, jobs without a lease last, then by
        id) or ``"job"`` (by id).
        """
        query = store_rules.page(states, job, owner, order, offset, limit)
        return self.backend.page(self.backend.now(), *query)

    def watch(self, stop: threading.Event | None = None, interval: float = 1.0) -> Iterator[Change]:
        """Changes to jobs and new rejections until ``stop`` is set."""
        seconds = store_rules.interval(interval)
        return self.backend.watch(stop or threading.Event(), seconds)

    def now(self) -> float:
        """The store's clock, seconds since the epoch."""
        return self.backend.now()

    def health(self) -> dict[str, Any]:
        """The backend's facts, the ``durability`` it declares (a volatile store says so), and
        ``warnings`` about this connection when there are any."""
        return store_rules.health(self.backend.health(), self.backend.characteristics, self.warnings)

    # -- operators and destinations ------------------------------------------------------
    def force_expire(self, job_id: str, *, token: int | None = None, actor: str | None = None) -> None:
        """End a job's current lease now, so it can be claimed again (an operator action).

        ``token``: the token the operator confirmed; if the job's current token is another
        (claimed again since the operator looked), nothing changes and ``TokenChanged`` is
        raised. ``actor`` names the operator; history records it as the owner of the EXPIRE
        event. A holder whose lease is ended this way can still act until its next renewal or
        its safe deadline: fencing at the destination is what protects the effects then.
        """
        self.backend.force_expire(validation.job_id(job_id), store_rules.actor(actor),
                                  None if token is None else validation.token(token))

    def requeue(self, job_id: str, *, actor: str | None = None, delay: float = 0.0, token: int | None = None) -> None:
        """Make a parked, scheduled, pending or expired job pending again with its attempts
        reset, claimable after ``delay`` seconds of store time (an operator action, audited in
        history with ``actor``). A completed job is submitted again instead (JobCompleted); a
        live lease is ended first with ``force_expire`` (AlreadyClaimed). ``token``: as
        ``force_expire``'s."""
        self.backend.requeue(validation.job_id(job_id), store_rules.actor(actor), store_rules.delay("delay", delay),
                             None if token is None else validation.token(token))

    def report_rejection(self, job_id: str, owner: str, token: int, *, resource: str,
                         highest: int, reason: str = "") -> Rejection:
        """Add a rejection seen at a fenced destination to this store's audit.

        Every field is checked like a claim's arguments and bounded (``reason`` to 512
        characters), so the record fits every backend's largest write.
        """
        checked = store_rules.destination_rejection(job_id, owner, token, resource, highest, reason)
        rejection = dataclasses.replace(checked, at=self.now())
        self.backend.record_rejection(rejection)
        telemetry.rejected(self.characteristics.name, Op.EFFECT.value, Reason.STALE_TOKEN.value)  # bounded labels
        return rejection

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """End every lease still held (each is lost at once, ``lost`` set and ``on_lost``
        callbacks run, then given back within CLOSE_WAIT seconds), close the backend."""
        self._renewer.close()
        self._changes.close()
        self.backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<tenure.Store {self.url or self.characteristics.name}>"

