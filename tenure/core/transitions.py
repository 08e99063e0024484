"""The lease state machine over one job record, as pure functions.

Backends that keep a whole record per job (memory, SQLite) run these inside their own
atomic step, so the protocol is written once. Stored states are pending, leased, completed
and parked; "expired" is a leased record whose ``lease_until`` has passed by store time,
"scheduled" a pending one whose ``claimable_at`` has not come, and a leased record that ran
out on its last allowed attempt is parked without a write (``is_parked``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict

from tenure.core.errors import (
    AlreadyClaimed,
    JobCompleted,
    JobNotFound,
    JobParked,
    JobScheduled,
    NotYetClaimable,
    TokensExhausted,
)
from tenure.core.lifecycle import Retry
from tenure.core.records import (
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

if TYPE_CHECKING:  # typing.Unpack of a TypedDict for **kwargs is Python 3.12's (PEP 692)
    from typing_extensions import Unpack

_NEW = JobRecord(job_id="", state=JobState.PENDING)  # every other field at its default


class RecordChanges(TypedDict, total=False):
    """``JobRecord``'s fields as ``_replaced``'s keywords, so mypy checks each name and type
    (tests/core/test_transitions.py checks this lists every field)."""

    job_id: str
    state: JobState
    owner: str | None
    token: int
    lease_until: float | None
    ttl: float | None
    submitted_at: float | None
    claimed_at: float | None
    renewed_at: float | None
    completed_at: float | None
    runs: int
    result: bytes | None
    attempts: int
    max_attempts: int | None
    last_error: str | None
    claimable_at: float | None
    failed_at: float | None
    ended_early: bool


def _replaced(rec: JobRecord, /, **changes: Unpack[RecordChanges]) -> JobRecord:
    """``dataclasses.replace(rec, **changes)`` without its loop over the fields and the frozen
    ``__init__``'s setattr per field (a third of a transition's cost, two per claim+complete):
    the copy's attributes are the record's, then ``changes`` (their names and types checked by
    mypy through ``RecordChanges``). JobRecord has no ``__post_init__`` and no field kept out
    of ``__init__``. ``rec`` is positional only: Python compares each keyword collected into
    ``changes`` with the name of every other parameter first."""
    new = object.__new__(JobRecord)
    vars(new).update(vars(rec), **changes)
    return new


def is_claimable(rec: JobRecord | None, now: float) -> bool:
    if rec is None:
        return True
    if rec.state is JobState.PENDING:
        return rec.claimable_at is None or rec.claimable_at <= now
    return (rec.state is JobState.LEASED and rec.lease_until is not None and lease_over(rec.lease_until, now)
            and not rec.out_of_attempts)


def is_parked(rec: JobRecord, now: float) -> bool:
    """Parked: stored so by a failure on the last attempt, or a lease on it that ran out."""
    if rec.state is JobState.PARKED:
        return True
    return (rec.state is JobState.LEASED and rec.out_of_attempts and rec.lease_until is not None
            and lease_over(rec.lease_until, now))


def candidate_at(rec: JobRecord) -> float | None:
    """When a record becomes claimable with no write, what a store's claimable index keeps:
    a lease's end (not on its last attempt), a scheduled job's ``claimable_at``. None means
    two things by state: a pending job without a delay is claimable already (index it at the
    time it became pending, for claim_next's order); any other record (completed, parked, a
    lease on its last attempt) never becomes claimable by time alone (leave it out)."""
    if rec.state is JobState.LEASED:
        return None if rec.out_of_attempts else rec.lease_until
    if rec.state is JobState.PENDING:
        return rec.claimable_at
    return None


def is_next(rec: JobRecord | None, now: float) -> bool:
    """Whether ``claim_next`` may take the job: claimable, and with a token a claim can follow."""
    return rec is not None and rec.token < LAST_TOKEN and is_claimable(rec, now)


def judge(stored: JobState, lease_until: float | None, claimable_at: float | None, spent: bool,
          now: float) -> JobState:
    """A stored state as a reader sees it at ``now`` (expired, scheduled, parked judged), from
    the fields that decide it (``spent``: ``JobRecord.out_of_attempts``); listings call it
    without building the record."""
    if stored is JobState.LEASED and lease_until is not None and lease_over(lease_until, now):
        return JobState.PARKED if spent else JobState.EXPIRED
    if stored is JobState.PENDING and claimable_at is not None and claimable_at > now:
        return JobState.SCHEDULED
    return stored


def judged(rec: JobRecord, now: float) -> JobState:
    """The record's state as a reader sees it at ``now``."""
    return judge(rec.state, rec.lease_until, rec.claimable_at, rec.out_of_attempts, now)


def shown_times(stored: JobState, state: JobState, lease_until: float | None, claimable_at: float | None,
                failed_at: float | None) -> tuple[float | None, float | None]:
    """A status's ``claimable_at`` (scheduled jobs) and ``parked_at`` (parked ones: the last
    failure, or the end of the last lease allowed)."""
    return (claimable_at if state is JobState.SCHEDULED else None,
            None if state is not JobState.PARKED else failed_at if stored is JobState.PARKED else lease_until)


def status(rec: JobRecord, now: float) -> JobStatus:
    """The record as callers see it at the store's ``now``: a lease that ran out shows as
    expired, a job delayed past ``now`` as scheduled, one out of attempts as parked."""
    state = judged(rec, now)
    claimable_at, parked_at = shown_times(rec.state, state, rec.lease_until, rec.claimable_at, rec.failed_at)
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
        attempts=rec.attempts,
        max_attempts=rec.max_attempts,
        last_error=rec.last_error,
        claimable_at=claimable_at,
        parked_at=parked_at,
    )


def _after(now: float, delay: float) -> float | None:
    return now + delay if delay > 0 else None


def submit(rec: JobRecord | None, job_id: str, now: float, max_attempts: int | None = None,
           delay: float = 0.0) -> JobRecord | None:
    """A new pending record, a new run of a completed one, or None (nothing to change).
    ``max_attempts`` (None: unlimited) and ``delay`` (seconds of store time before a claim
    may take it) are the new run's."""
    if rec is None:
        return JobRecord(job_id=job_id, state=JobState.PENDING, submitted_at=now, max_attempts=max_attempts,
                         claimable_at=_after(now, delay))
    if rec.state is JobState.COMPLETED:
        return _replaced(
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
            attempts=0,
            max_attempts=max_attempts,
            last_error=None,
            claimable_at=_after(now, delay),
            failed_at=None,
        )
    return None


def refuse_claim(rec: JobRecord, job_id: str, now: float) -> None:
    """Raise why ``rec`` cannot be claimed at ``now``; return if it can."""
    if is_claimable(rec, now):
        if rec.token >= LAST_TOKEN:
            raise TokensExhausted(job_id, rec.token)
        return
    if rec.state is JobState.COMPLETED:
        raise JobCompleted(job_id)
    if is_parked(rec, now):
        raise JobParked(job_id, rec.attempts, rec.last_error)
    if rec.state is JobState.PENDING and rec.claimable_at is not None:
        raise JobScheduled(job_id, rec.token, rec.claimable_at, now)
    if rec.ended_early and rec.lease_until is not None:  # the store ended it; its holder may still act
        raise NotYetClaimable(job_id, rec.owner, rec.token, rec.lease_until, rec.lease_until - now)
    raise AlreadyClaimed(job_id, rec.owner, rec.token, rec.lease_until, now)


def claim(rec: JobRecord | None, job_id: str, owner: str, ttl: float, now: float,
          max_attempts: int | None = None) -> JobRecord:
    """The claimed record; ``max_attempts`` is the limit of a job the claim creates."""
    if rec is None:  # made at once, not made pending and then claimed (two copies)
        return _replaced(_NEW, job_id=job_id, state=JobState.LEASED, owner=owner, token=1, lease_until=now + ttl,
                         ttl=ttl, submitted_at=now, claimed_at=now, attempts=1, max_attempts=max_attempts)
    refuse_claim(rec, job_id, now)
    return _replaced(
        rec,
        state=JobState.LEASED,
        owner=owner,
        token=rec.token + 1,
        lease_until=now + ttl,
        ttl=ttl,
        claimed_at=now,
        renewed_at=None,
        attempts=rec.attempts + 1,
        claimable_at=None,
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
    return _replaced(rec, lease_until=now + ttl, ttl=ttl, renewed_at=now)


def complete(rec: JobRecord, result: bytes | None, now: float) -> JobRecord:
    return _replaced(
        rec, state=JobState.COMPLETED, lease_until=None, completed_at=now, result=result
    )


def release(rec: JobRecord, now: float) -> JobRecord:
    # The token stays: the next claim must still get a higher one. The attempt is given back:
    # the worker did not try.
    return _replaced(rec, state=JobState.PENDING, owner=None, lease_until=None, ttl=None,
                               attempts=max(rec.attempts - 1, 0))


def fail(rec: JobRecord, error: str | None, retry: Retry, now: float) -> JobRecord:
    """The holder tried and failed: pending again once ``retry`` says (for this attempt), or
    parked if that was the last attempt allowed. The attempt counts; the token stays."""
    if rec.out_of_attempts:
        return _replaced(rec, state=JobState.PARKED, owner=None, lease_until=None, ttl=None,
                                   last_error=error, failed_at=now, claimable_at=None)
    return _replaced(rec, state=JobState.PENDING, owner=None, lease_until=None, ttl=None, last_error=error,
                               failed_at=now, claimable_at=_after(now, retry.seconds(rec.attempts)))


def requeue(rec: JobRecord | None, job_id: str, delay: float, now: float) -> JobRecord:
    """An operator's fresh start for a job that is not held: its attempts reset, pending
    (after ``delay``). A live lease must be ended first (``force_expire``); a completed job
    is submitted again instead."""
    if rec is None:
        raise JobNotFound(job_id)
    if rec.state is JobState.COMPLETED:
        raise JobCompleted(job_id)
    if rec.state is JobState.LEASED and rec.lease_until is not None and not lease_over(rec.lease_until, now):
        raise AlreadyClaimed(job_id, rec.owner, rec.token, rec.lease_until, now)
    return _replaced(rec, state=JobState.PENDING, owner=None, lease_until=None, ttl=None, attempts=0,
                               claimable_at=_after(now, delay))


def force_expire(rec: JobRecord, now: float) -> JobRecord:
    return _replaced(rec, lease_until=now)


def lease_of(rec: JobRecord) -> Lease:
    assert rec.owner is not None and rec.lease_until is not None and rec.ttl is not None
    return Lease(rec.job_id, rec.owner, rec.token, rec.lease_until, rec.ttl, attempt=rec.attempts)


def state_at(job: JobStatus, now: float) -> JobState:
    """A status's state judged at ``now`` rather than when it was read."""
    if job.state in (JobState.LEASED, JobState.EXPIRED) and job.expires_at is not None:
        if not lease_over(job.expires_at, now):
            return JobState.LEASED
        spent = job.max_attempts is not None and job.attempts >= job.max_attempts
        return JobState.PARKED if spent else JobState.EXPIRED
    if job.state is JobState.SCHEDULED and job.claimable_at is not None and job.claimable_at <= now:
        return JobState.PENDING
    return job.state


def history_event(rec: JobRecord, op: Op, now: float, actor: str | None = None) -> HistoryEvent:
    """The history entry of an accepted change; an operator's ``actor`` stands in for the owner."""
    return HistoryEvent(rec.job_id, op, actor or rec.owner, rec.token, now, rec.lease_until)


def replaced(event: HistoryEvent) -> tuple[str, int] | None:
    """The claim (job id, token) whose earlier renewal event ``event`` replaces, in the same
    atomic step, or None: it replaces nothing. A claim keeps one renewal event, its latest
    (with the lease's new ``expires_at``), so thousands of renewals a second do not push
    claims, completions, failures and requeues out of a history of bounded retention; every
    other event is kept (docs/protocol.md, "History")."""
    return (event.job_id, event.token) if event.op is REPLACING else None


REPLACING = Op.RENEW  # the operation whose event replaces its claim's earlier one (``replaced``)
