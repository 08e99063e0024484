"""Blocking claims: ``claim(..., wait=)`` and ``claim_next(..., wait=)`` on every backend.

Each test starts the change it waits for only once the claim is pausing (a hook on
``Pacing.next_sleep`` says so), so nothing depends on how long a thread takes to start. Where the
store has a native watch (etcd, ZooKeeper) the backoff is stretched to ten minutes, so the
claim can only return in time if the watch woke it.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
from tenure.core import waiting
from tests.harness import Harness


@pytest.fixture
def paused(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Set once a blocking claim first pauses between attempts."""
    event = threading.Event()
    original = waiting.Pacing.next_sleep  # what both flavours' waiters ask before each pause

    def next_sleep(self: waiting.Pacing, due_in: float | None) -> float | None:
        event.set()
        return original(self, due_in)

    monkeypatch.setattr(waiting.Pacing, "next_sleep", next_sleep)
    yield event


def only_a_watch_can_wake(store: tenure.Store, monkeypatch: pytest.MonkeyPatch) -> bool:
    native = waiting.has_native_watch(store.backend)
    if native:
        monkeypatch.setattr(waiting, "FIRST_DELAY", 600.0)
        monkeypatch.setattr(waiting, "MAX_WATCH_DELAY", 600.0)
    return native


def in_background(call: Any) -> concurrent.futures.Future[Any]:
    pool = concurrent.futures.ThreadPoolExecutor(1)
    future = pool.submit(call)
    pool.shutdown(wait=False)
    return future


def test_claim_next_waits_for_a_job_submitted_meanwhile(harness: Harness, store: tenure.Store,
                                                       paused: threading.Event,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    only_a_watch_can_wake(store, monkeypatch)
    future = in_background(lambda: store.claim_next("w", harness.ttl, wait=60))
    assert paused.wait(30)
    store.submit("late")
    lease = future.result(timeout=90)
    assert lease is not None and lease.job_id == "late"


def test_claim_waits_for_the_holder_to_release(harness: Harness, store: tenure.Store, paused: threading.Event,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    first = store.claim("j", "a", 120)
    only_a_watch_can_wake(store, monkeypatch)
    future = in_background(lambda: store.claim("j", "b", harness.ttl, wait=60))
    assert paused.wait(30)
    store.release(first)
    lease = future.result(timeout=90)
    assert (lease.owner, lease.token > first.token) == ("b", True)


def test_claim_waits_for_a_lease_to_run_out(harness: Harness) -> None:
    with harness.connect(clock=tenure.SystemClock()) as store:
        first = store.claim("j", "a", harness.short_ttl)
        lease = store.claim("j", "b", harness.ttl, wait=60)
        assert (lease.owner, lease.token > first.token) == ("b", True)


def test_a_wait_that_ends_raises_or_returns_none(harness: Harness, store: tenure.Store) -> None:
    store.claim("j", "a", 120)
    with pytest.raises(tenure.AlreadyClaimed):
        store.claim("j", "b", harness.ttl, wait=0.2)
    assert store.claim_next("b", harness.ttl, wait=0.2) is None
    store.complete(store.claim("done", "a", harness.ttl))
    with pytest.raises(tenure.JobCompleted):  # a completed job is never waited for
        store.claim("done", "b", harness.ttl, wait=60)


@pytest.mark.parametrize("wait", [-1, float("nan"), float("inf"), "5", True])
def test_a_bad_wait_is_refused(store: tenure.Store, wait: Any) -> None:
    with pytest.raises(tenure.InvalidArgument, match="wait"):
        store.claim_next("w", 5.0, wait=wait)
    with pytest.raises(tenure.InvalidArgument, match="wait"):
        store.claim("j", "w", 5.0, wait=wait)
    assert store.get("j") is None


def test_only_changes_that_can_free_a_job_wake_waiters() -> None:
    def job(state: tenure.JobState) -> tenure.Change:
        return tenure.Change(job=tenure.JobStatus("j", state))

    assert [waiting.may_free_a_job(job(s)) for s in tenure.JobState] == [True, False, True, False, False]
    assert waiting.may_free_a_job(tenure.Change(removed="j"))
    rejection = tenure.Rejection("j", tenure.Op.RENEW, "a", 1, "b", 2, 0.0, "stale")
    assert not waiting.may_free_a_job(tenure.Change(rejection=rejection))


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
