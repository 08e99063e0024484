"""``tenure.core.schedule``: which renewals go together, and deadlines judged on the way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tenure
from tenure.core.schedule import COALESCE_FRACTION, MAX_BATCH, Schedule


@dataclass(eq=False)
class Held:
    """What the schedule reads of a held lease (``HeldState``'s lease, job_id, deadline)."""

    lease: tenure.Lease
    expired: bool = False

    @property
    def job_id(self) -> str:
        return self.lease.job_id

    @property
    def deadline(self) -> float:
        return self.lease.deadline


def held(job: str, ttl: float, deadline: float = 1e9) -> Any:
    return Held(tenure.Lease(job, "a", 1, 0.0, ttl, deadline))


def lose(h: Any) -> bool:
    h.expired = True
    return False


def test_the_renewals_due_soon_go_with_the_one_due_now() -> None:
    schedule: Schedule[Any] = Schedule()
    ttl = 30.0
    first, soon, later = held("first", ttl), held("soon", ttl), held("later", ttl)
    schedule.add(first, now=0.0)  # due at 10
    schedule.add(soon, now=ttl * COALESCE_FRACTION - 0.5)  # due within the window of 10
    schedule.add(later, now=ttl * COALESCE_FRACTION + 0.5)  # due just past it
    assert schedule.take(9.9, lose) == []  # nothing due yet
    assert schedule.take(10.0, lose) == [first, soon]
    assert schedule.take(10.0, lose) == []  # the late one stays for its own tick
    assert schedule.next_at() == ttl / 3 + ttl * COALESCE_FRACTION + 0.5


def test_one_lease_per_job_and_a_bounded_batch() -> None:
    schedule: Schedule[Any] = Schedule()
    twice = [held("same", 30.0), held("same", 30.0)]
    many = [held(f"j{i}", 30.0) for i in range(MAX_BATCH)]
    for h in [*twice, *many]:
        schedule.add(h, now=0.0)
    first = schedule.take(10.0, lose)
    assert len(first) == MAX_BATCH and len({h.job_id for h in first}) == MAX_BATCH
    assert sorted(h.job_id for h in schedule.take(10.0, lose)) == [f"j{MAX_BATCH - 1}", "same"]  # the rest


def test_a_deadline_due_is_judged_and_no_renewal_is_sent_for_it() -> None:
    schedule: Schedule[Any] = Schedule()
    h = held("j", 30.0, deadline=5.0)  # renewal due at min(10, 5): the deadline
    schedule.add(h, now=0.0)
    assert schedule.take(5.0, lose) == [h]  # the renewal is due at the deadline, tried once more
    assert h.expired  # and the deadline judged: lost
    assert schedule.next_at() is None
