"""``etcd://`` for tenure.aio: the protocol's steps (``AsyncRecordBackend``) over etcd's own
transaction, its requests awaited in the event loop on ``grpc.aio`` channels
(``client.AioConnection``), no thread per call.

``AsyncEtcdTransaction`` is ``EtcdTransaction`` with one difference: where the sync transaction
runs a read's generator there and then (``answer``), this one awaits the same generator in the
loop, the step suspended meanwhile (``tenure.aio.bridge``). The commit is the same generator
(``committing``), awaited. So every request, guess and retry is
the sync backend's: a claim, renew or complete costs the same round trips, each awaited. A
claim's etcd lease is the same ``Context`` and ``EtcdLeases`` code, awaited.

Queries (get, jobs, rejections, history, summary, page, watch, health) and closing go to the
sync backend in one worker thread per store (``ThreadedBackend``), for now; ``now`` is this
machine's clock, read in the loop.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TypeVar

from tenure.aio import bridge
from tenure.aio.backend import AsyncBackend
from tenure.aio.record_backend import AsyncRecordBackend
from tenure.backends.etcd import claims as etcd_claims
from tenure.backends.etcd import holders as etcd_holders
from tenure.backends.etcd.backend import EtcdBackend
from tenure.backends.etcd.client import AioConnection, EtcdIo
from tenure.backends.etcd.leases import etcd_ttl
from tenure.backends.etcd.transaction import Context, EtcdTransaction, Parts
from tenure.core import steps
from tenure.core.clock import Clock
from tenure.core.errors import BackendUnavailable, LeaseError
from tenure.core.options import Options, StoreURL
from tenure.core.record_transaction import Transaction
from tenure.core.records import JobRecord, Lease

T = TypeVar("T")


class AsyncEtcdTransaction(EtcdTransaction):
    def __init__(self, parts: Parts, now: float, fresh: bool, context: Context | None,
                 aio: AioConnection) -> None:
        super().__init__(parts, now, fresh, context)
        self._aio = aio

    def answer(self, io: EtcdIo[T]) -> T:
        return bridge.await_only(self._aio.run(io))

    async def commit_async(self) -> None:
        await self._aio.run(self.committing())


class AsyncEtcdBackend(AsyncRecordBackend):
    sync: EtcdBackend

    def __init__(self, sync: EtcdBackend) -> None:
        super().__init__(sync)
        self.io = "native: grpc.aio requests awaited in the loop; queries in one worker thread per store"
        self._aio: AioConnection | None = None

    @classmethod
    def from_url(cls, url: StoreURL, options: Options, clock: Clock | None) -> AsyncEtcdBackend:
        return cls(EtcdBackend.from_url(url, options, clock))

    async def open(self) -> None:
        self._aio = AioConnection(self.sync.parts.conn)  # grpc.aio channels belong to this loop

    @property
    def aio(self) -> AioConnection:
        if self._aio is None:
            raise BackendUnavailable("this etcd store is not open")
        return self._aio

    async def now(self) -> float:
        self._check_open()
        return self.sync.now()  # this machine's clock: no I/O

    def transaction(self, fresh: bool = False,
                    context: Context | None = None) -> contextlib.AbstractAsyncContextManager[Transaction]:
        return self._transaction(fresh, context)

    def _within(self, context: Context) -> Callable[[bool], contextlib.AbstractAsyncContextManager[Transaction]]:
        """The transactions of one operation, sharing ``context``."""
        return functools.partial(self.transaction, context=context)

    @contextlib.asynccontextmanager
    async def _transaction(self, fresh: bool, context: Context | None) -> AsyncIterator[Transaction]:
        tx = AsyncEtcdTransaction(self.sync.parts, self.sync.now(), fresh, context, self.aio)
        yield tx
        await tx.commit_async()

    @contextlib.asynccontextmanager
    async def _claiming(self, ttl: float) -> AsyncIterator[Context]:
        """``EtcdBackend._claiming``, awaited: the same ``EtcdLeases`` code."""
        leases, aio = self.sync.parts.leases, self.aio  # the connection even if closed meanwhile
        claiming = leases.claiming(etcd_ttl(ttl))
        try:
            yield Context(claiming)
        except BaseException as exc:
            await aio.run(leases.claimed(claiming, exc))
            raise
        await aio.run(leases.claimed(claiming, None))

    async def claim(self, job_id: str, owner: str, ttl: float, *, max_attempts: int | None = None) -> Lease:
        async with self._claiming(ttl) as context:
            return await self._run(steps.claim(job_id, owner, ttl, max_attempts), self._within(context))

    async def claim_next(self, owner: str, ttl: float) -> Lease | None:
        async with self._claiming(ttl) as context:
            return await self._run(steps.claim_next(owner, ttl), self._within(context))

    async def renew_many(self, renewals: Sequence[steps.Renewal]) -> list[Lease | LeaseError]:
        """The sync backend's ``renew_many``, awaited: the same ``holders`` code."""
        found = await self.aio.run(etcd_holders.changing(self.sync.parts, self.sync.now(),
                                                         [steps.renew(lease, ttl) for lease, ttl in renewals], {}))
        alone = [renewal for renewal, one in zip(renewals, found, strict=True) if one is None]
        return etcd_holders.merged(found, await AsyncBackend.renew_many(self, alone))

    async def claim_batch(self, owner: str, ttl: float, n: int, carried: object = None) -> steps.Claimed | steps.Lost:
        """The sync backend's ``claim_batch``, awaited: the same ``claims`` code (a request's
        own generator, no step)."""
        self._check_open()
        aio = self.aio  # the connection even if closed meanwhile
        request = etcd_claims.Request(self.sync.parts, self.sync.now(), owner, ttl, etcd_claims.carried_index(carried))
        try:
            found = await aio.run(request.claiming(n))
        except BaseException as exc:
            await aio.run(request.finish(exc))
            raise
        await aio.run(request.finish(None))
        return found.answer

    async def complete_many(self, completions: Sequence[steps.Completion]) -> list[LeaseError | None]:
        """The sync backend's ``complete_many``, awaited: the same ``holders`` code."""
        found = await self.aio.run(etcd_holders.changing(
            self.sync.parts, self.sync.now(), [steps.complete(lease, result) for lease, result in completions], None))
        alone = [completion for completion, one in zip(completions, found, strict=True) if one is None]
        return [None if isinstance(one, JobRecord) else one
                for one in etcd_holders.merged(found, await AsyncBackend.complete_many(self, alone))]

    async def close(self) -> None:
        if self._aio is not None:
            aio, self._aio = self._aio, None
            await aio.close()
        await super().close()
