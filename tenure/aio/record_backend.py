"""``AsyncRecordBackend``: the record stores' protocol (``tenure.core.steps``) in an event loop.

The steps and their attempt rules are the sync ``RecordBackend``'s own; this driver differs only
in how it waits. A transaction is an async context manager (``transaction(fresh=)``) that
commits on leaving; a pause between attempts is ``asyncio.sleep``. A step runs once, in a
greenlet (``bridge.run``): a read the transaction must await I/O for awaits it with
``bridge.await_only``, which suspends the step there while the driver awaits the read in the
loop, and resumes it with the answer. So the steps stay plain functions shared with the sync
driver, and nothing a step did is undone or done again.

Queries (get, jobs, rejections, history, summary, page, watch, health) are the sync backend's,
served as ``ThreadedBackend`` serves them (in the loop, or one worker thread per store).
``InlineRecordBackend`` is the memory store's: its sync transaction, run in the loop, as it
never waits on I/O.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from tenure.aio import bridge
from tenure.aio.backend import AsyncBackend, ThreadedBackend
from tenure.core import contention, steps
from tenure.core.backend import RecordBackend
from tenure.core.errors import BackendUnavailable, CorruptRecord, LeaseError, Outraced
from tenure.core.lifecycle import Retry
from tenure.core.record_transaction import Transaction
from tenure.core.records import Lease, Rejection

R = TypeVar("R")
P = TypeVar("P")  # one lease's part of a batch
A = TypeVar("A")  # one lease's answer


class AsyncRecordBackend(ThreadedBackend):
    """The protocol over an async transaction; queries from the sync backend ``sync``."""

    sync: RecordBackend
    AWAITS_READS = True  # its transactions' reads await I/O: each step runs in a greenlet (``bridge``)

    def __init__(self, sync: RecordBackend, *, inline: bool = False,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        super().__init__(sync, inline=inline)
        self._sleep = sleep  # the pause between attempts; tests inject one that records it

    @abc.abstractmethod
    def transaction(self, fresh: bool = False) -> contextlib.AbstractAsyncContextManager[Transaction]:
        """Commit on normal exit, roll back on an exception (see ``RecordBackend.transaction``)."""

    async def _run(self, operation: steps.Operation[Any, R],
                   transactions: Callable[[bool], contextlib.AbstractAsyncContextManager[Transaction]] | None = None,
                   ) -> R:
        """``RecordBackend._run``, awaiting: the same ``steps.Attempts``."""
        self._check_open()
        opened = transactions or self.transaction
        attempts = steps.Attempts(operation)
        while True:
            attempt = attempts.next()
            if attempt.retry:
                await self._sleep(contention.pause(attempt.retry))
            tx: Transaction | None = None
            try:
                async with opened(attempt.fresh) as tx:
                    found = await bridge.run(attempts.step, tx) if self.AWAITS_READS else attempts.step(tx)
            except (steps.Reread, LeaseError) as exc:
                if attempts.retry_after(tx, exc):
                    continue
                raise
            if attempts.stuck(tx):
                return attempts.result(tx, found)

    async def submit_many(self, job_ids: list[str], actor: str | None = None, *, max_attempts: int | None = None,
                          delay: float = 0.0) -> None:
        for batch in self.sync.batches(job_ids, actor, max_attempts, delay):
            try:
                await self._run(batch.whole)
            except CorruptRecord:
                if not batch.alone:
                    raise
                for one in batch.alone:
                    await self._run(one)

    async def claim(self, job_id: str, owner: str, ttl: float, *, max_attempts: int | None = None) -> Lease:
        return await self._run(steps.claim(job_id, owner, ttl, max_attempts))

    async def claim_next(self, owner: str, ttl: float) -> Lease | None:
        return await self._run(steps.claim_next(owner, ttl))

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        return await self._run(steps.renew(lease, ttl))

    async def renew_many(self, renewals: Sequence[steps.Renewal]) -> list[Lease | LeaseError]:
        """``RecordBackend.renew_many``, awaiting: one transaction per batch."""
        return await self._each_batch(self.sync.renewal_batches(renewals), steps.renew_many,
                                      lambda batch: AsyncBackend.renew_many(self, batch))

    async def complete_many(self, completions: Sequence[steps.Completion]) -> list[LeaseError | None]:
        """``RecordBackend.complete_many``, awaiting: one transaction per batch."""
        if not self.sync.COMPLETES_IN_BATCHES:
            return await AsyncBackend.complete_many(self, completions)
        return await self._each_batch(self.sync.completion_batches(completions), steps.complete_many,
                                      lambda batch: AsyncBackend.complete_many(self, batch))

    async def _each_batch(self, batches: list[list[P]],
                          operation: Callable[[list[P]], steps.Operation[Any, list[A]]],
                          alone: Callable[[list[P]], Awaitable[list[A]]]) -> list[A | LeaseError]:
        """``RecordBackend._each_batch``, awaiting."""
        found: list[A | LeaseError] = []
        for batch in batches:
            try:
                done: list[A] = await self._run(operation(batch))
                found.extend(done)
            except Outraced:
                found.extend(await alone(batch))
            except BackendUnavailable as exc:  # this batch's leases only: earlier ones are written
                found.extend([exc] * len(batch))
        return found

    async def claim_next_many(self, owner: str, ttl: float, n: int) -> list[Lease]:
        """``RecordBackend.claim_next_many``, awaiting."""
        if not self.sync.CLAIMS_IN_BATCHES:
            return await AsyncBackend.claim_next_many(self, owner, ttl, n)
        claims = steps.Claims(n, self.sync.CLAIM_BATCH)
        while asked := claims.next():
            if claims.retry:
                await self._sleep(contention.pause(claims.retry))
            try:
                claims.answered(await self.claim_batch(owner, ttl, asked, claims.carried))
            except LeaseError as exc:
                claims.failed(exc)
        return claims.found

    async def claim_batch(self, owner: str, ttl: float, n: int, carried: object = None) -> steps.Claimed | steps.Lost:
        """``RecordBackend.claim_batch``, awaiting."""
        return await self._run(self.sync.claim_operation(owner, ttl, n))

    async def complete(self, lease: Lease, result: bytes | None) -> None:
        await self._run(steps.complete(lease, result))

    async def release(self, lease: Lease) -> None:
        await self._run(steps.release(lease))

    async def fail(self, lease: Lease, error: str | None, retry: Retry) -> None:
        await self._run(steps.fail(lease, error, retry))

    async def requeue(self, job_id: str, actor: str | None = None, delay: float = 0.0,
                      token: int | None = None) -> None:
        await self._run(steps.requeue(job_id, actor, delay, token))

    async def force_expire(self, job_id: str, actor: str | None = None, token: int | None = None) -> None:
        await self._run(steps.force_expire(job_id, actor, token))

    async def record_rejection(self, rejection: Rejection) -> None:
        await self._run(steps.record_rejection(rejection))


class InlineRecordBackend(AsyncRecordBackend):
    """A store that never waits on I/O (memory): its sync transaction, in the loop."""

    AWAITS_READS = False  # its steps called as they are: a greenlet cost a claim+complete 7 of 70 us

    def __init__(self, sync: RecordBackend, *,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        super().__init__(sync, inline=True, sleep=sleep)

    @contextlib.asynccontextmanager
    async def transaction(self, fresh: bool = False) -> AsyncIterator[Transaction]:
        with self.sync.transaction(fresh) as tx:  # held across no await: the step is sync
            yield tx
