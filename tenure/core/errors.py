"""The one exception tree of tenure.

Every error tenure raises on purpose derives from :class:`LeaseError`::

    LeaseError
    ├── InvalidArgument (also ValueError)   bad job id, owner, TTL, URL or option; nothing written
    ├── AlreadyClaimed                      the job is held by a lease that has not expired
    │   └── NotYetClaimable                 the store ended the lease early enough that its holder
    │                                       may still trust it; claimable after ``retry_after``
    ├── JobCompleted                        the job is completed; submit() it again for a new run
    ├── TokensExhausted                     the job's token is the highest a claim issues: no claim
    │                                       can follow it; nothing written
    ├── TokenChanged                        an operator's confirmed token is no longer the job's
    │                                       current one (force_expire with token=); nothing changed
    ├── JobNotFound (also KeyError)         an operation needs a job that does not exist
    ├── StoreNotFound                       the store a URL names is not there and ``create=false``
    │                                       forbids making it; nothing was created
    ├── StaleLease                          renew/complete/release with an owner or token that no
    │                                       longer matches, or after expiry by the store's clock
    ├── StaleToken                          a destination fence saw a token lower than it admitted,
    │                                       or (proven by the store) one whose lease has ended
    ├── ForgedToken                         a destination fence was shown a token nobody proved: a bad
    │                                       or missing signature, or one the store never issued
    ├── LeaseLost                           a held lease can no longer be trusted (renewal failed or
    │                                       the safe local deadline passed)
    ├── CorruptRecord                       a record in the store that tenure cannot read
    └── BackendUnavailable                  the store cannot be reached, timed out or refused access
        ├── AuthenticationFailed            wrong or missing credentials
        ├── OutcomeUnknown                  a write was sent but its answer was lost: it may or may
        │                                   not have been applied (never reported as refused)
        └── Outraced                        other writers changed the job under every attempt of
                                            an optimistic write; nothing was written, try again

Backends map their client library's errors to these in one place each, keeping the
original as ``__cause__`` (``raise ... from exc``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tenure.core.shown import when

if TYPE_CHECKING:
    from tenure.core.records import HistoryEvent, Rejection


MAX_QUOTED = 40  # characters of caller input an error message quotes, at most


def quoted(value: object, limit: int = MAX_QUOTED) -> str:
    """``repr`` of caller input for an error message, cut to ``limit`` characters of text.

    Every message that quotes a job id, owner, resource or key goes through here, so no
    message grows with its input (a 256-character job id, a 100 kB value refused).
    """
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} characters)"
    if isinstance(value, int) and value.bit_length() > 4 * limit:  # repr() of a huge int is slow, or refused
        return f"an int of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= limit + 2 else f"{text[:limit]}... ({len(text)} characters)"


class LeaseError(Exception):
    """Root of every error tenure raises on purpose."""


class InvalidArgument(LeaseError, ValueError):
    """An argument, URL or option is malformed or out of range. Nothing was written."""


class AlreadyClaimed(LeaseError):
    """The job is held by another lease that has not expired by the store's clock."""

    def __init__(self, job_id: str, owner: str | None, token: int, expires_at: float | None,
                 now: float | None = None) -> None:
        # ``now``: the store's clock when it refused, so the message says how long is left.
        super().__init__(f"job {quoted(job_id)} is held by {quoted(owner)} (token {token}) "
                         f"until {when(expires_at, now)}")
        self.job_id = job_id
        self.owner = owner
        self.token = token
        self.expires_at = expires_at


class NotYetClaimable(AlreadyClaimed):
    """The store ended the lease, but its holder may still be within its safe deadline.

    etcd (3.5.16 too) can end a lease before its TTL ran out (etcd-io/etcd#15247), so a
    lease etcd ended is claimed only once its TTL has passed on the claimer's own clock since
    it first saw it ended. ``Store.claim`` waits this out by itself; ``claim_next`` moves on.
    """

    def __init__(self, job_id: str, owner: str | None, token: int, expires_at: float | None,
                 retry_after: float) -> None:
        super().__init__(job_id, owner, token, expires_at)
        self.args = (f"job {quoted(job_id)}: the lease of {quoted(owner)} (token {token}) ended in the store; "
                     f"claimable in {retry_after:.2f} s, once its holder must have stopped",)
        self.retry_after = retry_after


class JobScheduled(AlreadyClaimed):
    """The job is pending but not claimable yet: it was submitted or requeued with a delay, or
    failed and waits out its retry backoff. A blocking claim (``wait=``) waits until it is."""

    def __init__(self, job_id: str, token: int, claimable_at: float, now: float | None = None) -> None:
        super().__init__(job_id, None, token, claimable_at, now)
        self.args = (f"job {quoted(job_id)} is scheduled: claimable from {when(claimable_at, now)}",)
        self.claimable_at = claimable_at


class JobParked(LeaseError):
    """The job used every attempt it was allowed (``max_attempts``): it is never claimed again
    until an operator requeues it (``Store.requeue``)."""

    def __init__(self, job_id: str, attempts: int, last_error: str | None) -> None:
        told = "" if last_error is None else f"; last error: {quoted(last_error)}"
        super().__init__(f"job {quoted(job_id)} is parked after {attempts} attempt{'s' if attempts != 1 else ''}"
                         f"{told}; requeue it to run it again")
        self.job_id = job_id
        self.attempts = attempts
        self.last_error = last_error


class JobCompleted(LeaseError):
    """The job has been completed; submit it again to start a new run."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {quoted(job_id)} is completed")
        self.job_id = job_id


class TokensExhausted(LeaseError):
    """The job's token is the highest a claim issues (``validation.LAST_TOKEN``): a next claim
    would need a token no store column or fence can hold. Nothing was written; ``claim_next``
    passes over such a job. Only a record written by something else gets there."""

    def __init__(self, job_id: str, token: int) -> None:
        super().__init__(f"job {quoted(job_id)} cannot be claimed again: its token {token} is the highest a claim "
                         "issues; nothing was written (run the work under a new job id)")
        self.job_id = job_id
        self.token = token


class TokenChanged(LeaseError):
    """An operator confirmed one token, but the job's current token is another: nothing changed.

    ``force_expire(job_id, token=N)`` raises it when the job was claimed (or completed) between
    the moment the operator looked and the moment the request reached the store.
    """

    def __init__(self, job_id: str, expected: int, current: int | None) -> None:
        super().__init__(f"job {quoted(job_id)}: token {expected} was confirmed, but the current token is {current}; "
                         "nothing was changed")
        self.job_id = job_id
        self.expected = expected
        self.current = current


class JobNotFound(LeaseError, KeyError):
    """The job does not exist in the store."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {quoted(job_id)} does not exist")
        self.job_id = job_id

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class StoreNotFound(LeaseError):
    """The store a URL names is not there (no SQLite file, or one without tenure's tables; no
    PostgreSQL schema with tenure's tables), and ``create=false`` forbids making it: nothing was
    created or written. The message names the file or schema, never a credential."""


class StaleLease(LeaseError):
    """The store rejected a renew, complete or release made with a stale lease.

    The rejection has been audited; ``rejection`` holds the record the store wrote. When an
    operator ended the lease (``force_expire``), ``ended_by`` is the history's EXPIRE event,
    and the message says so rather than that the lease ran out.
    """

    def __init__(self, rejection: Rejection, ended_by: HistoryEvent | None = None) -> None:
        r = rejection
        why = r.reason if ended_by is None else _operator_ended(r, ended_by)
        super().__init__(
            f"{r.op} of job {quoted(r.job_id)} by {quoted(r.owner)} with token {r.token} rejected: {why}"
            f" ({_current(r)}, token {r.current_token})"
        )
        self.rejection = rejection
        self.ended_by = ended_by


def _current(r: Rejection) -> str:
    return "no current owner" if r.current_owner is None else f"current owner {quoted(r.current_owner)}"


def _operator_ended(r: Rejection, event: HistoryEvent) -> str:
    # force_expire without an actor records the holder as the EXPIRE event's owner: no name then.
    who = "" if event.owner in (None, r.owner) else f" ({quoted(event.owner)})"
    return f"an operator{who} ended the lease at {when(event.at, r.at)}"


class StaleToken(LeaseError):
    """A destination fence rejected a token lower than the highest it has admitted, or one
    whose lease the store says has ended (``why`` says how; ``highest`` is then the store's
    current token for the job)."""

    def __init__(self, resource: str, token: int, highest: int, why: str = "") -> None:
        super().__init__(f"token {token} for {quoted(resource)} is stale: {why or f'{highest} was already admitted'}")
        self.resource = resource
        self.token = token
        self.highest = highest


class ForgedToken(LeaseError):
    """A fence was shown a token it could not prove: nothing was admitted.

    ``why`` says which proof failed (a missing or wrong signature, a token above the store's
    current token for the job, another owner's token). It never quotes the signature.
    """

    def __init__(self, job_id: str, token: int, why: str) -> None:
        super().__init__(f"token {token} of job {quoted(job_id)} is not proven: {why}")
        self.job_id = job_id
        self.token = token
        self.why = why


class LeaseLost(LeaseError):
    """A held lease can no longer be trusted: stop producing effects under it."""


class CorruptRecord(LeaseError):
    """A record in the store could not be read as a tenure record; it is never overwritten.

    ``key`` is the store's key of the record, ``problem`` what is wrong (never the value
    itself), ``job_id`` the job an operation named, where its key does not show it plainly."""

    def __init__(self, key: str, problem: str, job_id: str | None = None) -> None:
        job = "" if job_id is None else f" of job {quoted(job_id)}"
        super().__init__(f"corrupt record {quoted(key, 120)}{job}: {problem}")
        self.key = key
        self.problem = problem
        self.job_id = job_id

    def naming(self, job_id: str) -> CorruptRecord:
        """This error, naming ``job_id`` (the job an operation named) if it names none yet."""
        return self if self.job_id is not None else CorruptRecord(self.key, self.problem, job_id)


class BackendUnavailable(LeaseError):
    """The store could not be reached, timed out, or refused the request."""


class AuthenticationFailed(BackendUnavailable):
    """The store refused the credentials (or their absence)."""


class OutcomeUnknown(BackendUnavailable):
    """A write reached the store, but the connection broke before its answer: it may have been applied.

    Backends that cannot tell raise plain ``BackendUnavailable`` in this case; either way the
    caller must not take it as a refusal (re-read the job, or retry: tokens tell them apart).
    """


class Outraced(BackendUnavailable):
    """Other writers changed the job between the read and the conditional write of every
    attempt (``tenure.core.contention``). Each attempt failed as a whole, so nothing was
    written; the same call may succeed a moment later. Every backend gives up this way."""

    def __init__(self, job_id: str, attempts: int) -> None:
        super().__init__(f"job {quoted(job_id)} changed under every one of {attempts} attempts; "
                         "nothing was written, try again")
        self.job_id = job_id
        self.attempts = attempts
