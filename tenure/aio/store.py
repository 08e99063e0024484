"""``AsyncStore``: ``tenure.Store`` for asyncio programs, the same values, errors and checks.

Every argument is checked by ``tenure.core.store_rules`` and every lease stamped there, as in the
sync store; what differs is only that backend calls are awaited.

Cancellation. A claim (``claim``, ``claim_next``, ``hold``) cancelled while its request is on
its way may still land: the store cannot tell the request to undo itself. So a cancelled
claim lets its request finish in the background and, if it won a lease, releases that lease
as soon as the answer arrives; the caller gets ``CancelledError`` and holds nothing. Only if
that release fails too (the store unreachable) does the lease block others, and then only
until its TTL runs out, as for any holder that died. Any other cancelled operation either
happened or did not, exactly as if the connection had dropped after sending it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator, Iterable
from types import TracebackType
from typing import Any, TypeVar

from tenure.aio.backend import AsyncBackend
from tenure.aio.holding import AsyncHeldLease, AsyncRenewer, end_on_close
from tenure.aio.waiting import AsyncChanges, AsyncWaiter
from tenure.core import store_rules, telemetry, validation, waiting
from tenure.core.backend import Characteristics, Link
from tenure.core.clock import SYSTEM_CLOCK, Clock
from tenure.core.errors import LeaseError, StaleLease
from tenure.core.holding import CLOSE_WAIT
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
from tenure.core.store_rules import DEFAULT_DRIFT_MARGIN, Checks

log = logging.getLogger("tenure.aio")
T = TypeVar("T")


class AsyncStore:
    """A lease store for one event loop; open it with ``tenure.aio.connect``."""

    def __init__(self, backend: AsyncBackend, *, clock: Clock = SYSTEM_CLOCK,
                 drift_margin: float = DEFAULT_DRIFT_MARGIN, url: str = "",
                 warnings: tuple[str, ...] = (), lifecycle: Lifecycle = DEFAULT_LIFECYCLE) -> None:
        self.checks = Checks(backend.characteristics, drift_margin)
        self.lifecycle = lifecycle  # attempts and retry backoff when a caller does not say
        self.backend = backend
        self.clock = clock
        self.drift_margin = self.checks.drift_margin
        self.url = url  # redacted: safe to show
        self.warnings = warnings
        self._changes = AsyncChanges(backend)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._renewals: set[asyncio.Task[Any]] = set()
        self._held: weakref.WeakSet[AsyncHeldLease] = weakref.WeakSet()  # close() ends those still held
        self._renewer = AsyncRenewer(self)
        self._closed = False

    @property
    def characteristics(self) -> Characteristics:
        return self.backend.characteristics

    @property
    def name(self) -> str:
        return self.characteristics.name

    def link(self) -> Link:
        return self.backend.link()

    def background(self, work: Coroutine[Any, Any, T], *, renewal: bool = False) -> asyncio.Task[T]:
        """Run ``work`` as a task this store keeps a reference to until it ends (asyncio keeps
        only weak ones): ``close()`` cancels renewal tasks and waits for the others."""
        task = asyncio.get_running_loop().create_task(work)
        tasks = self._renewals if renewal else self._tasks
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return task

    async def _measured(self, operation: str, call: Awaitable[T]) -> T:
        return await telemetry.timed_async(self.name, operation, call)

    # -- the protocol ----------------------------------------------------------------------
    async def submit(self, job_id: str, *, actor: str | None = None, max_attempts: int | None = None,
                     delay: float = 0.0) -> None:
        """Make a job pending; a no-op on a pending, leased or parked job; a new run of a
        completed one (see ``tenure.Store.submit``)."""
        await self.backend.submit_many([validation.job_id(job_id)], store_rules.actor(actor),
                                       **self._new_run(max_attempts, delay))

    async def submit_many(self, job_ids: Iterable[str], *, max_attempts: int | None = None,
                          delay: float = 0.0) -> None:
        """Submit several jobs at once; all are validated before any is written."""
        await self.backend.submit_many(store_rules.job_ids(job_ids), **self._new_run(max_attempts, delay))

    def _new_run(self, max_attempts: object, delay: object) -> dict[str, Any]:
        return self.lifecycle.run(store_rules.max_attempts(max_attempts), store_rules.delay("delay", delay))

    async def claim(self, job_id: str, owner: str, ttl: float, *, wait: float | None = None) -> Lease:
        """Claim a job that is unowned or whose lease expired by the store's clock (see
        ``tenure.Store.claim``; cancellation: this module's docstring)."""
        args = self.checks.claim(job_id, owner, ttl)
        blocking = waiting.seconds(wait)
        return await self._attempts(waiting.claim_steps(blocking > 0), lambda: self._claim_once(*args), blocking)

    async def _attempts(self, steps: waiting.Steps[T], attempt: Callable[[], Awaitable[T]], wait: float) -> T:
        """Carry out a claim's steps (``tenure.core.waiting``), as ``Store`` does, awaiting."""
        waiter: AsyncWaiter | None = None
        step = next(steps)
        while True:
            try:
                if isinstance(step, waiting.Attempt):
                    if self._renewer.active:
                        await self._renewer.yield_to_renewals()  # the leases held go first
                    try:
                        outcome: Any = await attempt()
                    except LeaseError as exc:
                        step = steps.throw(exc)
                        continue
                elif isinstance(step, waiting.StartWaiting):
                    outcome = waiter = AsyncWaiter(self._changes, wait)
                elif isinstance(step, waiting.Pause):
                    assert waiter is not None
                    outcome = await waiter.pause(step.due_in)
                elif isinstance(step, waiting.Sleep):
                    await asyncio.sleep(step.seconds)
                    outcome = None
                elif isinstance(step, waiting.NextDue):
                    outcome = await self.backend.next_due()
                else:
                    outcome = await self.backend.now()
                step = steps.send(outcome)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    async def _claim_once(self, job_id: str, owner: str, ttl: float) -> Lease:
        sent_at = self.clock.monotonic()  # after any wait: the deadline counts from the send
        lease = await self._not_left_behind(self._measured("claim", self.backend.claim(
            job_id, owner, ttl, **self.lifecycle.creating)))
        return self.checks.stamped(lease, sent_at)

    async def claim_next(self, owner: str, ttl: float, *, wait: float | None = None) -> Lease | None:
        """Claim some pending or expired job (never a completed one), or return None."""
        args = validation.owner(owner), self.checks.ttl(ttl)
        blocking = waiting.seconds(wait)
        steps: waiting.Steps[Lease | None] = waiting.claim_next_steps(blocking > 0)
        return await self._attempts(steps, lambda: self._claim_next_once(*args), blocking)

    async def _claim_next_once(self, owner: str, ttl: float) -> Lease | None:
        sent_at = self.clock.monotonic()
        lease = await self._not_left_behind(self._measured("claim_next", self.backend.claim_next(owner, ttl)))
        return None if lease is None else self.checks.stamped(lease, sent_at)

    async def claim_next_many(self, owner: str, ttl: float, n: int, *, wait: float | None = None) -> list[Lease]:
        """Claim up to ``n`` (1 to 1,000) jobs in as few round trips as the store allows (see
        ``tenure.Store.claim_next_many``; cancellation: every lease won is released)."""
        args = validation.owner(owner), self.checks.ttl(ttl), store_rules.batch(n)
        blocking = waiting.seconds(wait)
        steps: waiting.Steps[list[Lease]] = waiting.claim_next_steps(blocking > 0)
        return await self._attempts(steps, lambda: self._claim_next_many_once(*args), blocking)

    async def _claim_next_many_once(self, owner: str, ttl: float, n: int) -> list[Lease]:
        sent_at = self.clock.monotonic()
        found = await self._not_left_behind(self._measured("claim_next_many",
                                                           self.backend.claim_next_many(owner, ttl, n)))
        telemetry.claimed_many(self.name, found)
        return [self.checks.stamped(lease, sent_at) for lease in found]

    async def _not_left_behind(self, claim: Coroutine[Any, Any, T]) -> T:
        """Await a claim; if the caller is cancelled meanwhile, release what it wins."""
        sent = self.background(claim)
        try:
            return await asyncio.shield(sent)
        except asyncio.CancelledError:
            sent.add_done_callback(self._release_orphan)
            raise

    def _release_orphan(self, sent: asyncio.Task[Any]) -> None:
        if sent.cancelled() or sent.exception() is not None or sent.result() is None:
            return  # nothing was won
        won: Lease | list[Lease] = sent.result()
        for lease in won if isinstance(won, list) else [won]:
            log.info("a cancelled claim won %r (token %d): releasing it", lease.job_id, lease.token)
            self.background(self._release_quietly(lease))

    async def _release_quietly(self, lease: Lease) -> None:
        try:
            await self.release(lease)
        except Exception as exc:  # it expires by itself after its TTL
            log.warning("releasing %r after a cancelled claim failed: %s", lease.job_id, exc)

    async def renew(self, lease: Lease, ttl: float | None = None) -> Lease:
        """Extend a current lease; raises StaleLease (audited) if it is no longer current."""
        lease = self.checks.lease(lease)
        seconds = self.checks.ttl(lease.ttl if ttl is None else ttl)
        sent_at = self.clock.monotonic()
        renewed = await self._told_why(self._measured("renew", self.backend.renew(lease, seconds)))
        return self.checks.stamped(renewed, sent_at)

    async def renew_many(self, leases: Iterable[Lease], ttl: float | None = None) -> list[Lease | LeaseError]:
        """Renew several current leases in as few round trips as the store allows, each judged
        alone; see ``tenure.Store.renew_many``."""
        renewals = self.checks.renewals(leases, ttl)
        sent_at = self.clock.monotonic()
        found = await self._measured("renew_many", self.backend.renew_many(renewals))
        telemetry.renewed_each(self.name, found)
        return [await self._explained(one) if isinstance(one, StaleLease) else one
                for one in self.checks.renewed(found, sent_at)]

    async def complete(self, lease: Lease, result: str | bytes | None = None) -> None:
        """Mark the job completed; raises StaleLease (audited) if the lease is not current."""
        checked, data = self.checks.lease(lease), self.checks.result(result)
        await self._told_why(self._measured("complete", self.backend.complete(checked, data)))
        self.checks.forget(checked)

    async def complete_many(self, leases: Iterable[Lease], results: Iterable[str | bytes | None] | None = None,
                            ) -> list[LeaseError | None]:
        """Complete several leases, each judged alone (see ``tenure.Store.complete_many``)."""
        completions = self.checks.completions(leases, results)
        found = await self._measured("complete_many", self.backend.complete_many(completions))
        telemetry.completed_each(self.name, found)
        for (lease, _), one in zip(completions, found, strict=True):
            if one is None:
                self.checks.forget(lease)
        return [await self._explained(one) if isinstance(one, StaleLease) else one for one in found]

    async def release(self, lease: Lease) -> None:
        """Give the job back unfinished, so it can be claimed at once."""
        checked = self.checks.lease(lease)
        await self._told_why(self._measured("release", self.backend.release(checked)))
        self.checks.forget(checked)

    async def fail(self, lease: Lease, error: str | None = None, *, retry_in: float | None = None) -> None:
        """Give the job back as failed (see ``tenure.Store.fail``)."""
        checked, text = self.checks.lease(lease), store_rules.error(error)
        retry = self.lifecycle.retry(None if retry_in is None else store_rules.delay("retry_in", retry_in))
        await self._told_why(self._measured("fail", self.backend.fail(checked, text, retry)))
        self.checks.forget(checked)

    async def _told_why(self, call: Awaitable[T]) -> T:
        """As ``Store._told_why``: a refusal of a lease an operator ended says so."""
        try:
            return await call
        except StaleLease as exc:
            told = await self._explained(exc)
            if told is exc:
                raise
            raise told from None

    async def _explained(self, refused: StaleLease) -> StaleLease:
        """As ``Store._explained``: ``refused``, naming the operator who ended the lease."""
        if not store_rules.may_be_operator_ended(refused):
            return refused
        try:
            latest = await self.backend.history(refused.rejection.job_id, None, 1)
        except LeaseError:
            return refused
        return store_rules.explained(refused, latest)

    def hold(self, job_id: str, owner: str, ttl: float, *, wait: float | None = None) -> Holding:
        """Claim a job and keep renewing it in a task: ``async with store.hold(...) as held``
        (or ``held = await store.hold(...)`` and ``await held.release()`` yourself)."""
        args = self.checks.claim(job_id, owner, ttl)
        waiting.seconds(wait)  # refused here, like every bad argument, before anything is sent
        return Holding(self, args, wait)

    async def hold_next(self, owner: str, ttl: float, *, wait: float | None = None) -> AsyncHeldLease | None:
        """``claim_next`` and hold the lease it gives, or None when nothing is claimable."""
        epoch = self.link().epoch
        lease = await self.claim_next(owner, ttl, wait=wait)
        return None if lease is None else await self._hold_claimed(lease, epoch)

    async def hold_next_many(self, owner: str, ttl: float, n: int, *,
                             wait: float | None = None) -> list[AsyncHeldLease]:
        """``claim_next_many`` and hold every lease it gives (renewed by this store's one
        renewal task, in batches), ``[]`` when nothing is claimable."""
        epoch = self.link().epoch
        leases = await self.claim_next_many(owner, ttl, n, wait=wait)
        held: list[AsyncHeldLease] = []
        for i, lease in enumerate(leases):
            try:
                held.append(await self._hold_claimed(lease, epoch))
            except LeaseError:  # the store closed meanwhile: the rest go back too
                for rest in leases[i + 1:]:
                    await self._release_quietly(rest)
                raise
        return held

    async def _hold_claimed(self, lease: Lease, epoch: int) -> AsyncHeldLease:
        """Hold a lease just claimed; if it cannot be held (the store was closed meanwhile),
        give it back rather than leave the job blocked until the lease runs out."""
        try:
            return self.hold_lease(lease, _link_epoch=epoch)
        except LeaseError:
            with contextlib.suppress(LeaseError):
                await self.release(lease)
            raise

    def hold_lease(self, lease: Lease, *, _link_epoch: int | None = None) -> AsyncHeldLease:
        """Hold a lease this process already claimed (call it in the loop); stamped with its
        safe deadline by this store."""
        if self._closed:
            raise LeaseError("the store is closed")
        held = AsyncHeldLease(self, self.checks.held_lease(lease), _link_epoch)
        self._held.add(held)
        self._renewer.add(held)
        return held

    # -- reading -----------------------------------------------------------------------------
    async def get(self, job_id: str) -> JobStatus | None:
        return await self.backend.get(validation.job_id(job_id))

    def jobs(self) -> AsyncIterator[JobStatus]:
        """Every job, read a page at a time: ``async for status in store.jobs()``."""
        return self.backend.jobs()

    async def rejections(self, since: float | None = None, limit: int | None = None, *,
                         job_id: str | None = None) -> list[Rejection]:
        """Audited rejections, oldest first; with ``limit``, the most recent ones; with
        ``job_id``, that job's alone (read through an index where the store has one)."""
        args = store_rules.since(since), validation.limit(limit)
        if job_id is None:
            return await self.backend.rejections(*args)
        return await self.backend.job_rejections(validation.job_id(job_id), *args)

    async def history(self, job_id: str | None = None, since: float | None = None,
                      limit: int | None = None) -> list[HistoryEvent]:
        """Accepted claims, renewals, completions ... oldest first, with bounded retention."""
        job = None if job_id is None else validation.job_id(job_id)
        return await self.backend.history(job, store_rules.since(since), validation.limit(limit))

    async def summary(self, soon: float = 30.0) -> Summary:
        """Jobs counted by state now (store time); see ``tenure.Store.summary``."""
        seconds = store_rules.soon(soon)
        return await self.backend.summary(await self.backend.now(), seconds)

    async def page(self, *, states: Iterable[JobState | str] | None = None, job: str | None = None,
                   owner: str | None = None, order: str = "expiry", offset: int = 0,
                   limit: int = 50) -> JobPage:
        """One page of jobs; see ``tenure.Store.page``."""
        query = store_rules.page(states, job, owner, order, offset, limit)
        return await self.backend.page(await self.backend.now(), *query)

    def watch(self, interval: float = 1.0) -> AsyncIterator[Change]:
        """Changes to jobs and new rejections, until the ``async for`` is left."""
        return self.backend.watch(store_rules.interval(interval))

    async def now(self) -> float:
        """The store's clock, seconds since the epoch."""
        return await self.backend.now()

    async def health(self) -> dict[str, Any]:
        return store_rules.health(await self.backend.health(), self.backend.characteristics, self.warnings)

    # -- operators and destinations ------------------------------------------------------
    async def force_expire(self, job_id: str, *, token: int | None = None, actor: str | None = None) -> None:
        """End a job's current lease now (an operator action); see ``tenure.Store.force_expire``."""
        await self.backend.force_expire(validation.job_id(job_id), store_rules.actor(actor),
                                        None if token is None else validation.token(token))

    async def requeue(self, job_id: str, *, actor: str | None = None, delay: float = 0.0,
                      token: int | None = None) -> None:
        """Make a job that is not held pending again, attempts reset (see ``tenure.Store.requeue``)."""
        await self.backend.requeue(validation.job_id(job_id), store_rules.actor(actor),
                                   store_rules.delay("delay", delay),
                                   None if token is None else validation.token(token))

    async def report_rejection(self, job_id: str, owner: str, token: int, *, resource: str,
                               highest: int, reason: str = "") -> Rejection:
        """Add a rejection seen at a fenced destination to this store's audit."""
        checked = store_rules.destination_rejection(job_id, owner, token, resource, highest, reason)
        rejection = dataclasses.replace(checked, at=await self.now())
        await self.backend.record_rejection(rejection)
        telemetry.rejected(self.name, Op.EFFECT.value, Reason.STALE_TOKEN.value)  # bounded labels
        return rejection

    # -- lifetime ---------------------------------------------------------------------------
    async def close(self) -> None:
        """End every lease still held (each is lost at once, ``lost`` set and ``on_lost``
        callbacks run, then given back), stop renewals, give releases (of those leases and of
        cancelled claims) up to CLOSE_WAIT seconds to finish, close the backend."""
        if self._closed:
            return
        self._closed = True
        for release in end_on_close(list(self._held)):
            self.background(release)
        await self._changes.close()
        for task in list(self._renewals):
            task.cancel()
        if self._tasks:  # requests in flight, releases
            await asyncio.wait(set(self._tasks), timeout=CLOSE_WAIT)
        await self.backend.close()

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<tenure.aio.AsyncStore {self.url or self.name}>"


class Holding:
    """What ``AsyncStore.hold`` returns: ``async with`` it, or ``await`` it for the held lease."""

    def __init__(self, store: AsyncStore, args: tuple[str, str, float], wait: float | None) -> None:
        self._store = store
        self._args = args
        self._wait = wait
        self._held: AsyncHeldLease | None = None

    async def _hold(self) -> AsyncHeldLease:
        epoch = self._store.link().epoch  # before the claim is sent, like its deadline
        lease = await self._store.claim(*self._args, wait=self._wait)
        return await self._store._hold_claimed(lease, epoch)

    def __await__(self) -> Generator[Any, None, AsyncHeldLease]:
        return self._hold().__await__()

    async def __aenter__(self) -> AsyncHeldLease:
        self._held = await self._hold()
        return self._held

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        assert self._held is not None
        await self._held.__aexit__(kind, exc, tb)

