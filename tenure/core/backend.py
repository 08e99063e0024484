"""The backend interface: a handful of atomic operations on one store.

Everything else (validation, safe deadlines, renewal threads, ``hold()``) lives once in
``tenure.core.store``. A backend receives arguments that are already validated, decides
ownership with the *store's* clock, and records every rejected renew/complete/release as a
``Rejection`` in the same atomic step where the store allows it, then raises ``StaleLease``.

``RecordBackend`` serves stores with one record per job (memory, SQLite, etcd, ZooKeeper): they
provide the transaction (``tenure.core.record_transaction``) and the protocol comes from
``tenure.core.steps``, which tenure.aio's ``AsyncRecordBackend`` runs too.
"""

from __future__ import annotations

import abc
import contextlib
import enum
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from tenure.core import audit, contention, queries, steps, watch
from tenure.core.errors import (
    BackendUnavailable,
    CorruptRecord,
    LeaseError,
    Outraced,
)
from tenure.core.lifecycle import Retry
from tenure.core.order import EXACT, Tolerance
from tenure.core.record_transaction import Transaction
from tenure.core.records import (
    Change,
    HistoryEvent,
    JobPage,
    JobState,
    JobStatus,
    Lease,
    Rejection,
    Summary,
)
from tenure.core.validation import MAX_TTL

if TYPE_CHECKING:
    from tenure.core.clock import Clock
    from tenure.core.options import Options, StoreURL

DEFAULT_MAX_RESULT_BYTES = 512 * 1024  # for third-party backends that do not say
R = TypeVar("R")
P = TypeVar("P")  # one lease's part of a batch
A = TypeVar("A")  # one lease's answer


class Durability(str, enum.Enum):
    """What an acknowledged write survives: every backend declares one (``Characteristics``),
    and the conformance suite fails one that does not. A claim the store forgets after
    acknowledging it is handed out again with the same token, which fences admit: a backend
    refuses (or warns about) a store configured to lose acknowledged writes."""

    VOLATILE = "volatile"  # this process's memory: gone when the process ends (memory://)
    FSYNC = "fsync"  # on one machine's disk before the answer: survives a crash of the process or machine
    REPLICATED = "replicated"  # on the disks of a quorum of servers: survives losing a minority of them


@dataclass(frozen=True)
class Characteristics:
    """What a backend guarantees, for callers and for the conformance suite."""

    name: str
    store_clock: str  # whose clock decides expiry, in words
    # What an acknowledged write survives; None (not declared) fails the conformance suite.
    durability: Durability | None = None
    min_ttl: float = 0.0
    max_ttl: float = MAX_TTL
    # The smallest step of the store's clock (0: not declared). A holder's margin, its TTL
    # times drift_margin, must cover it: a clock that lags by up to one step starts a lease
    # that much early.
    clock_resolution: float = 0.0
    shared_between_processes: bool = True
    # True where tokens come from one global counter; claims of one batch request may share one.
    tokens_ordered_across_jobs: bool = False
    # The largest job result the backend can write in one request, with room left for the rest
    # of the record and the audit (etcd's request limit, ZooKeeper's znode limit ...).
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    # Options that turn TLS on: "name" (any true value) or "name=value" (that value only); None
    # for a backend that sends nothing over a network. A network backend with () cannot
    # encrypt: credentials given to it are always reported as clear text.
    tls_options: tuple[str, ...] | None = ()
    # summary() counts from the store's indexes instead of reading every record (etcd,
    # ZooKeeper): a record damaged behind tenure's back is counted where its index puts it,
    # and found as corrupt only by a listing (jobs(), or a page() that asks for corrupt jobs).
    counts_from_indexes: bool = False
    # Seconds a delayed job (a submit's or requeue's delay, a fail's wait) may become claimable
    # after its claimable_at: 0 where the store's clock judges claimable_at itself. etcd times a
    # delay by an etcd lease of whole seconds (its minimum TTL at least), ended on a 500 ms tick.
    delay_late: float = 0.0
    # (environment variable, option) pairs the client library reads when the URL does not give
    # the option (libpq: PGSSLMODE, PGPASSWORD): they count when judging what is sent in clear text.
    environment: tuple[tuple[str, str], ...] = ()
    # from_url reads ``create=`` (default true): false refuses a store that is not there with
    # StoreNotFound instead of creating it (the CLI's read-only commands pass it where read).
    create_option: bool = False
    # How claim_next departs from its order (``tenure.core.order``'s rule): EXACT, or what the
    # store cannot do (spread claimers, expired leases by claim). The conformance suite
    # checks exactly this.
    claim_order: Tolerance = EXACT


@dataclass(frozen=True)
class Link:
    """The backend's connection as held leases see it (stores with sessions: ZooKeeper, etcd).

    ``epoch`` counts interruptions: a lease last verified before the current epoch is at risk
    until a renewal verifies it again. ``lost_epoch`` is the epoch of the latest session loss:
    leases verified before it are gone for good.
    """

    epoch: int = 0
    connected: bool = True
    lost_epoch: int = 0


class Backend(abc.ABC):
    characteristics: ClassVar[Characteristics]

    @classmethod
    @abc.abstractmethod
    def from_url(cls, url: StoreURL, options: Options, clock: Clock | None) -> Backend:
        """Build from a parsed URL; read options through ``options`` (it rejects leftovers).

        ``clock`` is a clock the caller injected (tests), or None for the store's own.
        """

    @abc.abstractmethod
    def submit(self, job_id: str, actor: str | None = None, *, max_attempts: int | None = None,
               delay: float = 0.0) -> None:
        """``actor``, when given, is who asked (an operator): history records it as the owner.
        ``max_attempts`` (None: unlimited) and ``delay`` (seconds of store time before a claim
        may take the job) are a new run's (``transitions.submit``)."""

    def submit_many(self, job_ids: list[str], actor: str | None = None, *, max_attempts: int | None = None,
                    delay: float = 0.0) -> None:
        """Submit several jobs; backends that can batch them override this."""
        for job_id in job_ids:
            self.submit(job_id, actor, max_attempts=max_attempts, delay=delay)

    @abc.abstractmethod
    def claim(self, job_id: str, owner: str, ttl: float, *, max_attempts: int | None = None) -> Lease:
        """``max_attempts``: the limit of a job the claim creates (one never submitted)."""

    @abc.abstractmethod
    def claim_next(self, owner: str, ttl: float) -> Lease | None: ...

    @abc.abstractmethod
    def renew(self, lease: Lease, ttl: float) -> Lease: ...

    # Whether renew_many renews many leases in one round trip: if not (this default's loop),
    # held leases are renewed one request each, side by side, as before batches.
    RENEWS_IN_BATCHES: ClassVar[bool] = False
    # Leases per request of renew_many, 0 for all in one. Held leases are renewed that many at
    # a time, so each renewal's deadline counts from when its own request was sent.
    RENEW_BATCH: ClassVar[int] = 0

    def renew_many(self, renewals: Sequence[steps.Renewal]) -> list[Lease | LeaseError]:
        """Renew several leases (``(lease, ttl)`` pairs, one per job), each judged alone: in
        order, each renewed lease or the ``LeaseError`` its renewal ended in (``StaleLease``,
        refused and audited alone; ``BackendUnavailable`` ...). This default renews one lease per
        request; a store that renews many in one round trip overrides it (and RENEWS_IN_BATCHES)."""
        return [_outcome(self.renew, lease, ttl) for lease, ttl in renewals]

    @abc.abstractmethod
    def complete(self, lease: Lease, result: bytes | None) -> None: ...

    # Whether claim_next_many and complete_many take many leases in one round trip: if not
    # (these defaults' loops), a request per lease, one after another.
    CLAIMS_IN_BATCHES: ClassVar[bool] = False
    COMPLETES_IN_BATCHES: ClassVar[bool] = False

    def claim_next_many(self, owner: str, ttl: float, n: int) -> list[Lease]:
        """Up to ``n`` claims (``n`` >= 1), each its own lease and token, in claim_next's order;
        fewer only when fewer are claimable. This default claims one per request; an error
        after some were claimed ends the batch with those (the next call meets it again), so
        no lease won is lost. A store that claims many in one round trip overrides it (and
        CLAIMS_IN_BATCHES)."""
        claims = steps.Claims(n, 1)
        while claims.next():
            try:
                lease = self.claim_next(owner, ttl)
            except LeaseError as exc:
                claims.failed(exc)
                continue
            claims.took([] if lease is None else [lease], more=lease is not None)
        return claims.found

    def complete_many(self, completions: Sequence[steps.Completion]) -> list[LeaseError | None]:
        """Complete several leases (``(lease, result)`` pairs, one per job), each judged alone:
        in order, None for each completed, or the ``LeaseError`` its completion alone ended in
        (``StaleLease``, refused and audited alone ...). This default completes one lease per
        request; a store that completes many in one round trip overrides it (and
        COMPLETES_IN_BATCHES)."""
        return [_failure(self.complete, lease, result) for lease, result in completions]

    @abc.abstractmethod
    def release(self, lease: Lease) -> None: ...

    @abc.abstractmethod
    def fail(self, lease: Lease, error: str | None, retry: Retry) -> None:
        """The holder failed: refused and audited like ``complete`` if the lease is not current;
        else pending again when ``retry`` says, or parked on its last attempt
        (``transitions.fail``)."""

    @abc.abstractmethod
    def requeue(self, job_id: str, actor: str | None = None, delay: float = 0.0, token: int | None = None) -> None:
        """Operator action: attempts reset, pending after ``delay`` (``transitions.requeue``);
        ``actor`` and ``token`` as ``force_expire``'s."""

    @abc.abstractmethod
    def get(self, job_id: str) -> JobStatus | None: ...

    @abc.abstractmethod
    def jobs(self) -> Iterator[JobStatus]: ...

    @abc.abstractmethod
    def rejections(self, since: float | None, limit: int | None) -> list[Rejection]:
        """Oldest first; with ``limit``, the most recent ``limit`` records."""

    @abc.abstractmethod
    def record_rejection(self, rejection: Rejection) -> None:
        """Add a rejection reported from elsewhere (a fenced destination) to the audit."""

    @abc.abstractmethod
    def history(self, job_id: str | None, since: float | None, limit: int | None) -> list[HistoryEvent]:
        """Accepted changes, oldest first, with bounded retention."""

    @abc.abstractmethod
    def force_expire(self, job_id: str, actor: str | None = None, token: int | None = None) -> None:
        """Operator action: end the current lease now by the store's clock.

        ``actor``, when given, is recorded as the owner of the EXPIRE history event. ``token``,
        when given, is the token the operator saw: if the job's current token differs, nothing
        changes and ``TokenChanged`` is raised, decided in the same atomic step as the change.
        """

    @abc.abstractmethod
    def now(self) -> float:
        """The store's clock, in seconds since the epoch."""

    def next_due(self) -> float | None:
        """Seconds of store time until a job becomes claimable by time alone (a scheduled
        job's ``claimable_at``, a lease's end), for a blocking ``claim_next`` to wake then
        rather than after its next poll (``tenure.core.waiting``); None: nothing is due, or
        this store cannot tell cheaply (the default: no I/O)."""
        return None

    def watch(self, stop: threading.Event, interval: float) -> Iterator[Change]:
        """Changes as they happen; this default polls, backends with a native watch override."""
        return watch.poll(self, stop, interval)

    def link(self) -> Link:
        """The connection's state for ``HeldLease.check()``; always fine without sessions."""
        return Link()

    def health(self) -> dict[str, Any]:
        """Facts about the store for operators (server, version, size ...)."""
        return {"backend": self.characteristics.name}

    # -- queries for operators: defaults over jobs(); stores with an index override them ----
    def summary(self, now: float, soon: float) -> Summary:
        """Jobs counted by state at ``now``; leases ending within ``soon`` seconds counted apart."""
        return queries.summarize(self.jobs(), now, soon, len(self.rejections(now - 3600.0, None)))

    def page(self, now: float, states: frozenset[JobState] | None, job: str | None,
             owner: str | None, order: str, offset: int, limit: int) -> JobPage:
        """Jobs matching every filter given, ordered, one page of them (see ``Store.page``)."""
        return queries.select_page(self.jobs(), now, states, job, owner, order, offset, limit)

    def job_rejections(self, job_id: str, since: float | None, limit: int | None) -> list[Rejection]:
        """One job's rejections, oldest first; this default filters the whole audit, stores
        with an index on the audit's job override it."""
        return audit.of_job(self.rejections(since, None), job_id, since, limit)

    def close(self) -> None:  # noqa: B027 - a no-op is the right default
        """Release connections. Idempotent."""


class RecordBackend(Backend):
    """The protocol for stores with a per-job record and transactions: the core runs every
    operation as a step over ``transaction()`` (retrying an optimistic store's conflicts), so a
    backend writes its ``Transaction``, its reads (``get``, ``jobs``, ``rejections``,
    ``history``), ``from_url`` and ``now``, and declares its ``characteristics``
    (docs/backends/writing-a-backend.md)."""

    @abc.abstractmethod
    def transaction(self, fresh: bool = False) -> contextlib.AbstractContextManager[Transaction]:
        """Commit on normal exit, roll back on an exception. ``fresh``: a retry after a
        conflict or a guess; ``load`` must read the store (only optimistic stores see it)."""

    # submit_many: jobs per transaction, 0 for all in one (all of them or none); a store whose
    # requests are bounded in bytes also sets SUBMIT_BYTES and ``submit_weight``.
    SUBMIT_BATCH: ClassVar[int] = 0
    SUBMIT_BYTES: ClassVar[int] = 0

    def submit_weight(self, job_id: str) -> int:
        """What submitting ``job_id`` adds to one transaction's request, at most, in bytes."""
        return 0

    def batches(self, job_ids: list[str], actor: str | None, max_attempts: int | None = None,
                delay: float = 0.0) -> list[steps.Batch]:
        """``submit_many``'s transactions, by this store's SUBMIT_BATCH and SUBMIT_BYTES."""
        return steps.submit_many(job_ids, actor, self.SUBMIT_BATCH,
                                 self.submit_weight if self.SUBMIT_BYTES else None, self.SUBMIT_BYTES,
                                 max_attempts, delay)

    def _run(self, operation: steps.Operation[Any, R],
             transactions: Callable[[bool], contextlib.AbstractContextManager[Transaction]] | None = None) -> R:
        """``operation``'s step in a transaction, attempted again as ``steps.Attempts`` says;
        ``transactions(fresh)`` opens them where its transactions share state (else ``transaction``)."""
        opened = transactions or self.transaction
        attempts = steps.Attempts(operation)
        while True:
            attempt = attempts.next()
            if attempt.retry:
                contention.wait(attempt.retry)
            tx: Transaction | None = None
            try:
                with opened(attempt.fresh) as tx:
                    found = attempts.step(tx)
            except (steps.Reread, LeaseError) as exc:
                if attempts.retry_after(tx, exc):
                    continue
                raise
            if attempts.stuck(tx):
                return attempts.result(tx, found)

    def submit(self, job_id: str, actor: str | None = None, *, max_attempts: int | None = None,
               delay: float = 0.0) -> None:
        self._run(steps.submit([job_id], actor, max_attempts, delay))

    def submit_many(self, job_ids: list[str], actor: str | None = None, *, max_attempts: int | None = None,
                    delay: float = 0.0) -> None:
        for batch in self.batches(job_ids, actor, max_attempts, delay):
            try:
                self._run(batch.whole)
            except CorruptRecord:
                if not batch.alone:
                    raise
                for one in batch.alone:
                    self._run(one)

    def claim(self, job_id: str, owner: str, ttl: float, *, max_attempts: int | None = None) -> Lease:
        return self._run(steps.claim(job_id, owner, ttl, max_attempts))

    def claim_next(self, owner: str, ttl: float) -> Lease | None:
        return self._run(steps.claim_next(owner, ttl))

    def renew(self, lease: Lease, ttl: float) -> Lease:
        return self._run(steps.renew(lease, ttl))

    # renew_many: a transaction per RENEW_BATCH leases; a store whose requests are bounded in
    # bytes also sets RENEW_BYTES and ``renew_weight``.
    RENEW_BYTES: ClassVar[int] = 0
    RENEWS_IN_BATCHES = True

    def renew_weight(self, lease: Lease) -> int:
        """What renewing ``lease`` adds to one transaction's request, at most, in bytes."""
        return 0

    def renewal_batches(self, renewals: Sequence[steps.Renewal]) -> list[list[steps.Renewal]]:
        """``renew_many``'s transactions, by this store's RENEW_BATCH and RENEW_BYTES."""
        return steps.lease_batches(renewals, self.RENEW_BATCH,
                                   (lambda one: self.renew_weight(one[0])) if self.RENEW_BYTES else None,
                                   self.RENEW_BYTES)

    def renew_many(self, renewals: Sequence[steps.Renewal]) -> list[Lease | LeaseError]:
        """One transaction per batch (``renewal_batches``) running each lease's own renew
        step; a batch that keeps losing races is renewed a lease at a time."""
        return self._each_batch(self.renewal_batches(renewals), steps.renew_many,
                                lambda batch: Backend.renew_many(self, batch))

    # complete_many: leases per transaction (0: all in one) and bytes, as renew_many's.
    COMPLETE_BATCH: ClassVar[int] = 0
    COMPLETE_BYTES: ClassVar[int] = 0
    COMPLETES_IN_BATCHES = True

    def complete_weight(self, completion: steps.Completion) -> int:
        """What completing a lease with its result adds to one transaction's request, in bytes."""
        return 0

    def completion_batches(self, completions: Sequence[steps.Completion]) -> list[list[steps.Completion]]:
        """``complete_many``'s transactions, by this store's COMPLETE_BATCH and COMPLETE_BYTES."""
        return steps.lease_batches(completions, self.COMPLETE_BATCH,
                                   self.complete_weight if self.COMPLETE_BYTES else None, self.COMPLETE_BYTES)

    def complete_many(self, completions: Sequence[steps.Completion]) -> list[LeaseError | None]:
        """One transaction per batch (``completion_batches``) running each lease's own
        complete step; a batch that keeps losing races is completed a lease at a time."""
        if not self.COMPLETES_IN_BATCHES:
            return Backend.complete_many(self, completions)
        return self._each_batch(self.completion_batches(completions), steps.complete_many,
                                lambda batch: Backend.complete_many(self, batch))

    def _each_batch(self, batches: list[list[P]], operation: Callable[[list[P]], steps.Operation[Any, list[A]]],
                    alone: Callable[[list[P]], list[A]]) -> list[A | LeaseError]:
        """``operation`` of each batch in a transaction of its own; a batch that keeps losing
        races goes ``alone`` (a request per lease); one the store did not answer fails its
        own leases only (earlier batches were written)."""
        found: list[A | LeaseError] = []
        for batch in batches:
            try:
                done: list[A] = self._run(operation(batch))
                found.extend(done)
            except Outraced:
                found.extend(alone(batch))
            except BackendUnavailable as exc:
                found.extend([exc] * len(batch))
        return found

    # claim_next_many: claims per transaction at most (0: all ``n`` in one). CLAIMS_IN_BATCHES
    # only where the transaction proposes many jobs at once (``Transaction.next_claimables``).
    CLAIM_BATCH: ClassVar[int] = 0
    CLAIM_BYTES: ClassVar[int] = 0  # and bytes per transaction at most, by claim_weight (0: no bound)

    def claim_weight(self, job_id: str, owner: str) -> int:
        """What claiming ``job_id`` for ``owner`` adds to one transaction's request, at most, in bytes."""
        return 0

    def claim_operation(self, owner: str, ttl: float, n: int) -> steps.Operation[steps.Each, steps.Claimed]:
        """One transaction of ``claim_next_many``, by this store's CLAIM_BYTES."""
        weight = (lambda job_id: self.claim_weight(job_id, owner)) if self.CLAIM_BYTES else None
        return steps.claim_next_many(owner, ttl, n, weight, self.CLAIM_BYTES)

    def claim_next_many(self, owner: str, ttl: float, n: int) -> list[Lease]:
        """Up to ``CLAIM_BATCH`` claims per transaction (``claim_operation``), until one says
        nothing more is claimable. An error after some were claimed ends the batch with those,
        as the default loop does."""
        if not self.CLAIMS_IN_BATCHES:
            return Backend.claim_next_many(self, owner, ttl, n)
        claims = steps.Claims(n, self.CLAIM_BATCH)
        while asked := claims.next():
            if claims.retry:
                contention.wait(claims.retry)
            try:
                claims.answered(self.claim_batch(owner, ttl, asked, claims.carried))
            except LeaseError as exc:
                claims.failed(exc)
        return claims.found

    def claim_batch(self, owner: str, ttl: float, n: int, carried: object = None) -> steps.Claimed | steps.Lost:
        """One request of ``claim_next_many``: up to ``n`` claims, and whether more may be
        claimable; or ``steps.Lost`` (a store whose claims in one request are won or lost alone:
        every one lost a race), asked again as ``steps.Claims`` says, with what it ``carried``.
        This default: ``claim_operation`` in one transaction (its conflicts are ``_run``'s)."""
        return self._run(self.claim_operation(owner, ttl, n))

    def complete(self, lease: Lease, result: bytes | None) -> None:
        self._run(steps.complete(lease, result))

    def release(self, lease: Lease) -> None:
        self._run(steps.release(lease))

    def fail(self, lease: Lease, error: str | None, retry: Retry) -> None:
        self._run(steps.fail(lease, error, retry))

    def requeue(self, job_id: str, actor: str | None = None, delay: float = 0.0, token: int | None = None) -> None:
        self._run(steps.requeue(job_id, actor, delay, token))

    def force_expire(self, job_id: str, actor: str | None = None, token: int | None = None) -> None:
        self._run(steps.force_expire(job_id, actor, token))

    def record_rejection(self, rejection: Rejection) -> None:
        self._run(steps.record_rejection(rejection))


def _failure(call: Callable[[Lease, bytes | None], None], lease: Lease, result: bytes | None) -> LeaseError | None:
    try:
        call(lease, result)
    except LeaseError as exc:
        return exc
    return None


def _outcome(call: Callable[[Lease, float], Lease], lease: Lease, ttl: float) -> Lease | LeaseError:
    try:
        return call(lease, ttl)
    except LeaseError as exc:
        return exc
