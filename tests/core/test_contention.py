"""Retries of optimistic writes (tenure.core.contention): paused with jitter, bounded, and given
up with the one error every backend raises."""

from __future__ import annotations

import pytest

import tenure
from tenure.core import contention, steps


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


def test_a_claim_request_whose_every_claim_lost_is_made_again_until_outraced() -> None:
    """``steps.Claims``: a store whose claims in one request are won or lost alone (etcd) answers
    ``steps.Lost``; the core asks again (pausing ``contention.pause(retry)``), handing on what
    the request carried, and gives up after claim_next's attempts lost in a row."""
    claims = steps.Claims(5, 0)
    assert (claims.next(), claims.retry) == (5, 0)
    claims.answered(steps.Lost("indexes read beside"))
    assert (claims.next(), claims.retry, claims.carried) == (5, 1, "indexes read beside")
    lease = tenure.Lease("j", "a", 1, 10.0, 5.0)
    claims.answered(([lease], True))  # a win: the count of losses starts over
    assert (claims.next(), claims.retry, claims.carried, claims.found) == (4, 0, None, [lease])
    for _ in range(contention.CLAIM_NEXT_ATTEMPTS - 1):
        claims.answered(steps.Lost())
    with pytest.raises(tenure.Outraced):
        claims.answered(steps.Lost())
