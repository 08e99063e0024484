"""``memory://[name]``: one process, an injectable clock; for tests, demos and examples.

Stores with the same name in one process share their state, so a test or the dashboard can
open the store a worker thread uses. The clock passed to ``connect`` is the store's clock.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
from collections import OrderedDict, deque
from collections.abc import Iterator
from typing import Any, TypeVar

from tenure.core import audit, order
from tenure.core.backend import Characteristics, Durability, RecordBackend
from tenure.core.clock import SYSTEM_CLOCK, Clock
from tenure.core.options import Options, StoreURL
from tenure.core.order import Expired, Queued
from tenure.core.record_transaction import Transaction
from tenure.core.records import HistoryEvent, JobRecord, JobState, JobStatus, Lease, Op, Rejection
from tenure.core.transitions import candidate_at, replaced, status

T = TypeVar("T")


class _State:
    def __init__(self, clock: Clock, retention: int) -> None:
        self.clock = clock
        self.lock = threading.RLock()
        self.records: dict[str, JobRecord] = {}
        # Indexes for claim_next, so it costs the same with 100,000 jobs as with 10:
        # Heaps: leases by their end, (time, job id); pending jobs by when they became claimable
        # (ready) or become so (scheduled), (time, order of queueing, job id). Stale entries are
        # skipped when they come up, rather than searched for on every renewal. A ready job is
        # never held back by its time: a clock stepped back must not hide it.
        self.expiries: list[tuple[float, str]] = []
        self.ready: list[tuple[float, int, str]] = []
        self.scheduled: list[tuple[float, int, str]] = []
        self.queued: dict[str, int] = {}  # a pending job's current entry, by its order of queueing
        self.queueings = 0
        self.rejections: deque[Rejection] = deque(maxlen=retention)
        # The history, oldest first: a claim's renewal event under its claim (``replaced``), so
        # the next one takes its place at the newest end; any other under its own number.
        self.events: OrderedDict[tuple[str, int] | int, HistoryEvent] = OrderedDict()
        self.retention = retention
        self.recorded = 0

    def record(self, event: HistoryEvent) -> None:
        claim = replaced(event)
        if claim is None:
            self.recorded += 1
            self.events[self.recorded] = event
        else:
            self.events.pop(claim, None)
            self.events[claim] = event
        if len(self.events) > self.retention:
            self.events.popitem(last=False)

    # The heads of the heaps, once the stale entries there are dropped; the lock is held.
    def lease_head(self) -> tuple[float, str] | None:
        heap, records = self.expiries, self.records
        while heap:
            until, job_id = heap[0]
            rec = records.get(job_id)
            if rec is None or candidate_at(rec) != until or rec.state is not JobState.LEASED:
                heapq.heappop(heap)  # superseded by a renewal, claim, release or completion
                continue
            return until, job_id
        return None

    def queue_head(self, queue: list[tuple[float, int, str]]) -> tuple[float, int, str] | None:
        while queue:
            if self.queued.get(queue[0][2]) != queue[0][1]:
                heapq.heappop(queue)  # claimed, completed or queued again since
                continue
            return queue[0]
        return None

    def candidates(self, now: float) -> Iterator[str]:
        """claim_next's jobs at ``now``, best first (``order.ordered``): the heaps walked in
        order without popping (a batch of claims reads past their heads; the lock is held)."""
        self.lease_head(), self.queue_head(self.ready), self.queue_head(self.scheduled)  # stale heads dropped
        records, queued = self.records, self.queued
        expired = (Expired(until, job_id) for until, job_id in
                   itertools.takewhile(lambda entry: entry[0] <= now, _in_order(self.expiries))
                   if (rec := records.get(job_id)) is not None and rec.state is JobState.LEASED
                   and candidate_at(rec) == until)
        due = itertools.takewhile(lambda entry: entry[0] <= now, _in_order(self.scheduled))
        ready, scheduled = ((Queued(*entry) for entry in stream if queued.get(entry[2]) == entry[1])
                            for stream in (_in_order(self.ready), due))
        return order.job_ids(order.ordered(expired, ready, scheduled))

    def enqueue(self, job_id: str, at: float, scheduled: bool) -> None:
        self.queueings += 1
        self.queued[job_id] = self.queueings
        heapq.heappush(self.scheduled if scheduled else self.ready, (at, self.queueings, job_id))


def _in_order(heap: list[T]) -> Iterator[T]:
    """A heap's entries, smallest first, read without changing it: each step pops the least
    of a small frontier heap of the places under those already given."""
    frontier = [(heap[0], 0)] if heap else []
    while frontier:
        entry, place = heapq.heappop(frontier)
        yield entry
        for child in (2 * place + 1, 2 * place + 2):
            if child < len(heap):
                heapq.heappush(frontier, (heap[child], child))


_NAMED: dict[str, _State] = {}
_NAMED_LOCK = threading.Lock()


class _MemoryTransaction(Transaction):
    def __init__(self, state: _State) -> None:
        self._s = state
        self.now = state.clock.time()
        self._writes: dict[str, JobRecord] = {}
        self._rejections: list[Rejection] = []
        self._events: list[HistoryEvent] = []

    def load(self, job_id: str, op: Op, lease: Lease | None = None) -> JobRecord | None:
        return self._writes.get(job_id) or self._s.records.get(job_id)

    def save(self, record: JobRecord, op: Op, event: HistoryEvent | None) -> None:
        self._writes[record.job_id] = record
        if event is not None:
            self._events.append(event)

    def next_claimables(self, n: int) -> list[str]:
        return list(itertools.islice(self._s.candidates(self.now), n))

    def add_rejection(self, rejection: Rejection) -> None:
        self._rejections.append(rejection)

    def commit(self) -> None:
        for job_id, rec in self._writes.items():
            self._s.records[job_id] = rec
            at = candidate_at(rec)
            if rec.state is JobState.PENDING:
                self._s.enqueue(job_id, self.now if at is None else at, at is not None)
                continue
            self._s.queued.pop(job_id, None)
            if at is not None:
                heapq.heappush(self._s.expiries, (at, job_id))
        self._s.rejections.extend(self._rejections)
        for event in self._events:
            self._s.record(event)


class MemoryBackend(RecordBackend):
    characteristics = Characteristics(
        name="memory",
        store_clock="the clock passed to connect() (the process's own by default)",
        durability=Durability.VOLATILE,  # Python objects in this process
        shared_between_processes=False,
        max_result_bytes=64 * 1024 * 1024,  # bounded by memory alone; this keeps one result sane
        tls_options=None,
    )

    CLAIMS_IN_BATCHES = True  # next_claimables: n jobs from the indexes, claimed in one transaction

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
            events = list(self._state.events.values())
        return audit.select(reversed(events), since, limit, None if job_id is None else lambda e: e.job_id == job_id)

    def now(self) -> float:
        return self._state.clock.time()

    def next_due(self) -> float | None:
        with self._state.lock:
            now = self.now()
            # A head already due is claim_next's to take; behind it, the heap cannot tell.
            heads = [head[0] for head in (self._state.lease_head(), self._state.queue_head(self._state.scheduled))
                     if head is not None and head[0] > now]
            return min(heads) - now if heads else None

    def health(self) -> dict[str, Any]:
        with self._state.lock:
            leased = sum(1 for r in self._state.records.values() if r.state is JobState.LEASED)
            return {"backend": "memory", "name": self.name or "(private)",
                    "jobs": len(self._state.records), "leased": leased}
