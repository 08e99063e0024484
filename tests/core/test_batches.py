"""tenure.core.batches.batches: batches bounded by count and, given a weight, by size."""

from __future__ import annotations

from tenure.core import batches


def test_batches_hold_size_jobs_each_once_in_order() -> None:
    assert batches.batches(["a", "b", "a", "c", "d", "e"], 2) == [["a", "b"], ["c", "d"], ["e"]]


def test_a_weight_closes_a_batch_before_its_budget_is_passed() -> None:
    assert batches.batches(["a", "bbbb", "cc", "d", "eeeeeeeeee"], 10, weight=len, budget=5) == [
        ["a", "bbbb"], ["cc", "d"], ["eeeeeeeeee"]]  # one job heavier than the budget goes alone
