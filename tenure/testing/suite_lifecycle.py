"""A job's life cycle beyond one lease (docs/protocol.md, "Attempts, failures, parked and
scheduled jobs"), on every backend: attempts counted and given back, ``fail`` with and
without ``retry_in``, the backoff's bounds, parking by a failure and by a lease that ran out
on the last attempt, ``requeue``, delays judged by the store's clock.

Waits are for the store's clock: an injected ManualClock is advanced, a server's clock is
waited for in real time (the shorter of ``kit.short_ttl`` and 1 s). A store that times delays
by its own means (etcd: a lease) may make a job claimable up to its
``Characteristics.delay_late`` after ``claimable_at``: ``wait_claimable`` waits that out in
real time, and no longer.
"""

from __future__ import annotations

import concurrent.futures
import time

import pytest

import tenure
from tenure.testing.kit import Kit


def wait_until(store: tenure.Store, at: float) -> None:
    """Return once the store's clock has passed ``at``."""
    if isinstance(store.clock, tenure.ManualClock):
        store.clock.advance(max(0.0, at - store.now()) + 0.001)
        return
    while store.now() <= at:
        time.sleep(min(0.05, max(at - store.now(), 0.005)))


def wait_claimable(store: tenure.Store, job_id: str, at: float) -> None:
    """Return once the scheduled job ``job_id``, claimable from ``at``, is claimable: past ``at``
    by the store's clock, then within the store's ``delay_late`` in real time (a store that
    times delays apart from its clock, etcd, ends them that late at most)."""
    wait_until(store, at)
    late = time.monotonic() + store.characteristics.delay_late
    while _status(store, job_id).state is tenure.JobState.SCHEDULED:
        assert time.monotonic() < late, f"{job_id} still scheduled {store.characteristics.delay_late} s after {at}"
        time.sleep(0.05)  # polling the store, whose delay ends on its own clock


def _delay(kit: Kit) -> float:
    """A delay the tests wait out: long enough for the checks made before it passes, short
    (a store that rounds it up, etcd, declares how late it may end: ``delay_late``)."""
    return min(kit.short_ttl, 1.0)


def _status(store: tenure.Store, job_id: str) -> tenure.JobStatus:
    found = store.get(job_id)
    assert found is not None, job_id
    return found


def _spend(store: tenure.Store, job_id: str, kit: Kit, attempts: int) -> tenure.Lease:
    """Claim ``job_id`` ``attempts`` times, failing all but the last claim with retry_in=0."""
    lease = store.claim(job_id, owner="w", ttl=kit.ttl)
    for _ in range(attempts - 1):
        store.fail(lease, "again", retry_in=0)
        lease = store.claim(job_id, owner="w", ttl=kit.ttl)
    return lease


class LifecycleTests:
    def test_a_claim_counts_an_attempt_and_a_release_gives_it_back(self, kit: Kit, store: tenure.Store) -> None:
        store.submit("j")
        lease = store.claim("j", owner="a", ttl=kit.ttl)
        assert lease.attempt == 1 and _status(store, "j").attempts == 1
        store.release(lease)
        assert _status(store, "j").attempts == 0
        again = store.claim("j", owner="a", ttl=kit.ttl)
        assert again.attempt == 1 and again.token > lease.token

    def test_a_lease_that_ran_out_keeps_its_attempt(self, kit: Kit, store: tenure.Store) -> None:
        store.submit("j")
        lost = store.claim("j", owner="a", ttl=kit.short_ttl)
        kit.expire(store, lost)
        assert _status(store, "j").state is tenure.JobState.EXPIRED
        second = store.claim("j", owner="b", ttl=kit.ttl)
        assert second.attempt == 2 and _status(store, "j").attempts == 2

    def test_fail_with_retry_in_makes_the_job_claimable_after_it_by_store_time(
            self, kit: Kit, store: tenure.Store) -> None:
        store.submit("j")
        lease = store.claim("j", owner="a", ttl=kit.ttl)
        before = store.now()
        store.fail(lease, "boom", retry_in=_delay(kit))
        after = store.now()
        job = _status(store, "j")
        assert job.state is tenure.JobState.SCHEDULED and job.owner is None
        assert job.last_error == "boom" and job.attempts == 1 and job.token == lease.token
        assert job.claimable_at is not None and before + _delay(kit) <= job.claimable_at <= after + _delay(kit)
        with pytest.raises(tenure.JobScheduled):
            store.claim("j", owner="b", ttl=kit.ttl)
        assert store.claim_next(owner="b", ttl=kit.ttl) is None
        wait_claimable(store, "j", job.claimable_at)
        again = store.claim_next(owner="b", ttl=kit.ttl)
        assert again is not None and again.job_id == "j" and again.attempt == 2 and again.token > lease.token
        assert [e.op for e in store.history("j")][-2:] == [tenure.Op.FAIL, tenure.Op.CLAIM]

    def test_fail_with_retry_in_zero_is_claimable_at_once(self, kit: Kit, store: tenure.Store) -> None:
        store.submit("j")
        store.fail(store.claim("j", owner="a", ttl=kit.ttl), retry_in=0)
        job = _status(store, "j")
        assert job.state is tenure.JobState.PENDING and job.claimable_at is None and job.last_error is None
        lease = store.claim_next(owner="b", ttl=kit.ttl)
        assert lease is not None and lease.attempt == 2

    def test_fail_without_retry_in_waits_the_stores_backoff_within_its_bounds(self, kit: Kit) -> None:
        # retry_base * retry_factor ** (attempt - 1), at most retry_max, jittered to half or more.
        base, factor = 100.0, 2.0
        with kit.connect(retry_base=base, retry_factor=factor, retry_max=250.0) as store:
            for attempt, (low, high) in enumerate([(base / 2, base), (base * factor / 2, base * factor),
                                                   (125.0, 250.0)], start=1):
                job_id = f"j{attempt}"
                lease = _spend(store, job_id, kit, attempt)
                assert lease.attempt == attempt
                before = store.now()
                store.fail(lease, f"attempt {attempt}")
                after = store.now()
                claimable_at = _status(store, job_id).claimable_at
                assert claimable_at is not None
                assert before + low <= claimable_at <= after + high, (attempt, claimable_at - before)

    def test_failing_the_last_attempt_parks_the_job(self, kit: Kit, store: tenure.Store) -> None:
        store.submit("j", max_attempts=2)
        lease = _spend(store, "j", kit, 2)
        assert lease.attempt == 2
        store.fail(lease, "second")
        job = _status(store, "j")
        assert job.state is tenure.JobState.PARKED and job.attempts == 2 and job.max_attempts == 2
        assert job.last_error == "second" and job.parked_at is not None and job.owner is None
        with pytest.raises(tenure.JobParked) as refused:
            store.claim("j", owner="b", ttl=kit.ttl)
        assert "second" in str(refused.value) and refused.value.attempts == 2
        assert store.claim_next(owner="b", ttl=kit.ttl) is None
        assert store.summary().parked == 1
        assert [j.job_id for j in store.page(states=["parked"]).jobs] == ["j"]
        store.submit("j")  # a parked job is not submitted again: requeue is the way back
        assert _status(store, "j").state is tenure.JobState.PARKED

    def test_a_lease_that_ran_out_on_the_last_attempt_parks_the_job(self, kit: Kit, store: tenure.Store) -> None:
        store.submit("j", max_attempts=1)
        lease = store.claim("j", owner="a", ttl=kit.short_ttl)
        kit.expire(store, lease)
        job = _status(store, "j")
        assert job.state is tenure.JobState.PARKED and job.attempts == 1 and job.parked_at is not None
        with pytest.raises(tenure.JobParked):
            store.claim("j", owner="b", ttl=kit.ttl)
        assert store.claim_next(owner="b", ttl=kit.ttl) is None
        with pytest.raises(tenure.StaleLease):  # its holder cannot bring it back either
            store.renew(lease)

    def test_requeue_resets_the_attempts_and_is_in_history_with_its_actor(
            self, kit: Kit, store: tenure.Store) -> None:
        store.submit("j", max_attempts=1)
        lease = store.claim("j", owner="a", ttl=kit.ttl)
        store.fail(lease, "poison")
        store.requeue("j", actor="operator", token=lease.token)
        job = _status(store, "j")
        assert job.state is tenure.JobState.PENDING and job.attempts == 0 and job.max_attempts == 1
        last = store.history("j")[-1]
        assert last.op is tenure.Op.REQUEUE and last.owner == "operator"
        again = store.claim_next(owner="b", ttl=kit.ttl)
        assert again is not None and again.job_id == "j" and again.attempt == 1 and again.token > lease.token

    def test_requeue_with_a_delay_schedules_the_job(self, kit: Kit, store: tenure.Store) -> None:
        store.submit("j", max_attempts=1)
        store.fail(store.claim("j", owner="a", ttl=kit.ttl))
        store.requeue("j", delay=_delay(kit))
        job = _status(store, "j")
        assert job.state is tenure.JobState.SCHEDULED and job.claimable_at is not None
        assert store.claim_next(owner="b", ttl=kit.ttl) is None
        wait_claimable(store, "j", job.claimable_at)
        assert store.claim("j", owner="b", ttl=kit.ttl).attempt == 1

    def test_requeue_refuses_a_missing_completed_or_held_job_and_a_changed_token(
            self, kit: Kit, store: tenure.Store) -> None:
        with pytest.raises(tenure.JobNotFound):
            store.requeue("missing")
        assert store.get("missing") is None
        store.submit("done")
        store.complete(store.claim("done", owner="a", ttl=kit.ttl))
        with pytest.raises(tenure.JobCompleted):
            store.requeue("done")
        held = store.claim("held", owner="a", ttl=kit.ttl)
        with pytest.raises(tenure.AlreadyClaimed):
            store.requeue("held")
        store.fail(held, retry_in=kit.ttl * 10)
        with pytest.raises(tenure.TokenChanged):
            store.requeue("held", token=held.token + 1)
        assert _status(store, "held").state is tenure.JobState.SCHEDULED
        assert _status(store, "done").state is tenure.JobState.COMPLETED

    def test_a_stale_fail_is_refused_and_audited(self, kit: Kit, store: tenure.Store) -> None:
        store.submit("j")
        old = store.claim("j", owner="a", ttl=kit.short_ttl)
        kit.expire(store, old)
        new = store.claim("j", owner="b", ttl=kit.ttl)
        with pytest.raises(tenure.StaleLease):
            store.fail(old, "late")
        job = _status(store, "j")
        assert job.state is tenure.JobState.LEASED and job.owner == "b" and job.last_error is None
        refused = store.rejections(job_id="j")[-1]
        assert refused.op is tenure.Op.FAIL and refused.owner == "a" and refused.token == old.token
        assert refused.current_token == new.token

    def test_a_delayed_job_is_not_claimed_before_it_is_claimable(self, kit: Kit, store: tenure.Store) -> None:
        # Seven requests below must all come before the delay ends: 2 s more than the others
        # wait, as a loaded machine made them take over a second.
        store.submit("later", delay=_delay(kit) + 2.0)
        store.submit("now")
        job = _status(store, "later")
        assert job.state is tenure.JobState.SCHEDULED and job.claimable_at is not None
        assert store.summary().scheduled == 1 and store.summary().pending == 1
        first = store.claim_next(owner="a", ttl=kit.ttl)
        assert first is not None and first.job_id == "now"
        assert store.claim_next(owner="a", ttl=kit.ttl) is None
        with pytest.raises(tenure.JobScheduled) as refused:
            store.claim("later", owner="a", ttl=kit.ttl)
        assert refused.value.claimable_at == job.claimable_at
        wait_claimable(store, "later", job.claimable_at)
        assert _status(store, "later").state is tenure.JobState.PENDING
        lease = store.claim_next(owner="a", ttl=kit.ttl)
        assert lease is not None and lease.job_id == "later"
        assert _status(store, "later").claimed_at is not None

    def test_a_blocking_claim_next_takes_a_delayed_job_once_it_is_claimable(
            self, kit: Kit, store: tenure.Store) -> None:
        store.submit("later", delay=_delay(kit))
        claimable_at = _status(store, "later").claimable_at
        assert claimable_at is not None
        pool = concurrent.futures.ThreadPoolExecutor(1)
        try:
            waiting = pool.submit(store.claim_next, owner="a", ttl=kit.ttl, wait=_delay(kit) + 30)
            if isinstance(store.clock, tenure.ManualClock):
                time.sleep(0.1)  # the claim is waiting: its first attempt found nothing
                wait_until(store, claimable_at)
            lease = waiting.result(timeout=_delay(kit) + 30)
        finally:
            pool.shutdown(wait=False)
        assert lease is not None and lease.job_id == "later"
        claimed_at = _status(store, "later").claimed_at
        assert claimed_at is not None and claimed_at >= claimable_at

    def test_a_blocking_claim_waits_for_a_scheduled_job(self, kit: Kit, store: tenure.Store) -> None:
        if isinstance(store.clock, tenure.ManualClock):
            pytest.skip("an injected clock does not move while the claim waits")
        store.submit("later", delay=_delay(kit))
        lease = store.claim("later", owner="a", ttl=kit.ttl, wait=_delay(kit) + 30)
        claimable_at = _status(store, "later").claimed_at
        assert lease.attempt == 1 and claimable_at is not None

    def test_max_attempts_defaults_to_the_stores_option(self, kit: Kit) -> None:
        with kit.connect(max_attempts=3) as store:
            store.submit("submitted")
            store.claim("claimed", owner="a", ttl=kit.ttl)
            store.submit("own", max_attempts=5)
            assert _status(store, "submitted").max_attempts == 3
            assert _status(store, "claimed").max_attempts == 3
            assert _status(store, "own").max_attempts == 5
        with kit.connect() as store:
            store.submit("unlimited")
            assert _status(store, "unlimited").max_attempts is None

    def test_a_new_run_of_a_completed_job_starts_its_attempts_again(self, kit: Kit, store: tenure.Store) -> None:
        store.submit("j", max_attempts=4)
        lease = _spend(store, "j", kit, 2)
        store.complete(lease)
        store.submit("j", max_attempts=2)
        job = _status(store, "j")
        assert job.state is tenure.JobState.PENDING and job.attempts == 0 and job.max_attempts == 2
        assert job.last_error is None and job.runs == 2

    def test_a_held_lease_fails_and_is_not_released_on_leaving(self, kit: Kit, store: tenure.Store) -> None:
        store.submit("j")
        with store.hold("j", owner="a", ttl=kit.ttl) as held:
            held.fail("bad input\nline 2 — ünïcode", retry_in=0)
        job = _status(store, "j")
        assert job.state is tenure.JobState.PENDING and job.attempts == 1
        assert job.last_error == "bad input\nline 2 — ünïcode"
        assert [e.op for e in store.history("j")][-1] is tenure.Op.FAIL

    @pytest.mark.parametrize("call", [
        lambda s, lease: s.submit("x", max_attempts=0),
        lambda s, lease: s.submit("x", max_attempts=True),
        lambda s, lease: s.submit("x", delay=-1),
        lambda s, lease: s.submit("x", delay=float("nan")),
        lambda s, lease: s.submit_many(["x", "y"], delay=10**9),
        lambda s, lease: s.fail(lease, retry_in=-0.5),
        lambda s, lease: s.fail(lease, "x" * 5000),
        lambda s, lease: s.fail(lease, "nul \x00 byte"),
        lambda s, lease: s.fail(lease, b"bytes"),
        lambda s, lease: s.requeue("held", delay="soon"),
    ], ids=["max-0", "max-bool", "delay-negative", "delay-nan", "delay-huge", "retry-negative", "error-long",
            "error-nul", "error-bytes", "requeue-delay-text"])
    def test_bad_life_cycle_input_is_refused_and_writes_nothing(self, kit: Kit, store: tenure.Store,
                                                                 call: object) -> None:
        lease = store.claim("held", owner="a", ttl=kit.ttl)
        with pytest.raises(tenure.InvalidArgument):
            call(store, lease)  # type: ignore[operator]
        assert store.get("x") is None and store.get("y") is None
        job = _status(store, "held")
        assert job.state is tenure.JobState.LEASED and job.attempts == 1 and job.last_error is None

