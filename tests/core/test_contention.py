"""Retries of optimistic writes (tenure.core.contention): paused with jitter, bounded, and given
up with the one error every backend raises."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

import tenure
from tenure.core import contention, io_drivers, steps


def test_pauses_are_jittered_grow_and_are_capped() -> None:
    assert contention.pause(1, rand=lambda: 0.0) == 0.0
    assert contention.pause(1, rand=lambda: 1.0) == contention.FIRST_PAUSE
    assert contention.pause(3, rand=lambda: 1.0) == 4 * contention.FIRST_PAUSE
    assert contention.pause(40, rand=lambda: 1.0) == contention.LONGEST_PAUSE
    assert contention.pause(2, rand=lambda: 0.5) == contention.FIRST_PAUSE


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


def test_the_one_policy_decides_each_attempt_from_how_the_last_ended() -> None:
    """``steps.Tries``: the first reads as the store likes; a refuted guess goes again at once on
    fresh reads, a collision after a growing pause, both counted; a resend is the same attempt
    again, at once and uncounted; Outraced once ``count`` attempts were made."""
    tries = steps.Tries("j", 4)
    assert tries.next() == steps.Attempt(fresh=False, retry=0)
    tries.lost = steps.RESEND
    assert tries.next() == steps.Attempt(fresh=False, retry=0)  # as the attempt it repeats: no read
    tries.lost = steps.REFUTED
    assert tries.next() == steps.Attempt(fresh=True, retry=0)
    tries.lost = steps.COLLIDED
    assert tries.next() == steps.Attempt(fresh=True, retry=1)
    tries.lost = steps.RESEND
    for _ in range(contention.ATTEMPTS):
        assert tries.next() == steps.Attempt(fresh=True, retry=0)  # not paused again, not counted
    tries.lost = steps.COLLIDED
    assert tries.next() == steps.Attempt(fresh=True, retry=2)  # the fourth attempt
    with pytest.raises(tenure.Outraced) as info:
        tries.next()
    assert (info.value.job_id, info.value.attempts) == ("j", 4)


def test_a_one_request_attempt_is_resent_at_once_uncounted_and_retried_after_a_pause() -> None:
    """``steps.attempted`` runs the same policy for a store whose attempt is one request: a
    ``Resend`` goes again at once however often (the store bounds it), a ``Collided`` after the
    pause it yields, ``count`` of them Outraced, or what ``gave_up`` answers."""
    raised: list[type[Exception]] = [contention.Resend] * (contention.ATTEMPTS + 2) + [contention.Collided]
    sent: list[object] = []

    def attempt() -> Generator[str, str, str]:
        answer = yield "request"
        if raised:
            raise raised.pop(0)
        return answer

    def driven(plan: Generator[object, str, Any]) -> Any:
        return io_drivers.run(plan, lambda effect: sent.append(effect) or "done")

    assert driven(steps.attempted(attempt, "j")) == "done"
    pauses = [effect for effect in sent if isinstance(effect, contention.Pause)]
    assert sent.count("request") == contention.ATTEMPTS + 4 and len(pauses) == 1
    assert 0.0 <= pauses[0].seconds <= contention.FIRST_PAUSE

    def colliding() -> Generator[str, str, str]:
        yield "request"
        raise contention.Collided

    with pytest.raises(tenure.Outraced):
        driven(steps.attempted(colliding, "j", count=3))
    assert driven(steps.attempted(colliding, "j", count=3, gave_up=lambda: "gave up")) == "gave up"
