"""The job life cycle's rules on one record (``tenure.core.transitions``, ``tenure.core.lifecycle``),
free of any store: what every backend's step, and PostgreSQL's statements, are held to."""

from __future__ import annotations

import dataclasses

import pytest

import tenure
from tenure.core import codec, lifecycle, transitions
from tenure.core.records import JobRecord, JobState

NOW = 1_000.0


def _leased(attempts: int = 1, max_attempts: int | None = None, until: float = NOW + 10) -> JobRecord:
    return JobRecord("j", JobState.LEASED, owner="a", token=attempts, lease_until=until, ttl=10.0,
                     submitted_at=NOW - 100, claimed_at=NOW, attempts=attempts, max_attempts=max_attempts)


@pytest.mark.parametrize(("attempts", "draw", "expected"), [
    (1, 0.0, 0.5), (1, 0.999, 0.9995), (2, 0.0, 1.0), (3, 0.5, 3.0), (11, 0.0, 300.0), (10**6, 0.0, 300.0),
    (0, 0.0, 0.5),  # a fail with no claim counted (a record from before attempts) waits as the first
])
def test_the_backoff_doubles_per_attempt_is_capped_and_jittered_to_half_or_more(
        attempts: int, draw: float, expected: float) -> None:
    retry = lifecycle.DEFAULT.retry(draw=draw)
    assert retry.seconds(attempts) == pytest.approx(expected)


def test_a_holders_retry_in_overrides_the_backoff() -> None:
    assert lifecycle.DEFAULT.retry(7.5, draw=0.0).seconds(5) == 7.5
    assert lifecycle.DEFAULT.retry(0.0).seconds(5) == 0.0


def test_claims_count_attempts_and_release_gives_one_back() -> None:
    claimed = transitions.claim(None, "j", "a", 10.0, NOW, max_attempts=3)
    assert (claimed.attempts, claimed.max_attempts, transitions.lease_of(claimed).attempt) == (1, 3, 1)
    released = transitions.release(claimed, NOW)
    assert released.attempts == 0 and released.state is JobState.PENDING
    assert transitions.claim(released, "j", "b", 10.0, NOW).token == 2


def test_a_fail_schedules_the_job_or_parks_it_on_the_last_attempt() -> None:
    retry = lifecycle.Retry(after=5.0)
    failed = transitions.fail(_leased(1, 2), "boom", retry, NOW)
    assert failed.state is JobState.PENDING and failed.claimable_at == NOW + 5.0 and failed.owner is None
    assert transitions.judged(failed, NOW) is JobState.SCHEDULED
    assert transitions.judged(failed, NOW + 5.0) is JobState.PENDING
    assert not transitions.is_claimable(failed, NOW + 4.999) and transitions.is_claimable(failed, NOW + 5.0)
    with pytest.raises(tenure.JobScheduled):
        transitions.claim(failed, "j", "b", 10.0, NOW + 1)
    parked = transitions.fail(_leased(2, 2), "again", retry, NOW)
    assert parked.state is JobState.PARKED and parked.claimable_at is None and parked.failed_at == NOW
    with pytest.raises(tenure.JobParked):
        transitions.claim(parked, "j", "b", 10.0, NOW + 10**6)
    assert transitions.status(parked, NOW).parked_at == NOW


def test_a_lease_that_runs_out_on_the_last_attempt_is_parked_without_a_write() -> None:
    last = _leased(2, 2, until=NOW + 1)
    assert transitions.judged(last, NOW) is JobState.LEASED
    assert transitions.judged(last, NOW + 1) is JobState.PARKED and transitions.is_parked(last, NOW + 1)
    assert transitions.candidate_at(last) is None  # an index never offers it
    assert transitions.candidate_at(_leased(1, 2, until=NOW + 1)) == NOW + 1
    with pytest.raises(tenure.JobParked):
        transitions.claim(last, "j", "b", 10.0, NOW + 1)
    status = transitions.status(last, NOW + 1)
    assert status.state is JobState.PARKED and status.parked_at == NOW + 1
    assert transitions.state_at(transitions.status(last, NOW), NOW + 1) is JobState.PARKED


def test_a_lease_the_store_ended_early_is_claimed_only_once_its_holder_must_have_stopped() -> None:
    """etcd-io/etcd#15247: the store reports a lease it ended before its holder's deadline
    (``ended_early``, running to when the holder must have stopped); the core refuses a claim
    until then with ``NotYetClaimable`` (which ``Store.claim`` sits out), not ``AlreadyClaimed``."""
    ended = dataclasses.replace(_leased(1, 1, until=NOW + 2.5), ended_early=True)
    with pytest.raises(tenure.NotYetClaimable) as refused:
        transitions.claim(ended, "j", "b", 10.0, NOW)
    assert (refused.value.retry_after, refused.value.expires_at, refused.value.token) == (2.5, NOW + 2.5, 1)
    assert not transitions.is_next(ended, NOW)  # claim_next passes it over
    with pytest.raises(tenure.AlreadyClaimed) as held:  # an operator's requeue: held, as any live lease
        transitions.requeue(ended, "j", 0.0, NOW)
    assert not isinstance(held.value, tenure.NotYetClaimable)
    with pytest.raises(tenure.JobParked):  # waited out: judged as any lease that ran out
        transitions.claim(ended, "j", "b", 10.0, NOW + 2.5)
    with pytest.raises(tenure.AlreadyClaimed) as live:
        transitions.claim(_leased(), "j", "b", 10.0, NOW)
    assert not isinstance(live.value, tenure.NotYetClaimable)


def test_requeue_resets_attempts_unless_the_job_is_missing_completed_or_held() -> None:
    parked = transitions.fail(_leased(2, 2), None, lifecycle.Retry(after=0.0), NOW)
    again = transitions.requeue(parked, "j", 3.0, NOW)
    assert (again.state, again.attempts, again.claimable_at, again.token) == (JobState.PENDING, 0, NOW + 3.0, 2)
    with pytest.raises(tenure.JobNotFound):
        transitions.requeue(None, "j", 0.0, NOW)
    with pytest.raises(tenure.JobCompleted):
        transitions.requeue(transitions.complete(_leased(), None, NOW), "j", 0.0, NOW)
    with pytest.raises(tenure.AlreadyClaimed):
        transitions.requeue(_leased(), "j", 0.0, NOW)
    assert transitions.requeue(_leased(until=NOW), "j", 0.0, NOW).state is JobState.PENDING  # expired


def test_a_new_run_starts_over_and_a_submit_of_anything_else_changes_nothing() -> None:
    done = transitions.complete(dataclasses.replace(_leased(3, 5), last_error="x"), None, NOW)
    run = transitions.submit(done, "j", NOW, max_attempts=2, delay=4.0)
    assert run is not None and (run.attempts, run.max_attempts, run.last_error, run.claimable_at) == (
        0, 2, None, NOW + 4.0)
    parked = transitions.fail(_leased(1, 1), None, lifecycle.Retry(after=0.0), NOW)
    assert transitions.submit(parked, "j", NOW) is None


@pytest.mark.parametrize(("field", "value"), [
    ("attempts", -1), ("attempts", 1.5), ("attempts", True), ("max_attempts", 0), ("max_attempts", "3"),
    ("last_error", 7), ("claimable_at", float("nan")), ("failed_at", "yesterday"),
])
def test_a_stored_life_field_that_no_store_writes_is_a_corrupt_record(field: str, value: object) -> None:
    with pytest.raises(tenure.CorruptRecord):
        codec.job_record("key", "j", "pending", None, 0, None, None, NOW, None, None, None, 1, None,
                         **{field: value})


def test_a_listing_judges_a_job_with_a_life_cycle_as_a_read_does() -> None:
    for rec, now in [(_leased(2, 2, until=NOW + 1), NOW + 2),
                     (transitions.fail(_leased(1, 3), "e", lifecycle.Retry(after=9.0), NOW), NOW + 1),
                     (transitions.fail(_leased(3, 3), "e", lifecycle.Retry(after=9.0), NOW), NOW + 1),
                     (_leased(), NOW)]:
        listed = codec.listed_status(rec.job_id, rec.state.value, rec.owner, rec.token, rec.runs, rec.lease_until,
                                     rec.ttl, rec.submitted_at, rec.claimed_at, rec.renewed_at, rec.completed_at,
                                     now, **codec.life_fields(rec))
        assert listed == transitions.status(rec, now)
    read = codec.job_record("k", "j", "pending", None, 0, None, None, NOW, None, None, None, 1, None)
    assert (read.attempts, read.max_attempts, read.claimable_at) == (0, None, None)  # a record from before


class _SteppedClock(tenure.ManualClock):
    """A wall clock an administrator may step back (time() only; monotonic stays monotonic)."""

    def step_back(self, seconds: float) -> None:
        self._stepped = getattr(self, "_stepped", 0.0) + seconds

    def time(self) -> float:
        return super().time() - getattr(self, "_stepped", 0.0)


def test_a_memory_store_hands_out_a_pending_job_after_its_clock_stepped_back() -> None:
    clock = _SteppedClock()
    with tenure.connect("memory://", clock=clock) as store:
        store.submit("ready")
        store.submit("later", delay=60)
        clock.step_back(5)
        lease = store.claim_next(owner="a", ttl=10)
        assert lease is not None and lease.job_id == "ready"  # queued "in the future" now, still due
        assert store.claim_next(owner="a", ttl=10) is None  # a scheduled job still waits for its time
