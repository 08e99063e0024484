"""``zk://`` for tenure.aio (docs/asyncio.md): the protocol's steps (``AsyncRecordBackend``)
over ``ZkTransaction``, whose reads (``answer``) here are awaited in the loop, the step
suspended meanwhile (``tenure.aio.bridge``), and whose commit is the same ``ZkIo``, awaited
(``calls.run_async``): the same requests, guesses and round trips as the sync backend, no
thread per call. Queries and closing go to the sync backend in one worker thread per store
(``ThreadedBackend``), for now.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

from tenure.aio import bridge
from tenure.aio.record_backend import AsyncRecordBackend
from tenure.backends.zookeeper import calls
from tenure.backends.zookeeper.backend import ZooKeeperBackend
from tenure.backends.zookeeper.calls import ZkIo
from tenure.backends.zookeeper.transaction import Parts, ZkTransaction
from tenure.core.clock import Clock
from tenure.core.options import Options, StoreURL
from tenure.core.record_transaction import Transaction

T = TypeVar("T")


class AsyncZkTransaction(ZkTransaction):
    def __init__(self, parts: Parts, fresh: bool) -> None:
        super().__init__(parts, fresh)
        self._timeout = parts.session.config.timeout

    def answer(self, io: ZkIo[T]) -> T:
        return bridge.await_only(calls.run_async(io, self._timeout))

    async def commit_async(self) -> None:
        await calls.run_async(self.committing(), self._timeout)


class AsyncZooKeeperBackend(AsyncRecordBackend):
    sync: ZooKeeperBackend

    def __init__(self, sync: ZooKeeperBackend) -> None:
        super().__init__(sync)
        self.io = "native: kazoo's *_async requests awaited in the loop; queries in one worker thread per store"

    @classmethod
    def from_url(cls, url: StoreURL, options: Options, clock: Clock | None) -> AsyncZooKeeperBackend:
        return cls(ZooKeeperBackend.from_url(url, options, clock))

    async def now(self) -> float:
        """The leader's clock, from a write of our clock znode, awaited (claims that wait ask)."""
        self._check_open()
        session = self.sync.session
        return (await calls.run_async(session.stamping(), session.config.timeout))[0]

    @contextlib.asynccontextmanager
    async def transaction(self, fresh: bool = False) -> AsyncIterator[Transaction]:
        tx = AsyncZkTransaction(self.sync.parts, fresh)
        yield tx
        await tx.commit_async()
