"""Change feeds by polling, for backends without a native watch (memory, SQLite).

What a poll decides (which jobs changed, which rejections are new) is ``Polled``, free of I/O;
``poll`` drives it with a sync backend, ``tenure.aio`` with an async one.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable, Iterator
from typing import Generic, Protocol, TypeVar

from tenure.core.records import Change, HistoryEvent, JobStatus, Rejection


class Source(Protocol):
    """What polling reads of a backend (``tenure.Backend`` has all of it)."""

    def jobs(self) -> Iterator[JobStatus]: ...

    def rejections(self, since: float | None, limit: int | None) -> list[Rejection]: ...

    def now(self) -> float: ...


def poll(backend: Source, stop: threading.Event, interval: float) -> Iterator[Change]:
    """Yield every job as it is first seen, then each change and each new rejection."""
    polled = Polled()
    fresh_rejections = NewRejections(backend, None)
    while not stop.is_set():
        yield from polled.jobs(backend.jobs())
        yield from (Change(rejection=r) for r in fresh_rejections())
        stop.wait(interval)


class Polled:
    """What one poll after another has shown."""

    def __init__(self) -> None:
        self._seen: dict[str, JobStatus] = {}

    def jobs(self, listed: Iterable[JobStatus]) -> list[Change]:
        """The changes from the jobs shown last time to the jobs listed now."""
        current = {job.job_id: job for job in listed}
        changes = [Change(job=job) for job_id, job in current.items() if self._seen.get(job_id) != job]
        changes += [Change(removed=job_id) for job_id in self._seen.keys() - current.keys()]
        self._seen = current
        return changes


class Stamped(Hashable, Protocol):
    """An audit record: a rejection or a history event, at a store time."""

    @property
    def at(self) -> float: ...


S = TypeVar("S", bound=Stamped)


class AuditFilter(Generic[S]):
    """Tells new audit records from those already returned, reading the audit again and again.

    ``since``: store time to read from; None for every retained record on the first read.
    """

    def __init__(self, since: float | None) -> None:
        self.since = since
        self._seen: set[S] = set()

    def fresh(self, read: list[S]) -> list[S] | None:
        """The records of ``read`` (the audit since ``since``) not returned before, oldest
        first; None when there were none and no start time is known yet (call ``start_at``)."""
        fresh = [r for r in read if r not in self._seen]
        if fresh:
            # Keep only the records at the newest instant to tell repeats from new ones.
            self.since = max(r.at for r in fresh)
            self._seen = {r for r in self._seen | set(fresh) if r.at >= self.since}
        elif self.since is None:
            return None
        return fresh

    def start_at(self, now: float) -> None:
        self.since = now


class RejectionFilter(AuditFilter[Rejection]):
    """``AuditFilter`` of the rejections audit."""


class NewRejections:
    """Reads the audit again and again, returning each rejection once (oldest first).

    ``since``: store time to start from; None for every retained rejection on the first call,
    then from the store's now when there were none.
    """

    def __init__(self, backend: Source, since: float | None) -> None:
        self._backend = backend
        self._filter = RejectionFilter(since)

    def __call__(self) -> list[Rejection]:
        fresh = self._filter.fresh(self._backend.rejections(self._filter.since, None))
        if fresh is None:
            self._filter.start_at(self._backend.now())
            return []
        return fresh


class HistorySource(Protocol):
    def history(self, job_id: str | None, since: float | None, limit: int | None) -> list[HistoryEvent]: ...


class NewEvents:
    """Reads the history again and again from store time ``since``, returning each accepted
    operation once (oldest first); what the history's retention dropped meanwhile is missed."""

    def __init__(self, backend: HistorySource, since: float) -> None:
        self._backend = backend
        self._filter: AuditFilter[HistoryEvent] = AuditFilter(since)

    def __call__(self) -> list[HistoryEvent]:
        return self._filter.fresh(self._backend.history(None, self._filter.since, None)) or []
