"""History and rejections as sequential znodes, added inside the multi of the step they record.

Retention is bounded: when a sequence number reaches a multiple of ``min(TRIM_EVERY,
retention)``, the oldest znodes beyond ``retention`` are deleted, so at most twice
``retention`` (and at most ``retention + TRIM_EVERY``) stay.
Reading goes newest first in pipelined batches and stops as soon as ``limit`` is met.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from kazoo.exceptions import NoNodeError

from tenure.backends import zookeeper_layout as zl
from tenure.backends.zookeeper_config import mapped_errors
from tenure.core.records import HistoryEvent, Rejection

if TYPE_CHECKING:
    from tenure.backends.zookeeper import ZooKeeperBackend

TRIM_EVERY = 256
_BATCH = 200
_TRIM_MULTI = 1000  # deletes per multi when trimming
T = TypeVar("T", HistoryEvent, Rejection)


class Audit:
    def __init__(self, backend: ZooKeeperBackend) -> None:
        self._b = backend
        self._events = backend.layout.events
        self._rejections = backend.layout.rejections
        self._every = min(TRIM_EVERY, backend.config.retention)

    def add_event(self, tx: Any, event: HistoryEvent) -> None:
        tx.create(f"{self._events}/e-", zl.dump_event(event), sequence=True)

    def add_rejection(self, tx: Any, rejection: Rejection) -> None:
        tx.create(f"{self._rejections}/r-", zl.dump_rejection(rejection), sequence=True)

    def trim(self, results: list[Any]) -> None:
        """After a commit: trim a directory whose counter just reached a multiple of the period."""
        for path in results:
            if isinstance(path, str) and path.startswith((self._events, self._rejections)) \
                    and zl.sequence(path) % self._every == 0:
                self._trim(path.rsplit("/", 1)[0])

    def _trim(self, directory: str) -> None:
        with mapped_errors("trimming the audit"):
            names = sorted(self._b.client.get_children(directory), key=zl.sequence)
            doomed = [f"{directory}/{n}" for n in names[:max(0, len(names) - self._b.config.retention)]]
            for start in range(0, len(doomed), _TRIM_MULTI):
                # One multi per batch: one transaction (and fsync) instead of one per znode.
                tx = self._b.client.transaction()
                for path in doomed[start:start + _TRIM_MULTI]:
                    tx.delete(path)
                if not any(isinstance(r, NoNodeError) for r in self._b._wait(tx.commit_async())):
                    continue
                # Another client trimmed some first: the multi did nothing; delete one by one.
                pending = [self._b.client.delete_async(p) for p in doomed[start:start + _TRIM_MULTI]]
                for result in pending:
                    with contextlib.suppress(NoNodeError):
                        self._b._wait(result)

    def _newest_first(self, directory: str, load: Callable[[bytes], T | None]) -> Iterator[T]:
        client = self._b.client
        with mapped_errors("reading the audit"):
            names = sorted(client.get_children(directory), key=zl.sequence, reverse=True)
        for start in range(0, len(names), _BATCH):
            chunk = names[start:start + _BATCH]
            with mapped_errors("reading the audit"):
                pending = [client.get_async(f"{directory}/{n}") for n in chunk]
                loaded = []
                for result in pending:
                    try:
                        loaded.append(load(self._b._wait(result)[0]))
                    except NoNodeError:
                        continue  # trimmed since the listing
            yield from (item for item in loaded if item is not None)

    def _select(self, items: Iterator[T], since: float | None, limit: int | None,
                keep: Callable[[T], bool] = lambda _: True) -> list[T]:
        if limit == 0:
            return []
        found: list[T] = []
        for item in items:
            if (since is None or item.at >= since) and keep(item):
                found.append(item)
                if limit is not None and len(found) >= limit:
                    break
        found.reverse()
        return found

    def rejections(self, since: float | None, limit: int | None) -> list[Rejection]:
        return self._select(self._newest_first(self._rejections, zl.load_rejection), since, limit)

    def history(self, job_id: str | None, since: float | None, limit: int | None) -> list[HistoryEvent]:
        return self._select(self._newest_first(self._events, zl.load_event), since, limit,
                            lambda e: job_id is None or e.job_id == job_id)
