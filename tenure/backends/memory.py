"""``memory://[name]``: one process, an injectable clock; for tests, demos and examples.

Stores with the same name in one process share their state, so a test or the dashboard can
open the store a worker thread uses. The clock passed to ``connect`` is the store's clock.
"""

from __future__ import annotations

import contextlib
import heapq
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

from tenure.core import audit
from tenure.core.backend import Characteristics, RecordBackend, Transaction
from tenure.core.clock import SYSTEM_CLOCK, Clock
from tenure.core.options import Options, StoreURL
from tenure.core.records import HistoryEvent, JobRecord, JobState, JobStatus, Rejection
from tenure.core.transitions import candidate_at, status


class _State:
    def __init__(self, clock: Clock, retention: int) -> None:
        self.clock = clock
        self.lock = threading.RLock()
        self.records: dict[str, JobRecord] = {}
        # Indexes for claim_next, so it costs the same with 100,000 jobs as with 10:
        self.pending: dict[str, None] = {}  # claimable pending job ids in the order they became so
        # Heaps of (time, job id): leases by their end, scheduled jobs by when they become
        # claimable. Stale entries are skipped when they come up, rather than searched for on
        # every renewal.
        self.expiries: list[tuple[float, str]] = []
        self.scheduled: list[tuple[float, str]] = []
        self.rejections: deque[Rejection] = deque(maxlen=retention)
        self.events: deque[HistoryEvent] = deque(maxlen=retention)

    def head(self, heap: list[tuple[float, str]], state: JobState) -> float | None:
        """The time at the head of one of the heaps, once the stale entries there (superseded
        by a renewal, claim, release, completion) are dropped; the lock is held."""
        while heap:
            at, job_id = heap[0]
            rec = self.records.get(job_id)
            if rec is not None and rec.state is state and candidate_at(rec) == at:
                return at
            heapq.heappop(heap)
        return None


_NAMED: dict[str, _State] = {}
_NAMED_LOCK = threading.Lock()


class _MemoryTransaction(Transaction):
    def __init__(self, state: _State) -> None:
        self._s = state
        self.now = state.clock.time()
        self._writes: dict[str, JobRecord] = {}
        self._rejections: list[Rejection] = []
        self._events: list[HistoryEvent] = []

    def load(self, job_id: str) -> JobRecord | None:
        return self._writes.get(job_id) or self._s.records.get(job_id)

    def save(self, record: JobRecord) -> None:
        self._writes[record.job_id] = record

    def next_claimable(self) -> str | None:
        # Expired leases first, soonest expiry first, then pending jobs in the order they became
        # claimable (a scheduled job joins the queue when its time comes).
        records = self._s.records
        until = self._s.head(self._s.expiries, JobState.LEASED)
        if until is not None and until <= self.now:
            return self._s.expiries[0][1]
        due = self._s.scheduled
        while due and due[0][0] <= self.now:  # the lock is held: moving them is this step's alone
            at, job_id = heapq.heappop(due)
            rec = records.get(job_id)
            if rec is not None and rec.state is JobState.PENDING and rec.claimable_at == at:
                self._s.pending[job_id] = None
        return next(iter(self._s.pending), None)

    def add_rejection(self, rejection: Rejection) -> None:
        self._rejections.append(rejection)

    def add_event(self, event: HistoryEvent) -> None:
        self._events.append(event)

    def commit(self) -> None:
        for job_id, rec in self._writes.items():
            self._s.records[job_id] = rec
            at = candidate_at(rec)
            if rec.state is JobState.PENDING and at is None:
                self._s.pending.setdefault(job_id, None)
            else:
                self._s.pending.pop(job_id, None)
                if at is not None:
                    heapq.heappush(self._s.expiries if rec.state is JobState.LEASED else self._s.scheduled,
                                   (at, job_id))
        self._s.rejections.extend(self._rejections)
        self._s.events.extend(self._events)


class MemoryBackend(RecordBackend):
    characteristics = Characteristics(
        name="memory",
        store_clock="the clock passed to connect() (the process's own by default)",
        shared_between_processes=False,
        max_result_bytes=64 * 1024 * 1024,  # bounded by memory alone; this keeps one result sane
        tls_options=None,
    )

    def __init__(self, clock: Clock, *, name: str = "", retention: int = 10_000) -> None:
        if name:
            with _NAMED_LOCK:
                self._state = _NAMED.setdefault(name, _State(clock, retention))
        else:
            self._state = _State(clock, retention)
        self.name = name

    @classmethod
    def from_url(cls, url: StoreURL, options: Options, clock: Clock | None) -> MemoryBackend:
        name = ",".join(h for h, _ in url.hosts) + url.path.strip("/")
        retention = options.integer("retention", 10_000, low=1)
        options.finish()
        return cls(clock or SYSTEM_CLOCK, name=name, retention=retention)

    @contextlib.contextmanager
    def transaction(self, fresh: bool = False) -> Iterator[Transaction]:  # locked: always fresh
        with self._state.lock:
            tx = _MemoryTransaction(self._state)
            yield tx
            tx.commit()

    def get(self, job_id: str) -> JobStatus | None:
        with self._state.lock:
            rec = self._state.records.get(job_id)
            return None if rec is None else status(rec, self.now())

    def jobs(self) -> Iterator[JobStatus]:
        with self._state.lock:
            now = self.now()
            snapshot = [status(r, now) for r in self._state.records.values()]
        return iter(snapshot)

    def rejections(self, since: float | None, limit: int | None) -> list[Rejection]:
        with self._state.lock:
            found = list(self._state.rejections)
        return audit.select(reversed(found), since, limit)

    def job_rejections(self, job_id: str, since: float | None, limit: int | None) -> list[Rejection]:
        with self._state.lock:
            found = [r for r in self._state.rejections if r.job_id == job_id]
        return audit.select(reversed(found), since, limit)

    def history(self, job_id: str | None, since: float | None, limit: int | None) -> list[HistoryEvent]:
        with self._state.lock:
            events = list(self._state.events)
        return audit.select(reversed(events), since, limit, None if job_id is None else lambda e: e.job_id == job_id)

    def now(self) -> float:
        return self._state.clock.time()

    def next_due(self) -> float | None:
        with self._state.lock:
            s = self._state
            now = self.now()
            # A head already due is claim_next's to take; behind it, the heap cannot tell.
            heads = [at for at in (s.head(s.expiries, JobState.LEASED), s.head(s.scheduled, JobState.PENDING))
                     if at is not None and at > now]
            return min(heads) - now if heads else None

    def health(self) -> dict[str, Any]:
        with self._state.lock:
            leased = sum(1 for r in self._state.records.values() if r.state is JobState.LEASED)
            return {"backend": "memory", "name": self.name or "(private)",
                    "jobs": len(self._state.records), "leased": leased}
