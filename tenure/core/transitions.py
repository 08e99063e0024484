"""The lease state machine over one job record, as pure functions.

Backends that keep a whole record per job (memory, SQLite) run these inside their own
atomic step, so the protocol is written once. Stored states are pending, leased and
completed; "expired" is a leased record whose ``lease_until`` has passed by store time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tenure.core.errors import AlreadyClaimed, JobCompleted, TokensExhausted
from tenure.core.records import (
    STORED_STATES,
    HistoryEvent,
    JobRecord,
    JobState,
    JobStatus,
    Lease,
    Op,
    Reason,
    Rejection,
    lease_over,
)
from tenure.core.validation import LAST_TOKEN

__all__ = ["STORED_STATES", "JobRecord"]  # moved to records; still importable from here

def is_claimable(rec: JobRecord | None, now: float) -> bool:
    if rec is None or rec.state is JobState.PENDING:
        return True
    return rec.state is JobState.LEASED and rec.lease_until is not None and lease_over(rec.lease_until, now)


def is_next(rec: JobRecord | None, now: float) -> bool:
    """Whether ``claim_next`` may take the job: claimable, and with a token a claim can follow."""
    return rec is not None and rec.token < LAST_TOKEN and is_claimable(rec, now)


def status(rec: JobRecord, now: float) -> JobStatus:
    state = rec.state
    if state is JobState.LEASED and is_claimable(rec, now):
        state = JobState.EXPIRED
    return JobStatus(
        job_id=rec.job_id,
        state=state,
        owner=rec.owner,
        token=rec.token,
        expires_at=rec.lease_until,
        submitted_at=rec.submitted_at,
        claimed_at=rec.claimed_at,
        renewed_at=rec.renewed_at,
        completed_at=rec.completed_at,
        runs=rec.runs,
        result=rec.result,
    )


def submit(rec: JobRecord | None, job_id: str, now: float) -> JobRecord | None:
    """A new pending record, a new run of a completed one, or None (nothing to change)."""
    if rec is None:
        return JobRecord(job_id=job_id, state=JobState.PENDING, submitted_at=now)
    if rec.state is JobState.COMPLETED:
        return dataclasses.replace(
            rec,
            state=JobState.PENDING,
            owner=None,
            lease_until=None,
            ttl=None,
            submitted_at=now,
            claimed_at=None,
            renewed_at=None,
            completed_at=None,
            runs=rec.runs + 1,
            result=None,
        )
    return None


def claim(rec: JobRecord | None, job_id: str, owner: str, ttl: float, now: float) -> JobRecord:
    if rec is not None and not is_claimable(rec, now):
        if rec.state is JobState.COMPLETED:
            raise JobCompleted(job_id)
        raise AlreadyClaimed(job_id, rec.owner, rec.token, rec.lease_until, now)
    if rec is not None and rec.token >= LAST_TOKEN:
        raise TokensExhausted(job_id, rec.token)
    base = rec or JobRecord(job_id=job_id, state=JobState.PENDING, submitted_at=now)
    return dataclasses.replace(
        base,
        state=JobState.LEASED,
        owner=owner,
        token=base.token + 1,
        lease_until=now + ttl,
        ttl=ttl,
        claimed_at=now,
        renewed_at=None,
    )


def check(rec: JobRecord | None, lease: Lease, now: float) -> Reason | None:
    """Why a renew/complete/release with ``lease`` must be refused, or None if it may go on."""
    if rec is None:
        return Reason.NOT_FOUND
    if lease.token > rec.token:
        return Reason.NEVER_ISSUED
    if lease.token != rec.token:
        return Reason.SUPERSEDED
    if rec.state not in (JobState.LEASED, JobState.COMPLETED):  # given back: no owner left to match
        return Reason.NOT_LEASED
    if lease.owner != rec.owner:
        return Reason.OWNER_MISMATCH
    if rec.state is JobState.COMPLETED:
        return Reason.COMPLETED
    if rec.lease_until is None or lease_over(rec.lease_until, now):
        return Reason.EXPIRED
    return None


def rejection(rec: JobRecord | None, op: Op, lease: Lease, reason: Reason, now: float) -> Rejection:
    return Rejection(
        job_id=lease.job_id,
        op=op,
        owner=lease.owner,
        token=lease.token,
        current_owner=rec.owner if rec else None,
        current_token=rec.token if rec else 0,
        at=now,
        reason=str(reason),
    )


Change = Callable[[JobRecord, float], JobRecord]  # what a holder's step does to a current record


def holder_step(rec: JobRecord | None, op: Op, lease: Lease, change: Change, now: float) -> JobRecord | Rejection:
    """The decision on a renew, complete or release: ``change`` applied if ``lease`` is current,
    else the rejection to audit, in the same atomic step as the write it replaces."""
    reason = check(rec, lease, now)
    if reason is None:
        assert rec is not None  # check() refuses a missing record
        return change(rec, now)
    return rejection(rec, op, lease, reason, now)


def renew(rec: JobRecord, ttl: float, now: float) -> JobRecord:
    return dataclasses.replace(rec, lease_until=now + ttl, ttl=ttl, renewed_at=now)


def complete(rec: JobRecord, result: bytes | None, now: float) -> JobRecord:
    return dataclasses.replace(
        rec, state=JobState.COMPLETED, lease_until=None, completed_at=now, result=result
    )


def release(rec: JobRecord, now: float) -> JobRecord:
    # The token stays: the next claim must still get a higher one.
    return dataclasses.replace(rec, state=JobState.PENDING, owner=None, lease_until=None, ttl=None)


def force_expire(rec: JobRecord, now: float) -> JobRecord:
    return dataclasses.replace(rec, lease_until=now)


def lease_of(rec: JobRecord) -> Lease:
    assert rec.owner is not None and rec.lease_until is not None and rec.ttl is not None
    return Lease(rec.job_id, rec.owner, rec.token, rec.lease_until, rec.ttl)


def state_at(job: JobStatus, now: float) -> JobState:
    """A status's state judged at ``now`` rather than when it was read."""
    if job.state in (JobState.LEASED, JobState.EXPIRED) and job.expires_at is not None:
        return JobState.EXPIRED if lease_over(job.expires_at, now) else JobState.LEASED
    return job.state


def history_event(rec: JobRecord, op: Op, now: float, actor: str | None = None) -> HistoryEvent:
    """The history entry of an accepted change; an operator's ``actor`` stands in for the owner."""
    return HistoryEvent(rec.job_id, op, actor or rec.owner, rec.token, now, rec.lease_until)
