"""``tenure.aio.connect``: the same URLs and options as ``tenure.connect``, parsed by the same code.

Which I/O each backend uses in an event loop (docs/asyncio.md says why):

- ``postgresql://``: psycopg's asyncio connections and ``AsyncConnectionPool``, natively;
- ``sqlite://`` and third-party backends: the sync backend in one worker thread per store
  (``ThreadedBackend``), as aiosqlite does;
- ``memory://``: the protocol's steps (``AsyncRecordBackend``) over the sync backend's
  transaction, run in the loop, as it never waits on I/O;
- ``zk://``: the protocol's steps over ZooKeeper's transaction, kazoo's ``*_async`` requests
  awaited in the loop (``tenure.backends.zookeeper.aio``); its queries in one worker thread;
- ``etcd://``: the protocol's steps over etcd's transaction, its gRPC requests on ``grpc.aio``
  channels awaited in the loop (``tenure.backends.etcd.aio``); its queries in one worker thread.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Generator
from types import TracebackType
from typing import Any

from tenure.aio.backend import AsyncBackend, ThreadedBackend
from tenure.aio.record_backend import InlineRecordBackend
from tenure.aio.store import AsyncStore
from tenure.core.backend import Backend, RecordBackend
from tenure.core.clock import Clock
from tenure.core.options import Options, StoreURL
from tenure.core.registry import open_backend

# scheme -> (module, class) of a backend with native asyncio I/O
NATIVE: dict[str, tuple[str, str]] = {
    "postgresql": ("tenure.backends.postgres.aio", "AsyncPostgresBackend"),
    "postgres": ("tenure.backends.postgres.aio", "AsyncPostgresBackend"),
    "zk": ("tenure.backends.zookeeper.aio", "AsyncZooKeeperBackend"),
    "zookeeper": ("tenure.backends.zookeeper.aio", "AsyncZooKeeperBackend"),
    "etcd": ("tenure.backends.etcd.aio", "AsyncEtcdBackend"),
}
INLINE = ("memory",)  # backends that never wait on I/O: called in the loop, no thread


def _build(cls: type[Backend], url: StoreURL, options: Options, clock: Clock | None) -> Backend:
    """``open_backend``'s builder: the async backend travels inside ``Opened`` as its backend."""
    if url.scheme in NATIVE:
        module, name = NATIVE[url.scheme]
        native: Any = getattr(importlib.import_module(module), name)
        return native.from_url(url, options, clock)  # type: ignore[no-any-return]
    return cls.from_url(url, options, clock)


async def _open(url: str, options: dict[str, Any]) -> AsyncStore:
    # Parsing and building a sync backend may touch files or the network: off the loop.
    opened = await asyncio.to_thread(open_backend, url, options, _build)
    built: Any = opened.backend
    backend: AsyncBackend = built if isinstance(built, AsyncBackend) else _serve(url, built)
    try:
        await backend.open()
        kwargs: dict[str, Any] = {} if opened.clock is None else {"clock": opened.clock}
        return AsyncStore(backend, drift_margin=opened.drift_margin, url=opened.url,
                          warnings=opened.warnings, lifecycle=opened.lifecycle, **kwargs)
    except BaseException:
        await backend.close()
        raise


def _serve(url: str, sync: Backend) -> AsyncBackend:
    """A sync backend in the loop: the protocol's steps in it (memory), or a worker thread."""
    if url.partition(":")[0].lower() not in INLINE:
        return ThreadedBackend(sync)
    return InlineRecordBackend(sync) if isinstance(sync, RecordBackend) else ThreadedBackend(sync, inline=True)


class Connecting:
    """``await tenure.aio.connect(url)`` or ``async with tenure.aio.connect(url) as store``."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self._url = url
        self._options = options
        self._store: AsyncStore | None = None

    def __await__(self) -> Generator[Any, None, AsyncStore]:
        return _open(self._url, self._options).__await__()

    async def __aenter__(self) -> AsyncStore:
        self._store = await _open(self._url, self._options)
        return self._store

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        assert self._store is not None
        await self._store.close()


def connect(url: str, **options: Any) -> Connecting:
    """Open a store for an event loop; URLs and options as ``tenure.connect``'s."""
    return Connecting(url, options)
