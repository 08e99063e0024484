"""tenure.core.protocol.submit_in_batches: batches bounded by count and, given a weight, by size."""

from __future__ import annotations

from collections.abc import Callable

from tenure.core import protocol


def _batches(job_ids: list[str], size: int, weight: Callable[[str], int] | None = None,
             budget: int = 0) -> list[list[str]]:
    seen: list[list[str]] = []
    protocol.submit_in_batches(job_ids, size, lambda chunk: seen.append(chunk) is None,
                               lambda job_id: None, weight, budget)
    return seen


def test_batches_hold_size_jobs_each_once_in_order() -> None:
    assert _batches(["a", "b", "a", "c", "d", "e"], 2) == [["a", "b"], ["c", "d"], ["e"]]


def test_a_weight_closes_a_batch_before_its_budget_is_passed() -> None:
    assert _batches(["a", "bbbb", "cc", "d", "eeeeeeeeee"], 10, weight=len, budget=5) == [
        ["a", "bbbb"], ["cc", "d"], ["eeeeeeeeee"]]  # one job heavier than the budget goes alone
