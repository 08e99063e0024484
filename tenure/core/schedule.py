"""When a store's held leases renew, and in which batches: one schedule for both flavours.

``tenure.core.renewal`` (a scheduler thread) and ``tenure.aio.renewal`` (a task) keep every
held lease of a store here, free of I/O and of threads: a time-ordered heap of renewals and
deadlines. ``take(now)`` judges the deadlines due (a lease past its safe deadline is lost
there, never behind a renewal that hangs) and returns the renewals to send now in ONE request
(``renew_many``): those due, and with them those due within ``COALESCE_FRACTION`` of their
TTL, so a store holding thousands of leases renews them in a few round trips per TTL rather
than one per lease. Renewing a little early costs nothing: each lease's deadline counts from
when its renewal is sent, whenever that is.

It also knows when renewals fall behind (``behind``): a renewal unanswered ``LATE_FRACTION`` of
its TTL past its time, queued or on its way. The store's claims wait then (``Renewer.
yield_to_renewals``), so on a machine short of CPU the renewals of leases already held get it
before new claims do: a process making 10,000 claims while three others burned the cores lost
thousands of its leases to its own claims.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from tenure.core.holding import MAX_SLEEP, RENEW_FRACTION, HeldState

COALESCE_FRACTION = RENEW_FRACTION / 2  # a renewal due within this share of its TTL goes now
# Leases per renew_many at most, so one request stays of a bounded size. Smaller batches side
# by side did worse: SQLite runs them one after another anyway (1,000: +9 threads, 0.5 s left
# before a deadline at 10,000 leases), and ZooKeeper lost as many.
MAX_BATCH = 5_000
# A renewal this late (of its TTL: 0.5 s at 10 s) holds up the store's claims until answered.
# Early enough to act: the default safe window leaves 0.6 TTL after a renewal's time.
LATE_FRACTION = 1 / 20
# Seconds a claim waits at most for late renewals (``Renewer.yield_to_renewals``): claims still
# go on, slowly, when the store answers renewals late whatever the claims do.
CLAIM_YIELD = MAX_SLEEP
_RENEW, _DEADLINE = 0, 1

H = TypeVar("H", bound=HeldState)


class Schedule(Generic[H]):
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, H]] = []
        self._order = itertools.count()
        self._horizon = 0.0  # the widest coalescing window of any lease added
        # Renewals taken and not yet answered: when each becomes late (``behind``), and the
        # same in a heap, oldest first (an entry is stale once its lease's is answered).
        self._late_at: dict[H, float] = {}
        self._lateness: list[tuple[float, int, H]] = []

    def add(self, held: H, now: float) -> None:
        """A lease just held: its first renewal a third of its TTL from now (never past its
        deadline), and its deadline watched."""
        ttl = held.lease.ttl
        self._horizon = max(self._horizon, ttl * COALESCE_FRACTION)
        self.renew_at(held, now + ttl * RENEW_FRACTION)
        self._push(held, held.deadline, _DEADLINE)

    def renew_at(self, held: H, at: float) -> None:
        """The lease's next renewal (after one ended): a lease is in the heap for one at a time."""
        self.answered(held)
        self._push(held, min(at, held.deadline), _RENEW)

    def answered(self, held: H) -> None:
        """The renewal ``take`` gave for ``held`` is over (whatever its outcome)."""
        self._late_at.pop(held, None)

    def behind(self, now: float) -> bool:
        """Whether a renewal is late: one unanswered ``LATE_FRACTION`` of its TTL past its
        time, taken (on its way, or queued for a thread) or still here."""
        late = self._prune()
        if late and late[0][0] <= now:
            return True
        if self._heap and self._heap[0][2] == _RENEW:  # not taken yet: the scheduler is late too
            at, _, _, held = self._heap[0]
            return at + held.lease.ttl * LATE_FRACTION <= now and not (held.lost.is_set() or held.finished)
        return False

    def _prune(self) -> list[tuple[float, int, H]]:
        """The lateness heap without the renewals at its head that are answered, or can save
        nothing (their lease was lost meanwhile, or finished: a renewal that hangs on a lost
        lease holds up no claim); so it stays as long as the renewals from the oldest
        unanswered one on."""
        late = self._lateness
        while late:
            held = late[0][2]
            if self._late_at.get(held) == late[0][0] and not (held.lost.is_set() or held.finished):
                break
            heapq.heappop(late)
        return late

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
            late_at = at + held.lease.ttl * LATE_FRACTION
            self._late_at[held] = late_at
            heapq.heappush(self._lateness, (late_at, next(self._order), held))
        for entry in aside:
            heapq.heappush(self._heap, entry)
        self._prune()
        return batch

    def held(self) -> Iterator[H]:
        """Every lease still watched (each held one has its deadline here)."""
        return iter({entry[3] for entry in self._heap})
