"""``read_facts``: the record a step decides on when a store reports more than a record."""

from __future__ import annotations

import dataclasses

from tenure.core import read_facts, transitions
from tenure.core.records import JobRecord, JobState, Op


def test_a_vanished_job_goes_on_from_its_generation_for_a_claim_and_a_submit_only() -> None:
    gone = read_facts.Vanished("j", 4)
    assert read_facts.seen(gone, Op.CLAIM, 50.0) == JobRecord("j", JobState.PENDING, token=4, submitted_at=50.0)
    resubmitted = transitions.submit(read_facts.seen(gone, Op.SUBMIT, 50.0), "j", 50.0)
    assert resubmitted is not None and (resubmitted.state, resubmitted.token) == (JobState.PENDING, 5)
    for op in (Op.RENEW, Op.COMPLETE, Op.RELEASE, Op.FAIL, Op.REQUEUE, Op.EXPIRE):
        assert read_facts.seen(gone, op, 50.0) is None
    assert read_facts.seen(read_facts.Vanished("j", 0), Op.CLAIM, 50.0) is None  # never claimed: a new job
    assert read_facts.restamped(gone, Op.CLAIM, 50.0) is None


def test_only_a_lease_an_earlier_clock_stamped_is_read_as_renewed_and_only_a_claim_writes_it() -> None:
    lease = JobRecord("j", JobState.LEASED, "a", 3, lease_until=10.0, ttl=5.0)
    old = read_facts.OtherClock(lease)
    renewed = dataclasses.replace(lease, lease_until=105.0)
    assert read_facts.seen(old, Op.RENEW, 100.0) == renewed
    assert read_facts.restamped(old, Op.CLAIM, 100.0) == renewed
    assert read_facts.restamped(old, Op.RENEW, 100.0) is None
    pending = JobRecord("j", JobState.PENDING, token=3, claimable_at=120.0)
    assert read_facts.seen(read_facts.OtherClock(pending), Op.CLAIM, 100.0) == pending
    assert read_facts.restamped(read_facts.OtherClock(pending), Op.CLAIM, 100.0) is None
    assert read_facts.seen(lease, Op.CLAIM, 100.0) is lease
