"""The steps of a blocking claim, decided once in ``waiting`` for Store and tenure.aio.AsyncStore."""

from __future__ import annotations

import pytest

import tenure
from tenure.core import waiting


def test_the_steps_of_a_claim_are_decided_once_for_both_flavours() -> None:
    """``waiting.claim_steps``, which Store and tenure.aio.AsyncStore only carry out."""
    not_yet = tenure.NotYetClaimable("j", "a", 2, expires_at=None, retry_after=2.5)
    held = tenure.AlreadyClaimed("j", "a", 3, expires_at=110.0)

    steps = waiting.claim_steps(blocking=False)  # no wait: only an early-ended lease is sat out
    assert isinstance(next(steps), waiting.Attempt)
    for _ in range(waiting.CLAIM_WAITS):
        assert steps.throw(not_yet) == waiting.Sleep(2.5)
        assert isinstance(next(steps), waiting.Attempt)
    with pytest.raises(tenure.NotYetClaimable):
        steps.throw(not_yet)
    steps = waiting.claim_steps(blocking=False)
    next(steps)
    with pytest.raises(tenure.AlreadyClaimed):
        steps.throw(held)

    steps = waiting.claim_steps(blocking=True)  # a wait: pause until the holder's lease ends
    assert isinstance(next(steps), waiting.StartWaiting)
    assert isinstance(steps.send(None), waiting.Attempt)
    assert isinstance(steps.throw(held), waiting.ReadNow)
    assert steps.send(100.0) == waiting.Pause(10.0)  # due when the lease ends by the store's clock
    assert isinstance(steps.send(True), waiting.Attempt)
    assert steps.throw(not_yet) == waiting.Pause(2.5)  # with a wait, an early-ended lease is paused out
    assert isinstance(steps.send(True), waiting.Attempt)
    lease = tenure.Lease("j", "b", 4, 200.0, 5.0)
    with pytest.raises(StopIteration) as done:
        steps.send(lease)
    assert done.value.value is lease
    steps = waiting.claim_steps(blocking=True)
    next(steps), steps.send(None), steps.throw(held), steps.send(100.0)
    with pytest.raises(tenure.AlreadyClaimed):
        steps.send(False)  # the wait is over: the refusal stands


def test_a_waiting_claim_next_pauses_until_the_store_says_a_job_becomes_claimable() -> None:
    """``waiting.claim_next_steps``: the pause is due when the store's next job becomes
    claimable by time (``Backend.next_due``: a scheduled job, a lease's end), if it can tell."""
    steps = waiting.claim_next_steps(blocking=True)
    assert isinstance(next(steps), waiting.Attempt)
    assert isinstance(steps.send(None), waiting.StartWaiting)  # nothing claimable: wait
    assert isinstance(steps.send(None), waiting.NextDue)
    assert steps.send(0.3) == waiting.Pause(0.3)
    assert isinstance(steps.send(True), waiting.Attempt)
    assert isinstance(steps.send(None), waiting.NextDue)
    assert steps.send(None) == waiting.Pause(None)  # the store cannot tell: the poll's pace
    with pytest.raises(StopIteration) as done:
        steps.send(False)
    assert done.value.value is None
