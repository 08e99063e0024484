"""``tenure.core.schedule``: which renewals go together, and deadlines judged on the way."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import tenure
from tenure.core.schedule import COALESCE_FRACTION, LATE_FRACTION, MAX_BATCH, Schedule


@dataclass(eq=False)
class Held:
    """What the schedule reads of a held lease (``HeldState``'s lease, job_id, deadline)."""

    lease: tenure.Lease
    expired: bool = False
    lost: threading.Event = field(default_factory=threading.Event)
    finished: bool = False

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


def test_a_renewal_unanswered_past_its_time_is_behind_until_answered() -> None:
    schedule: Schedule[Any] = Schedule()
    ttl = 30.0
    late = ttl * LATE_FRACTION
    h = held("j", ttl)
    schedule.add(h, now=0.0)  # due at 10
    assert not schedule.behind(10.0 + late - 0.01)
    assert schedule.behind(10.0 + late)  # not even taken: the scheduler is late too
    assert schedule.take(10.0, lose) == [h]
    assert not schedule.behind(10.0 + late - 0.01)  # on its way, not late yet
    assert schedule.behind(10.0 + late)  # on its way and late
    schedule.renew_at(h, 20.0)  # answered: its next renewal at 20
    assert not schedule.behind(10.0 + late)
    assert schedule.take(20.0, lose) == [h]
    schedule.answered(h)  # answered, and nothing more to renew (refused, completed)
    assert not schedule.behind(100.0)


def test_a_renewal_taken_early_is_late_from_its_own_time() -> None:
    schedule: Schedule[Any] = Schedule()
    ttl = 30.0
    first, soon = held("first", ttl), held("soon", ttl)
    schedule.add(first, now=0.0)  # due at 10
    schedule.add(soon, now=2.0)  # due at 12: goes with the first
    assert schedule.take(10.0, lose) == [first, soon]
    schedule.renew_at(first, 20.0)
    assert not schedule.behind(12.0 + ttl * LATE_FRACTION - 0.01)
    assert schedule.behind(12.0 + ttl * LATE_FRACTION)


def test_a_lost_or_finished_lease_holds_nothing_up() -> None:
    """A renewal that hangs on a lease lost meanwhile (or completed) can save nothing: claims
    need not wait for it."""
    schedule: Schedule[Any] = Schedule()
    lost, done = held("lost", 30.0), held("done", 30.0)
    for h in (lost, done):
        schedule.add(h, now=0.0)
    assert schedule.take(10.0, lose) == [lost, done]
    assert schedule.behind(20.0)
    lost.lost.set()
    assert schedule.behind(20.0)  # the other one still counts
    done.finished = True
    assert not schedule.behind(20.0)
