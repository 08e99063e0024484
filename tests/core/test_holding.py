"""What a holder can count on: ``lost`` at the deadline whatever hangs, renewals that no hung
request starves, a completion that may be retried, and ``on_lost`` callbacks.

The memory store stands in for a store whose requests hang or fail: what is under test is
the renewal machinery, which is the same over every backend. Waits are bounded by generous
timeouts that only an old, broken renewer runs into; nothing here times how fast it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

import tenure
from tenure.aio import AsyncStore, ThreadedBackend
from tenure.backends.memory import MemoryBackend
from tenure.core.renewal import RENEWAL_WORKERS
from tests.aio_sync import SyncStore

PATIENCE = 20.0  # seconds: far beyond every deadline below; reached only by a renewer that fails


class HangingBackend(MemoryBackend):
    """Renewals of jobs in ``hang`` block until ``unblock`` is set, like a store that stopped
    answering (up to the client's timeout); completions fail or land as told."""

    def __init__(self, clock: tenure.Clock) -> None:
        super().__init__(clock)
        self.hang: set[str] = set()
        self.unblock = threading.Event()
        self.hanging = threading.Semaphore(0)  # released once per renewal that hangs
        self.fail_complete = 0  # completions to refuse before writing anything
        self.lose_complete_answer = 0  # completions to apply, then fail as if the answer was lost
        self.failure: Exception = tenure.BackendUnavailable("connection reset")  # how they fail
        self.hang_release = False  # releases block until ``unblock`` is set, then time out

    def renew(self, lease: tenure.Lease, ttl: float) -> tenure.Lease:
        if lease.job_id in self.hang:
            self.hanging.release()
            self.unblock.wait()
            raise tenure.BackendUnavailable("timed out")
        return super().renew(lease, ttl)

    def renew_many(self, renewals: Sequence[tuple[tenure.Lease, float]]) -> list[tenure.Lease | tenure.LeaseError]:
        if any(lease.job_id in self.hang for lease, _ in renewals):  # one request: it hangs as a whole
            self.hanging.release()
            self.unblock.wait()
            raise tenure.BackendUnavailable("timed out")
        return super().renew_many(renewals)

    def complete(self, lease: tenure.Lease, result: bytes | None) -> None:
        if self.fail_complete:
            self.fail_complete -= 1
            raise self.failure
        super().complete(lease, result)
        if self.lose_complete_answer:
            self.lose_complete_answer -= 1
            raise self.failure

    def release(self, lease: tenure.Lease) -> None:
        if self.hang_release:
            self.unblock.wait(PATIENCE * 2)  # a client's timeout, longer than any wait of a test
            raise tenure.BackendUnavailable("timed out")
        super().release(lease)


@pytest.fixture
def system() -> Iterator[tuple[tenure.Store, HangingBackend]]:
    backend = HangingBackend(tenure.SystemClock())
    store = tenure.Store(backend, clock=tenure.SystemClock())
    yield store, backend
    backend.unblock.set()
    store.close()


@pytest.fixture(params=["sync", "aio"])
def manual(request: pytest.FixtureRequest) -> Iterator[tuple[tenure.Store, HangingBackend, tenure.ManualClock]]:
    """A store on an injected clock; "aio": a tenure.aio store behind the conformance suite's
    sync face (tests/aio_sync.py), so these cases check AsyncHeldLease as well."""
    clock = tenure.ManualClock()
    backend = HangingBackend(clock)
    if request.param == "sync":
        store: Any = tenure.Store(backend, clock=clock)
    else:
        store = SyncStore.around(lambda: AsyncStore(ThreadedBackend(backend), clock=clock))
    yield store, backend, clock
    backend.unblock.set()
    store.close()


# -- item 10: lost at the deadline, and no starvation -------------------------------------------
def test_lost_is_set_at_the_deadline_while_a_renewal_hangs(system: tuple[tenure.Store, HangingBackend]) -> None:
    store, backend = system
    backend.hang.add("j")
    held = store.hold("j", owner="a", ttl=0.6)
    assert backend.hanging.acquire(timeout=PATIENCE), "the first renewal never started"
    # The renewal is still hanging; the deadline (0.57 s after the claim) passes meanwhile.
    assert held.lost.wait(PATIENCE), "lost was not set while a renewal hung past the deadline"
    assert not backend.unblock.is_set()
    assert held.remaining() <= 0
    assert "deadline" in (held.lost_reason or "")


def test_hung_renewals_do_not_starve_the_other_leases(system: tuple[tenure.Store, HangingBackend]) -> None:
    store, backend = system
    stuck = [f"stuck{i}" for i in range(RENEWAL_WORKERS + 1)]
    backend.hang.update(stuck)
    for job in stuck:  # each in a request of its own: held once the one before hangs
        store.hold(job, owner="a", ttl=0.6)  # renewed after 0.2 s: the first renewal hangs
        assert backend.hanging.acquire(timeout=PATIENCE), "a stuck lease was never renewed"
    # Every kept renewal thread now waits on a request that hangs.
    healthy = store.hold("healthy", owner="a", ttl=0.9)
    first = healthy.lease.expires_at
    # The healthy lease must go on being renewed while they hang.
    renewed_at = healthy.lease.expires_at
    end = time.monotonic() + PATIENCE
    while healthy.lease.expires_at == renewed_at and not healthy.lost.is_set() and time.monotonic() < end:
        time.sleep(0.05)  # real time: the renewal thread works on its own schedule
    assert healthy.lease.expires_at > max(first, renewed_at), "renewals starved behind hung requests"
    healthy.check()


# -- item 11: a completion may be retried --------------------------------------------------------
def test_a_failed_complete_may_be_retried_and_renewals_go_on(
        manual: tuple[tenure.Store, HangingBackend, tenure.ManualClock]) -> None:
    store, backend, clock = manual
    held = store.hold("j", owner="a", ttl=10.0)
    backend.fail_complete = 1
    with pytest.raises(tenure.BackendUnavailable):
        held.complete(b"done")
    clock.advance(4.0)
    assert held._renew_once() is True  # what the renewal thread does when its turn comes
    held.check()
    held.complete(b"done")
    status = store.get("j")
    assert status is not None and status.state is tenure.JobState.COMPLETED
    assert not held.lost.is_set() and store.rejections() == []


def test_a_completion_whose_answer_was_lost_is_found_on_retry(
        manual: tuple[tenure.Store, HangingBackend, tenure.ManualClock]) -> None:
    store, backend, _ = manual
    held = store.hold("j", owner="a", ttl=10.0)
    backend.lose_complete_answer = 1
    with pytest.raises(tenure.BackendUnavailable):
        held.complete(b"done")
    held.complete(b"done")  # refused as "already completed" by this very lease: it landed
    assert not held.lost.is_set() and held.finished
    with pytest.raises(tenure.LeaseLost, match="already completed"):
        held.complete(b"again")


@pytest.mark.parametrize(("failure", "landed"), [
    (RuntimeError("a client library's bug"), False),
    (tenure.OutcomeUnknown("the connection broke before the answer"), False),
    (tenure.OutcomeUnknown("the connection broke before the answer"), True),
], ids=["unexpected-error", "not-landed", "landed"])
def test_a_completion_of_unknown_outcome_is_settled_by_leaving_the_block(
        manual: tuple[tenure.Store, HangingBackend, tenure.ManualClock], caplog: pytest.LogCaptureFixture,
        failure: Exception, landed: bool) -> None:
    store, backend, clock = manual
    backend.failure = failure
    if landed:
        backend.lose_complete_answer = 1
    else:
        backend.fail_complete = 1
    with store.hold("j", owner="a", ttl=10.0) as held:
        with pytest.raises(type(failure)):
            held.complete(b"done")
        assert not held.finished  # held and renewed until the outcome is known
        if not landed:
            clock.advance(4.0)
            assert held._renew_once() is True  # what the renewal thread does when its turn comes
            held.check()
    # Leaving the block releases it; a release refused because the completion landed is no error.
    status = store.get("j")
    assert status is not None
    assert status.state is (tenure.JobState.COMPLETED if landed else tenure.JobState.PENDING)
    assert held.finished and not held.lost.is_set()
    assert "failed" not in caplog.text


def test_closing_the_store_waits_a_bounded_time_for_releases_that_hang(
        manual: tuple[tenure.Store, HangingBackend, tenure.ManualClock], monkeypatch: pytest.MonkeyPatch) -> None:
    store, backend, _ = manual
    for bounded in ("tenure.core.renewal", "tenure.aio.store", "tenure.aio.backend"):
        monkeypatch.setattr(f"{bounded}.CLOSE_WAIT", 0.2)  # seconds of real time
    before = set(threading.enumerate())
    held = store.hold("j", owner="a", ttl=10.0)
    backend.hang_release = True  # the store stopped answering: the release waits for its timeout
    closing = threading.Thread(target=store.close, daemon=True)
    closing.start()
    closing.join(PATIENCE)
    assert not closing.is_alive(), "close() waited on a release that hangs"
    assert held.lost.is_set() and "the store was closed" in (held.lost_reason or "")
    backend.unblock.set()  # the release times out at last: every thread the store started ends
    for thread in set(threading.enumerate()) - before - {closing}:
        if thread.name.startswith("tenure"):
            thread.join(PATIENCE)
            assert not thread.is_alive(), f"{thread.name} outlived the request that hung"


def test_a_holder_that_releases_on_hearing_the_store_closed_still_frees_the_job() -> None:
    # The release the closing store sends waits for the holder's lock; a holder that releases
    # first, in on_lost, must send it itself, or the job stays leased until its TTL runs out.
    clock = tenure.ManualClock()
    backend = MemoryBackend(clock)
    store = tenure.Store(backend, clock=clock)
    held = store.hold("j", owner="a", ttl=30.0)
    released = threading.Event()

    def give_back(lost: Any) -> None:
        lost.release()
        released.set()

    held.on_lost(give_back)
    store.close()
    assert released.wait(PATIENCE)
    status = tenure.Store(backend, clock=clock).get("j")
    assert status is not None and status.state is tenure.JobState.PENDING, status


def test_a_renewal_after_a_completion_that_landed_does_not_lose_the_lease(
        manual: tuple[tenure.Store, HangingBackend, tenure.ManualClock]) -> None:
    store, backend, _ = manual
    held = store.hold("j", owner="a", ttl=10.0)
    backend.lose_complete_answer = 1
    with pytest.raises(tenure.BackendUnavailable):
        held.complete()
    assert held._renew_once() is False
    assert held.finished and not held.lost.is_set()


def test_a_complete_refused_for_a_stale_lease_still_ends_the_hold(
        manual: tuple[tenure.Store, HangingBackend, tenure.ManualClock]) -> None:
    store, _, _ = manual
    held = store.hold("j", owner="a", ttl=10.0)
    store.force_expire("j")
    store.claim("j", owner="b", ttl=10.0)
    with pytest.raises(tenure.StaleLease):
        held.complete()
    assert held.lost.is_set() and held.finished


# -- on_lost --------------------------------------------------------------------------------------
def test_on_lost_is_called_once_and_a_raising_callback_is_only_logged(
        manual: tuple[tenure.Store, HangingBackend, tenure.ManualClock],
        caplog: pytest.LogCaptureFixture) -> None:
    store, _, _ = manual
    held = store.hold("j", owner="a", ttl=10.0)
    called: list[str] = []
    done = threading.Event()

    def broken(h: tenure.HeldLease) -> None:
        called.append("broken")
        raise RuntimeError("callback bug")

    def second(h: tenure.HeldLease) -> None:
        called.append(f"second {h.job_id} {h.lost_reason}")
        done.set()

    held.on_lost(broken)
    held.on_lost(second)
    store.force_expire("j")
    store.claim("j", owner="b", ttl=10.0)
    assert held._renew_once() is False
    with pytest.raises(tenure.LeaseLost):
        held.check()  # a second way to notice: no second call
    assert done.wait(PATIENCE)
    assert called[0] == "broken" and called[1].startswith("second j ") and len(called) == 2
    assert "callback bug" in caplog.text
    late: list[tenure.HeldLease] = []
    held.on_lost(late.append)  # already lost: called at once, here
    assert late == [held]


def test_on_lost_is_called_at_the_deadline_while_a_renewal_hangs(
        system: tuple[tenure.Store, HangingBackend]) -> None:
    store, backend = system
    backend.hang.add("j")
    held = store.hold("j", owner="a", ttl=0.6)
    lost = threading.Event()
    held.on_lost(lambda h: lost.set())
    assert lost.wait(PATIENCE), "on_lost was not called while a renewal hung past the deadline"
    assert not backend.unblock.is_set()


def test_on_lost_is_not_called_for_a_completed_lease(
        manual: tuple[tenure.Store, HangingBackend, tenure.ManualClock]) -> None:
    store, _, clock = manual
    held = store.hold("j", owner="a", ttl=10.0)
    called: list[tenure.HeldLease] = []
    held.on_lost(called.append)
    held.complete()
    clock.advance(20.0)
    with pytest.raises(tenure.LeaseLost):
        held.check()  # past the deadline: check() still refuses work
    assert called == []


@pytest.mark.parametrize("store_closed", [False, True], ids=["renewer-running", "store-closed"])
def test_a_callback_may_use_the_lease_without_deadlock(
        manual: tuple[tenure.Store, HangingBackend, tenure.ManualClock], store_closed: bool) -> None:
    # complete() notices the loss while it holds the lease's lock; a callback run there (as it
    # was once the renewer was closed) deadlocked on release().
    store, _, _ = manual
    if store_closed and not isinstance(store, tenure.Store):
        pytest.skip("a closed tenure.aio store answers nothing (BackendUnavailable), so it refuses nothing")
    held = store.hold("j", owner="a", ttl=10.0)
    seen: list[str] = []
    done = threading.Event()
    tasks: list[asyncio.Future[None]] = []  # held until done: the loop keeps only weak references

    def callback(h: tenure.HeldLease) -> None:
        h.on_lost(lambda _: seen.append("registered from a callback"))
        with pytest.raises(tenure.LeaseLost):
            h.check()
        try:
            released = h.release()
        except tenure.LeaseError:
            released = None
        if inspect.isawaitable(released):  # tenure.aio: the callback runs in the loop
            tasks.append(asyncio.ensure_future(finish(released)))
            return
        seen.append("used the lease")
        done.set()

    async def finish(released: Any) -> None:
        with contextlib.suppress(tenure.LeaseError):
            await released
        seen.append("used the lease")
        done.set()

    held.on_lost(callback)
    store.force_expire("j")
    store.claim("j", owner="b", ttl=10.0)

    def notice() -> None:
        if store_closed:
            store.close()  # ends every lease it holds: the loss is noticed here, the pool closed
            seen.append("closed")
            return
        with pytest.raises(tenure.StaleLease):
            held.complete()  # refused: the loss is noticed here, with the lease's lock held
        seen.append("refused")

    noticing = threading.Thread(target=notice, daemon=True)
    noticing.start()
    noticing.join(PATIENCE)
    assert not noticing.is_alive(), "noticing the loss deadlocked with an on_lost callback"
    assert done.wait(PATIENCE)
    assert sorted(seen) == ["closed" if store_closed else "refused", "registered from a callback", "used the lease"]


def test_a_lease_released_before_it_is_lost_never_calls_back(
        manual: tuple[tenure.Store, HangingBackend, tenure.ManualClock]) -> None:
    store, _, clock = manual
    held = store.hold("j", owner="a", ttl=10.0)
    called: list[tenure.HeldLease] = []
    held.on_lost(called.append)
    held.release()
    clock.advance(20.0)
    with pytest.raises(tenure.LeaseLost):
        held.check()
    held.on_lost(called.append)  # registered after: still nothing to hear
    assert called == []


class JumpClock(tenure.SystemClock):
    """The system clock, whose monotonic reading can jump ahead as after a suspend."""

    def __init__(self) -> None:
        self.jumped = 0.0

    def monotonic(self) -> float:
        return super().monotonic() + self.jumped


def test_lost_is_set_soon_after_a_suspend_though_no_renewal_is_due() -> None:
    """The scheduler sleeps on the OS's monotonic clock, which misses a suspend: it must not
    sleep until the next renewal (100 s away here) before noticing the deadline passed."""
    clock = JumpClock()
    with tenure.Store(MemoryBackend(clock), clock=clock) as store:
        held = store.hold("j", owner="a", ttl=300.0)
        time.sleep(0.1)  # real time: let the scheduler fall asleep until the renewal is due
        clock.jumped = 400.0  # the machine was suspended for 400 s
        assert held.lost.wait(PATIENCE), "lost was not set until the next renewal was due"
        assert "deadline" in (held.lost_reason or "")


def test_a_lease_that_cannot_be_held_is_given_back() -> None:
    # A store closed while (or before) hold() claims: the claim must not leave the job blocked.
    store = tenure.connect("memory://")
    store.close()
    with pytest.raises(tenure.LeaseError, match="closed"):
        store.hold("j", "a", 10.0)
    status = store.get("j")
    assert status is not None and status.state is tenure.JobState.PENDING


class PartedBackend(HangingBackend):
    RENEW_BATCH = 2  # leases per request of renew_many, as ZooKeeper's multis are bounded


@pytest.mark.parametrize("flavour", ["sync", "aio"])
def test_a_batch_renews_a_request_at_a_time_each_part_counted_from_its_own(flavour: str) -> None:
    """A batch of held leases is renewed ``RENEW_BATCH`` at a time, and each part's leases
    are renewed as soon as its answer is in: a later part that hangs past the deadline loses
    only its own. (One ``renew_many`` of the whole batch lost them all: a lease counted as
    renewed only once the last request was answered.)"""
    backend = PartedBackend(tenure.SystemClock())
    store: Any = tenure.Store(backend, clock=tenure.SystemClock()) if flavour == "sync" else \
        SyncStore.around(lambda: AsyncStore(ThreadedBackend(backend), clock=tenure.SystemClock()))
    try:
        backend.hang.add("j5")  # in the last part: [j0, j1], [j2, j3], [j4, j5]
        held = [store.hold(f"j{i}", owner="a", ttl=2.0) for i in range(6)]  # due together
        first = [h.lease.expires_at for h in held]
        assert held[5].lost.wait(PATIENCE), "the part that hangs was never lost"
        assert held[4].lost.is_set()  # the same request
        for h, expired in zip(held[:4], first, strict=False):
            assert not h.lost.is_set(), f"{h.job_id} was lost behind a later part that hung"
            assert h.lease.expires_at > expired
    finally:
        backend.unblock.set()
        store.close()
