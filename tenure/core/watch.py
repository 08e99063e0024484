"""Change feeds by polling, for backends without a native watch (memory, SQLite)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Protocol

from tenure.core.records import Change, JobStatus, Rejection


class Source(Protocol):
    """What polling reads of a backend (``tenure.Backend`` has all of it)."""

    def jobs(self) -> Iterator[JobStatus]: ...

    def rejections(self, since: float | None, limit: int | None) -> list[Rejection]: ...

    def now(self) -> float: ...


def poll(backend: Source, stop: threading.Event, interval: float) -> Iterator[Change]:
    """Yield every job as it is first seen, then each change and each new rejection."""
    seen: dict[str, JobStatus] = {}
    fresh_rejections = NewRejections(backend, None)
    while not stop.is_set():
        current = {job.job_id: job for job in backend.jobs()}
        for job_id, job in current.items():
            if seen.get(job_id) != job:
                yield Change(job=job)
        for job_id in seen.keys() - current.keys():
            yield Change(removed=job_id)
        seen = current
        for rejection in fresh_rejections():
            yield Change(rejection=rejection)
        stop.wait(interval)


class NewRejections:
    """Reads the audit again and again, returning each rejection once (oldest first).

    ``since``: store time to start from; None for every retained rejection on the first call,
    then from the store's now when there were none.
    """

    def __init__(self, backend: Source, since: float | None) -> None:
        self._backend = backend
        self._since = since
        self._seen: set[Rejection] = set()

    def __call__(self) -> list[Rejection]:
        fresh = [r for r in self._backend.rejections(self._since, None) if r not in self._seen]
        if fresh:
            # Keep only the records at the newest instant to tell repeats from new ones.
            self._since = max(r.at for r in fresh)
            self._seen = {r for r in self._seen | set(fresh) if r.at >= self._since}
        elif self._since is None:
            self._since = self._backend.now()
        return fresh
