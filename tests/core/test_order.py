"""tenure.core.order: claim_next's order, written once (the stores' cases are suite_order's)."""

from __future__ import annotations

from collections.abc import Iterator

from tenure.core import contention, order
from tenure.core.order import Expired, Queued


def test_expired_leases_come_first_by_end_then_job_id() -> None:
    expired = sorted([Expired(5.0, "b"), Expired(3.0, "z"), Expired(5.0, "a")])
    queued = [Queued(1.0, 1, "old")]
    assert list(order.job_ids(order.ordered(expired, queued))) == ["z", "a", "b", "old"]


def test_queues_merge_by_time_then_place_and_an_entry_pushed_twice_comes_once() -> None:
    ready = [Queued(1.0, 1, "r1"), Queued(2.0, 4, "r2"), Queued(2.0, 4, "r2")]
    due = [Queued(2.0, 2, "scheduled-at-2"), Queued(3.0, 3, "scheduled-at-3")]
    assert list(order.job_ids(order.ordered([], ready, due))) == ["r1", "scheduled-at-2", "r2", "scheduled-at-3"]


def test_the_merge_reads_no_further_than_its_claims_go() -> None:
    read = []

    def stream() -> Iterator[Queued]:
        for i in range(1000):
            read.append(i)
            yield Queued(float(i), i, f"j{i}")

    first = next(order.job_ids(order.ordered([], stream())))
    assert first == "j0" and len(read) <= 2


def test_spread_starts_one_of_the_first_places_and_keeps_every_item() -> None:
    queued = list(range(10))
    starts = {next(order.spread_start(queued, rand=lambda n, shift=shift: min(shift, n - 1))) for shift in range(10)}
    assert starts == set(range(contention.SPREAD))  # never further in than SPREAD places
    assert list(order.spread_start(queued, rand=lambda n: 2)) == [2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    assert list(order.spread_start([7], rand=lambda n: n - 1)) == [7]
    assert list(order.spread_start([])) == []


def test_the_spread_moves_queued_jobs_only() -> None:
    expired = [Expired(1.0, "e")]
    queued = [Queued(float(i), i, f"q{i}") for i in range(6)]
    taken = list(order.job_ids(order.ordered(expired, queued, spread=True, rand=lambda n: n - 1)))
    assert taken == ["e", "q3", "q4", "q5", "q0", "q1", "q2"]
