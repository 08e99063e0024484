"""When a store's held leases renew, and in which batches: one schedule for both flavours.

``tenure.core.renewal`` (a scheduler thread) and ``tenure.aio.renewal`` (a task) keep every
held lease of a store here, free of I/O and of threads: a time-ordered heap of renewals and
deadlines. ``take(now)`` judges the deadlines due (a lease past its safe deadline is lost
there, never behind a renewal that hangs) and returns the renewals to send now in ONE request
(``renew_many``): those due, and with them those due within ``COALESCE_FRACTION`` of their
TTL, so a store holding thousands of leases renews them in a few round trips per TTL rather
than one per lease. Renewing a little early costs nothing: each lease's deadline counts from
when its renewal is sent, whenever that is.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from tenure.core.holding import RENEW_FRACTION, HeldState

COALESCE_FRACTION = RENEW_FRACTION / 2  # a renewal due within this share of its TTL goes now
# Leases per renew_many at most, so one request stays of a bounded size. Smaller batches side
# by side did worse: SQLite runs them one after another anyway (1,000: +9 threads, 0.5 s left
# before a deadline at 10,000 leases), and ZooKeeper lost as many.
MAX_BATCH = 5_000
_RENEW, _DEADLINE = 0, 1

H = TypeVar("H", bound=HeldState)


class Schedule(Generic[H]):
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, H]] = []
        self._order = itertools.count()
        self._horizon = 0.0  # the widest coalescing window of any lease added

    def add(self, held: H, now: float) -> None:
        """A lease just held: its first renewal a third of its TTL from now (never past its
        deadline), and its deadline watched."""
        ttl = held.lease.ttl
        self._horizon = max(self._horizon, ttl * COALESCE_FRACTION)
        self.renew_at(held, now + ttl * RENEW_FRACTION)
        self._push(held, held.deadline, _DEADLINE)

    def renew_at(self, held: H, at: float) -> None:
        """The lease's next renewal (after one ended): a lease is in the heap for one at a time."""
        self._push(held, min(at, held.deadline), _RENEW)

    def _push(self, held: H, at: float, kind: int) -> None:
        heapq.heappush(self._heap, (at, next(self._order), kind, held))

    def next_at(self) -> float | None:
        """When ``take`` has something to do next (None: nothing is held)."""
        return self._heap[0][0] if self._heap else None

    def take(self, now: float, expire_if_due: Callable[[H], bool]) -> list[H]:
        """Deadlines due judged by ``expire_if_due`` (the lease's own: lost if its deadline
        passed, False once nothing is left to watch), and the renewals to send now in one
        request: those due and those due soon (``COALESCE_FRACTION`` of their TTL), one lease
        per job, ``MAX_BATCH`` at most; the rest stay for a later ``take``."""
        batch: list[H] = []
        jobs: set[str] = set()
        aside: list[tuple[float, int, int, H]] = []
        while self._heap and self._heap[0][0] <= now + (self._horizon if batch else 0.0):
            entry = heapq.heappop(self._heap)
            at, _, kind, held = entry
            if kind == _DEADLINE:
                if at > now:
                    aside.append(entry)
                elif expire_if_due(held):  # cheap, and never blocks
                    self._push(held, held.deadline, _DEADLINE)  # renewed since: watch the new one
                continue
            soon = at <= now + held.lease.ttl * COALESCE_FRACTION
            if not soon or held.job_id in jobs or len(batch) >= MAX_BATCH:
                aside.append(entry)
                continue
            batch.append(held)
            jobs.add(held.job_id)
        for entry in aside:
            heapq.heappush(self._heap, entry)
        return batch

    def held(self) -> Iterator[H]:
        """Every lease still watched (each held one has its deadline here)."""
        return iter({entry[3] for entry in self._heap})
