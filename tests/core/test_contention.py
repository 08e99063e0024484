"""Retries of optimistic writes (tenure.core.contention): paused with jitter, bounded, and given
up with the one error every backend raises."""

from __future__ import annotations

import tenure
from tenure.core import contention


def test_pauses_are_jittered_grow_and_are_capped() -> None:
    assert contention.pause(1, rand=lambda: 0.0) == 0.0
    assert contention.pause(1, rand=lambda: 1.0) == contention.FIRST_PAUSE
    assert contention.pause(3, rand=lambda: 1.0) == 4 * contention.FIRST_PAUSE
    assert contention.pause(40, rand=lambda: 1.0) == contention.LONGEST_PAUSE
    assert contention.pause(2, rand=lambda: 0.5) == contention.FIRST_PAUSE


def test_attempts_pause_before_each_retry_only() -> None:
    slept: list[float] = []
    assert list(contention.attempts(4, sleep=slept.append)) == [0, 1, 2, 3]
    assert len(slept) == 3 and all(0.0 <= s <= contention.LONGEST_PAUSE for s in slept)


def test_giving_up_is_one_transient_error_that_names_the_job() -> None:
    error = contention.outraced("job-7")
    assert isinstance(error, tenure.Outraced)
    assert isinstance(error, tenure.BackendUnavailable)  # transient: callers retry it like one
    assert error.job_id == "job-7" and error.attempts == contention.ATTEMPTS
    assert "job-7" in str(error) and "nothing was written" in str(error)
