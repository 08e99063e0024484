"""``read_facts``: the record a step decides on when a store reports more than a record."""

from __future__ import annotations

import dataclasses
import logging

import pytest

import tenure
from tenure.core import read_facts, transitions
from tenure.core.clock import ManualClock, boot_clock
from tenure.core.records import JobRecord, JobState, Lease, Op


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


def test_a_lease_the_store_ended_early_is_live_for_its_holder_while_its_deadline_runs_only(
        caplog: pytest.LogCaptureFixture) -> None:
    """etcd-io/etcd#15247: the store shows the lease ended (``lease_until`` passed); its holder
    may act for ``left`` more by this process's watch. The holder whose safe deadline runs on
    the machine's clock finds it live (its commit restores it); one whose deadline is on a
    clock given to ``connect`` (tests) vouches for nothing; anyone else waits ``left`` out."""
    caplog.set_level(logging.INFO, read_facts.early_end_log.name)
    stored = JobRecord("j", JobState.LEASED, "a", 3, lease_until=99.0, ttl=5.0)
    ended = read_facts.EndedEarly(stored, left=4.0)
    runs = boot_clock() + 60.0  # a deadline a minute ahead on the machine's clock: no sleep
    holder = Lease("j", "a", 3, expires_at=104.0, ttl=5.0, deadline=runs)

    live = read_facts.ended_early(ended, 100.0, holder, None)
    assert live == dataclasses.replace(stored, lease_until=100.0 + 1e-3) and not live.ended_early
    assert transitions.check(live, holder, 100.0) is None  # renewed, and so restored
    assert [r.getMessage() for r in caplog.records] == [
        "the store ended the lease of 'j' (token 3) early; restoring it"]

    manual = ManualClock()  # the deadline is on the clock a test gave connect: it vouches for nothing
    assert read_facts.ended_early(ended, 100.0, holder, manual) is stored  # any holder's step alike
    assert transitions.check(stored, holder, 100.0) is transitions.Reason.EXPIRED
    passed = dataclasses.replace(holder, deadline=boot_clock() - 1.0)
    unbounded = dataclasses.replace(holder, deadline=float("inf"))
    other = Lease("j", "b", 3, expires_at=104.0, ttl=5.0, deadline=runs)
    earlier = Lease("j", "a", 2, expires_at=104.0, ttl=5.0, deadline=runs)
    for lease in (passed, unbounded, other, earlier):
        assert read_facts.ended_early(ended, 100.0, lease, None) is stored
    assert len(caplog.records) == 1  # only the restore is logged

    waiting = read_facts.seen(ended, Op.CLAIM, 100.0)  # a claim (or force_expire, submit) waits it out
    assert waiting == dataclasses.replace(stored, lease_until=104.0, ended_early=True)
    with pytest.raises(tenure.NotYetClaimable) as refused:
        transitions.claim(waiting, "j", "b", 5.0, 100.0)
    assert refused.value.retry_after == 4.0
    assert not transitions.is_next(waiting, 100.0)  # claim_next passes it over
    over = read_facts.seen(read_facts.EndedEarly(stored, left=0.0), Op.CLAIM, 100.0)
    assert over is stored and transitions.claim(over, "j", "b", 5.0, 100.0).token == 4
    assert read_facts.restamped(ended, Op.CLAIM, 100.0) is None  # nothing to write
