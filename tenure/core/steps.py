"""The protocol on a record store, free of I/O: what ``RecordBackend`` (sync) and ``tenure.aio``'s
``AsyncRecordBackend`` both carry out, so the logic exists once (issue 17's sans-I/O core).

A *step* is a function of one ``Transaction``: it reads (``load``, ``next_claimables``),
decides with ``transitions`` and buffers its writes (``save``: a record, its operation and its
history event; ``add_rejection``)
for the commit. An ``Operation`` is a step with the job it concerns (``Outraced`` names it) and
what its caller gets back. ``Attempts`` holds the rules for running an operation's step until it
sticks, by the one attempt policy (``Tries``: counts, pauses, ``Outraced``, resends), which
``attempted`` also runs for a store whose attempt is one request (PostgreSQL's statements). A
driver only opens transactions, waits (a pause, a read) and calls these:

    attempts = steps.Attempts(operation)
    while True:
        attempt = attempts.next()                     # Outraced when none is left
        pause contention.pause(attempt.retry) if attempt.retry
        with transaction(fresh=attempt.fresh) as tx:  # commits on leaving
            found = attempts.step(tx)                 # Reread / LeaseError: attempts.retry_after
        if attempts.stuck(tx):                        # not after a conflict or a resend
            return attempts.result(tx, found)

Reads in an event loop: the steps do no I/O of their own and know nothing of asyncio; every
read goes through the transaction, which answers it as its flavour waits. A sync transaction
blocks there and then; an async one (``tenure.aio``) suspends the step, which its driver runs
in a greenlet, while the read is awaited in the loop, and resumes it with the answer
(``tenure.aio.bridge``). Either way a step runs once per transaction, start to end, so the same
plain functions serve both drivers and the sync flavour pays nothing for the async one.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeVar

from tenure.core import batches, contention, read_facts, transitions
from tenure.core.errors import (
    BackendUnavailable,
    CorruptRecord,
    JobNotFound,
    LeaseError,
    Outraced,
    StaleLease,
    TokenChanged,
)
from tenure.core.lifecycle import Retry
from tenure.core.record_transaction import Transaction
from tenure.core.records import JobRecord, JobState, Lease, Op, Rejection, lease_over

S = TypeVar("S")  # what a step returns
R = TypeVar("R")  # what the operation's caller gets


class Reread(Exception):
    """Raised by a step that must not act on a guessed record: run it again on fresh reads."""


class AfterCommit(Exception):
    """Raised by a step whose refusal ``error`` is raised only once the transaction has
    committed the writes the step saved before it (a claim that met a lease an earlier clock
    stamped re-stamps it: ``read_facts``). ``Attempts.step`` keeps it for ``result``."""

    def __init__(self, error: LeaseError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True)
class Operation(Generic[S, R]):
    job_id: str  # the job it concerns, for Outraced
    step: Callable[[Transaction], S]
    finish: Callable[[S], R]  # the caller's answer from what the step returned (as stored)
    attempts: int = contention.ATTEMPTS  # before it gives up with Outraced


@dataclass(frozen=True)
class Batch:
    """Part of a ``submit_many``: one atomic operation, and the jobs' own submissions to run
    instead (``alone``) when it finds a corrupt record (those before it are submitted, then it
    raises); ``alone`` is empty when there is nothing to split: one job, or a whole call that is
    one operation (all of them or none)."""

    whole: Operation[None, None]
    alone: tuple[Operation[None, None], ...]


@dataclass(frozen=True)
class Attempt:
    fresh: bool  # the transaction must read the store, no guesses
    retry: int  # pause ``contention.pause(retry)`` before it; 0 for no pause


# How an attempt that did not stick ended (``Tries.lost``), which decides the next:
COLLIDED: Final = "collided"  # lost a race on what it read: counted, and paused (colliders fall out of step)
REFUTED: Final = "refuted"  # decided on a guess the store refuted: counted, again at once on fresh reads
RESEND: Final = "resend"  # the store asks for the same attempt once more: at once, uncounted
Ending = Literal["collided", "refuted", "resend"]
FIRST = Attempt(fresh=False, retry=0)  # reads as the store likes (it may guess)
AT_ONCE = Attempt(fresh=True, retry=0)


class Tries:
    """The one attempt policy of an operation (issue 27: retries decided in core, once): a
    record transaction's (``Attempts``), a one-request store's (``attempted``: PostgreSQL's
    statements, etcd's requests of many claims or renewals) and a claim_next_many's requests
    (``Claims``). The first attempt reads as the store likes; after one that did not stick
    (``lost``) a retry reads fresh: at once after a refuted guess, after a pause
    (``contention.pause(retry)``, growing with each collision) after a collision; a resend is
    the same attempt again, at once and uncounted (a store that asks for one makes sure its
    resends end). ``Outraced`` once ``count`` attempts were made. The counters start as class
    attributes: nothing to set per operation but what it is."""

    lost: Ending | None = None  # how the last attempt ended; None before the first
    _made = 0  # attempts made, resends not counted
    _retries = 0  # collisions so far: the pause's number
    _fresh = False  # whether the last attempt read fresh (a resend reads as it did)

    def __init__(self, job_id: str, count: int = contention.ATTEMPTS) -> None:
        self.job_id, self.count = job_id, count

    def next(self) -> Attempt:
        """The next attempt, as ``lost`` says; ``Outraced`` when none is left."""
        lost = self.lost
        if lost == RESEND:
            return Attempt(fresh=self._fresh, retry=0)
        if self._made == self.count:
            raise contention.outraced(self.job_id, self.count)
        self._made += 1
        if lost is None:
            return FIRST
        self._fresh = True
        if lost == REFUTED:
            return AT_ONCE  # a wrong guess is no collision
        self._retries += 1
        return Attempt(fresh=True, retry=self._retries)


class Attempts(Tries, Generic[S, R]):
    """An operation's attempts in record transactions (``Tries``' rules): each follows the one
    before; a conflict of fresh reads collided, one of a guess (or a refusal decided on a
    guess, decided again) refuted it; a transaction that sets ``resend`` goes again at once,
    uncounted: with ``conflict`` nothing was written (ZooKeeper: a write found already done,
    left out; etcd: an etcd lease named was gone), without it the commit wrote and the step
    goes once more on what it wrote (etcd: a renewal that found its key moved by another
    connection moves it again)."""

    def __init__(self, operation: Operation[S, R]) -> None:
        self.operation = operation
        self.job_id, self.count = operation.job_id, operation.attempts  # (Tries' own, set here: a call less)
        self._previous: Transaction | None = None

    def step(self, tx: Transaction) -> S | AfterCommit:
        """The operation's step in ``tx``, which first follows the attempt before it; a refusal
        to raise after the commit (``AfterCommit``) as a value, for ``result``."""
        if self._previous is not None:
            tx.follow(self._previous)
        try:
            return self.operation.step(tx)
        except AfterCommit as refused:
            return refused

    def retry_after(self, tx: Transaction | None, exc: Exception) -> bool:
        """The step raised ``exc`` (``Reread`` or a ``LeaseError``): whether to attempt again
        (it was decided on a guess) rather than raise it."""
        if tx is None or not tx.guessed or isinstance(exc, BackendUnavailable):
            return False
        self._previous, self.lost = tx, REFUTED
        return True

    def stuck(self, tx: Transaction) -> bool:
        """After the commit: whether the operation is done (else the step runs again: it lost
        a race, or the store asked for a resend)."""
        if tx.resend:
            self._previous, self.lost = tx, RESEND
            return False
        if tx.conflict:
            self._previous, self.lost = tx, REFUTED if tx.guessed else COLLIDED
            return False
        return True

    def result(self, tx: Transaction, found: S | AfterCommit) -> R:
        if isinstance(found, AfterCommit):
            raise found.error
        return self.operation.finish(_stored(tx, found))


E = TypeVar("E")  # what an attempt yields for its driver to carry out (a request)
A = TypeVar("A")  # what the driver sends back (the request's answer)
T = TypeVar("T")


def attempted(attempt: Callable[[], Generator[E, A, T]], job_id: str, count: int = contention.ATTEMPTS,
              gave_up: Callable[[], T] | None = None) -> Generator[E | contention.Pause, A, T]:
    """``attempt()`` until it returns, under ``Tries``' rules, for a store whose attempt is one
    request written as a sans-I/O generator (PostgreSQL's statements; etcd's Txn of many
    claims or changes): again after a ``contention.Pause`` (yielded for its driver to sleep)
    when it raises ``contention.Collided``, at once when it raises ``contention.Resend``; after
    ``count`` attempts ``gave_up()`` answers (a batch whose items each say what became of
    them), else ``Outraced``: nothing was written."""
    tries: Tries | None = None  # made once an attempt is lost: the first is always made
    lost: Ending
    why: Exception
    while True:
        try:
            return (yield from attempt())
        except contention.Collided as exc:
            lost, why = COLLIDED, exc
        except contention.Resend as exc:
            lost, why = RESEND, exc
        if tries is None:
            tries = Tries(job_id, count)
            tries.next()  # the first, made above
        tries.lost = lost
        try:
            retry = tries.next().retry
        except Outraced as exc:
            if gave_up is None:
                raise exc from why
            return gave_up()
        if retry:
            yield contention.Pause(contention.pause(retry))


def _stored(tx: Transaction, found: Any) -> Any:
    """What a step returned, its saved records as the store wrote them (``Transaction.stored``)."""
    if isinstance(found, JobRecord):
        return tx.stored(found)
    if isinstance(found, Each):
        return Each(tuple(_stored(tx, one) for one in found.outcomes), found.more)
    return found


def _nothing(found: None) -> None:
    return None


def _read(tx: Transaction, job_id: str, op: Op, lease: Lease | None = None) -> tuple[JobRecord | None, bool]:
    """The record the step decides on, from what ``tx.load`` found (``read_facts``), and
    whether a write that finding calls for was saved for the commit; its CorruptRecord naming
    the job the caller named (a key may hold it encoded: etcd's and ZooKeeper's base64url)."""
    try:
        loaded = tx.load(job_id, op, lease)
    except CorruptRecord as exc:
        raise exc.naming(job_id) from exc.__cause__
    if loaded is None or isinstance(loaded, JobRecord):
        return loaded, False  # a record as read: nothing to decide (the common case, kept short)
    if isinstance(loaded, read_facts.EndedEarly):  # the holder's deadline decides: on which clock
        return read_facts.ended_early(loaded, tx.now, lease, tx.injected), False
    write = read_facts.restamped(loaded, op, tx.now)
    if write is not None:
        tx.save(write, read_facts.RESTAMP, None)
    return read_facts.seen(loaded, op, tx.now), write is not None


def _load(tx: Transaction, job_id: str, op: Op, lease: Lease | None = None) -> JobRecord | None:
    return _read(tx, job_id, op, lease)[0]


def _save_passed_over(tx: Transaction) -> None:
    """The writes that claim_next's candidates passed over call for (``read_facts``)."""
    for loaded in tx.passed_over():
        write = read_facts.restamped(loaded, Op.CLAIM, tx.now)
        if write is not None:
            tx.save(write, read_facts.RESTAMP, None)


def submit(job_ids: list[str], actor: str | None, max_attempts: int | None = None,
           delay: float = 0.0) -> Operation[None, None]:
    def step(tx: Transaction) -> None:
        tx.preload(job_ids)
        for job_id in job_ids:
            new = transitions.submit(_load(tx, job_id, Op.SUBMIT), job_id, tx.now, max_attempts, delay)
            if new is not None:
                tx.save(new, Op.SUBMIT, transitions.history_event(new, Op.SUBMIT, tx.now, actor))

    return Operation(job_ids[0] if job_ids else "", step, _nothing)


def submit_many(job_ids: list[str], actor: str | None, size: int,
                weight: Callable[[str], int] | None = None, budget: int = 0, max_attempts: int | None = None,
                delay: float = 0.0) -> list[Batch]:
    """``size`` jobs per transaction (0: all in one, all of them or none), no more than
    ``budget`` of ``weight`` each when given (``batches.batches``)."""
    def one(ids: list[str]) -> Operation[None, None]:
        return submit(ids, actor, max_attempts, delay)

    if not size:
        return [Batch(one(job_ids), ())]
    return [Batch(one(chunk), tuple(one([job_id]) for job_id in chunk) if len(chunk) > 1 else ())
            for chunk in batches.batches(job_ids, size, weight, budget)]


def _claimed(tx: Transaction, rec: JobRecord | None, job_id: str, owner: str, ttl: float,
             max_attempts: int | None) -> JobRecord:
    now = tx.now  # once: a store may read it lazily (ZooKeeper's property)
    new = transitions.claim(rec, job_id, owner, ttl, now, max_attempts)
    tx.save(new, Op.CLAIM, transitions.history_event(new, Op.CLAIM, now))
    return new


def _claim_in(tx: Transaction, job_id: str, owner: str, ttl: float, max_attempts: int | None) -> JobRecord:
    return _claimed(tx, _load(tx, job_id, Op.CLAIM), job_id, owner, ttl, max_attempts)


def claim(job_id: str, owner: str, ttl: float, max_attempts: int | None = None) -> Operation[JobRecord, Lease]:
    """``max_attempts``: the limit of a job this claim creates (one never submitted)."""
    def step(tx: Transaction) -> JobRecord:
        rec, wrote = _read(tx, job_id, Op.CLAIM)
        try:
            return _claimed(tx, rec, job_id, owner, ttl, max_attempts)
        except LeaseError as exc:
            if wrote:  # the re-stamp the read called for is committed first
                raise AfterCommit(exc) from exc
            raise

    return Operation(job_id, step, transitions.lease_of)


def claim_next(owner: str, ttl: float) -> Operation[JobRecord | None, Lease | None]:
    def step(tx: Transaction) -> JobRecord | None:
        found = tx.next_claimables(1)
        _save_passed_over(tx)
        return _claim_in(tx, found[0], owner, ttl, None) if found else None

    return Operation("(claim_next)", step, lambda found: None if found is None else transitions.lease_of(found),
                     contention.CLAIM_NEXT_ATTEMPTS)


def holder(op: Op, lease: Lease, change: transitions.Change) -> Operation[JobRecord | Rejection, JobRecord]:
    """renew, complete or release: ``change`` applied if ``lease`` is current, else audited
    and ``StaleLease``."""

    def step(tx: Transaction) -> JobRecord | Rejection:
        found = transitions.holder_step(_load(tx, lease.job_id, op, lease), op, lease, change, tx.now)
        if isinstance(found, JobRecord):
            # The history names the holder, also when the step gave the job back.
            tx.save(found, op, transitions.history_event(found, op, tx.now, lease.owner))
        elif tx.guessed:
            raise Reread  # never audit a refusal of what may be an old copy
        else:
            tx.add_rejection(found)
        return found

    return Operation(lease.job_id, step, _held)


def _held(found: JobRecord | Rejection) -> JobRecord:
    if isinstance(found, Rejection):
        raise StaleLease(found)
    return found


def renew(lease: Lease, ttl: float) -> Operation[JobRecord | Rejection, Lease]:
    held = holder(Op.RENEW, lease, lambda r, now: transitions.renew(r, ttl, now))
    return Operation(held.job_id, held.step, lambda found: transitions.lease_of(_held(found)))


def complete(lease: Lease, result: bytes | None) -> Operation[JobRecord | Rejection, JobRecord]:
    return holder(Op.COMPLETE, lease, lambda r, now: transitions.complete(r, result, now))


def release(lease: Lease) -> Operation[JobRecord | Rejection, JobRecord]:
    return holder(Op.RELEASE, lease, transitions.release)


def fail(lease: Lease, error: str | None, retry: Retry) -> Operation[JobRecord | Rejection, JobRecord]:
    return holder(Op.FAIL, lease, lambda r, now: transitions.fail(r, error, retry, now))


def requeue(job_id: str, actor: str | None, delay: float, token: int | None) -> Operation[None, None]:
    """An operator's ``requeue``; ``token`` as ``force_expire``'s."""
    def step(tx: Transaction) -> None:
        rec = _load(tx, job_id, Op.REQUEUE)
        if rec is not None and token is not None and rec.token != token:
            raise TokenChanged(job_id, token, rec.token)
        new = transitions.requeue(rec, job_id, delay, tx.now)
        tx.save(new, Op.REQUEUE, transitions.history_event(new, Op.REQUEUE, tx.now, actor))

    return Operation(job_id, step, _nothing)


def force_expire(job_id: str, actor: str | None, token: int | None) -> Operation[None, None]:
    def step(tx: Transaction) -> None:
        rec = _load(tx, job_id, Op.EXPIRE)
        if rec is None:
            raise JobNotFound(job_id)
        if token is not None and rec.token != token:
            raise TokenChanged(job_id, token, rec.token)
        if rec.state is JobState.LEASED and rec.lease_until is not None and not lease_over(rec.lease_until, tx.now):
            new = transitions.force_expire(rec, tx.now)
            tx.save(new, Op.EXPIRE, transitions.history_event(new, Op.EXPIRE, tx.now, actor))

    return Operation(job_id, step, _nothing)


def record_rejection(rejection: Rejection) -> Operation[None, None]:
    return Operation(rejection.job_id, lambda tx: tx.add_rejection(rejection), _nothing)


@dataclass(frozen=True)
class Each:
    """What a step over many leases decided for each, in order: the record it saved, the
    rejection it audited, or the error that lease's record alone raised (a corrupt one)."""

    outcomes: tuple[JobRecord | Rejection | LeaseError, ...]
    more: bool = False  # claim_next_many: more may be claimable than it took


Renewal = tuple[Lease, float]  # a lease and the TTL to renew it for
Completion = tuple[Lease, bytes | None]  # a lease and the result to complete it with
RENEW_MANY_ATTEMPTS = 3  # a batch that loses this many races is split (one busy job holds no other back)
Held = Callable[[Transaction], JobRecord | Rejection]  # one lease's holder step


def _holders(each: Sequence[Held], job_ids: Sequence[str],
             finish: Callable[[Each], list[T]]) -> Operation[Each, list[T]]:
    """Several leases' holder steps in ONE transaction, so each is judged, and a refusal
    audited, alone; a corrupt record fails its lease, not the batch. A conflict, or a refusal
    decided on a guess, runs the whole batch again (``Attempts``); a caller splits a batch that
    keeps losing races (``Outraced``) into single requests."""
    rest = list(job_ids[1:])

    def step(tx: Transaction) -> Each:
        found: list[JobRecord | Rejection | LeaseError] = []
        for n, one in enumerate(each):
            if n == 1 and not tx.guessed:  # the first was read, not guessed: read the rest at once
                tx.preload(rest)
            try:
                found.append(one(tx))
            except CorruptRecord as exc:  # raised by the read, before anything was buffered
                if tx.guessed:
                    raise Reread from exc
                found.append(exc)
        return Each(tuple(found))

    return Operation(job_ids[0] if job_ids else "", step, finish, RENEW_MANY_ATTEMPTS)


def renew_many(renewals: Sequence[Renewal]) -> Operation[Each, list[Lease | LeaseError]]:
    """Several renewals in one transaction, each lease's own ``renew`` step (``_holders``)."""
    return _holders([renew(lease, ttl).step for lease, ttl in renewals], [lease.job_id for lease, _ in renewals],
                    _renewed_each)


def complete_many(completions: Sequence[Completion]) -> Operation[Each, list[LeaseError | None]]:
    """Several completions in one transaction, each lease's own ``complete`` step (``_holders``)."""
    return _holders([complete(lease, result).step for lease, result in completions],
                    [lease.job_id for lease, _ in completions], _completed_each)


def _error(found: Rejection | LeaseError) -> LeaseError:
    """Why one lease's change in a batch was not written: refused (audited), or its record."""
    return StaleLease(found) if isinstance(found, Rejection) else found


def _renewed_each(found: Each) -> list[Lease | LeaseError]:
    return [transitions.lease_of(f) if isinstance(f, JobRecord) else _error(f) for f in found.outcomes]


def _completed_each(found: Each) -> list[LeaseError | None]:
    return [None if isinstance(f, JobRecord) else _error(f) for f in found.outcomes]


Claimed = tuple[list[Lease], bool]  # the leases a claim_next_many won, and whether more may be claimable


def claim_next_many(owner: str, ttl: float, n: int, weight: Callable[[str], int] | None = None,
                    budget: int = 0) -> Operation[Each, Claimed]:
    """Up to ``n`` claims in ONE transaction, in claim_next's order (``next_claimables``), each
    one its own claim with its own token; with ``weight``, no more than ``budget`` of it (bytes
    of a request), one claim at least. The caller learns whether more may be claimable: all
    ``n`` were taken, or the budget left some behind."""
    def step(tx: Transaction) -> Each:
        load = 0
        found: list[JobRecord | Rejection | LeaseError] = []
        candidates = tx.next_claimables(n)
        _save_passed_over(tx)
        for job_id in candidates:
            load += 0 if weight is None else weight(job_id)
            if found and load > budget:
                return Each(tuple(found), more=True)
            found.append(_claim_in(tx, job_id, owner, ttl, None))
        return Each(tuple(found), more=len(found) == n)

    return Operation("(claim_next)", step, _claimed_each, contention.CLAIM_NEXT_ATTEMPTS)


def _claimed_each(found: Each) -> Claimed:
    return [transitions.lease_of(f) for f in found.outcomes if isinstance(f, JobRecord)], found.more


@dataclass(frozen=True)
class Lost:
    """A ``claim_batch`` request whose every claim lost a race (nothing claimed: other claimers
    moved the queue on), from a store that sends many claims in one request, each won or lost
    alone (etcd): ``Claims`` asks again on fresh reads after claim_next's pause, up to claim_next's
    attempts, as ``Attempts`` retries a conflict. ``carried``: what the store read beside the
    lost claims, handed to the next request (``Claims.carried``) to start from."""

    carried: object = None


class Claims:
    """A ``claim_next_many``'s requests, free of I/O (both flavours, batched or one lease per
    request): how many the next asks for (None: done), after what pause (``retry``: the requests
    lost in a row, ``contention.pause(retry)`` before the next: ``Tries``' rules, a request that
    won some starting them over), and what an answer or error means."""

    def __init__(self, n: int, per_request: int) -> None:
        self.n = n
        self.per_request = per_request or n
        self.found: list[Lease] = []
        self._taken = 0  # claims made, a job claimed twice counted twice: n at most, however it goes
        self._done = False
        self.retry = 0
        self.carried: object = None  # what the last request handed on (``Lost``), for the next
        self._tries = _requests()

    def next(self) -> int | None:
        return None if self._done or self._taken >= self.n else min(self.n - self._taken, self.per_request)

    def answered(self, found: Claimed | Lost) -> None:
        """A request's answer: its leases and whether more may be claimable (``took``), or
        ``Lost``: asked again, ``Outraced`` after claim_next's attempts lost in a row."""
        if not isinstance(found, Lost):
            self.retry, self.carried, self._tries = 0, None, _requests()
            self.took(*found)
            return
        self._tries.lost = COLLIDED
        self.retry = self._tries.next().retry
        self.carried = found.carried

    def took(self, leases: list[Lease], more: bool) -> None:
        """A request's leases; ``more``: more may be claimable. A job claimed again by a later
        request (its lease ran out while the batch went on: a TTL shorter than the batch takes)
        keeps its newest lease only, the earlier one being stale."""
        again = {lease.job_id for lease in leases}
        self.found = [lease for lease in self.found if lease.job_id not in again] + leases
        self._taken += len(leases)
        self._done = not more

    def failed(self, error: LeaseError) -> None:
        """A request raised: raised again if nothing was claimed yet, else the batch ends
        with what was (the next call meets the error), so no lease won is lost."""
        if not self.found:
            raise error
        self._done = True


def _requests() -> Tries:
    """The attempts of claim_next_many's requests from now on, the next one counted."""
    tries = Tries("(claim_next)", contention.CLAIM_NEXT_ATTEMPTS)
    tries.next()
    return tries


Item = TypeVar("Item", bound=tuple[Lease, Any])


def lease_batches(items: Sequence[Item], size: int, weight: Callable[[Item], int] | None = None,
                  budget: int = 0) -> list[list[Item]]:
    """``renew_many``'s or ``complete_many``'s transactions: ``size`` leases each (0: all in
    one), no more than ``budget`` of ``weight`` each when given (``batches.batches``; one
    lease per job)."""
    by_job = {item[0].job_id: item for item in items}
    cost = None if weight is None else (lambda job_id: weight(by_job[job_id]))
    return [[by_job[job_id] for job_id in chunk]
            for chunk in batches.batches(list(by_job), size or len(by_job), cost, budget)]
