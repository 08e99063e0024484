"""The backend interface: a handful of atomic operations on one store.

Everything else (validation, safe deadlines, renewal threads, ``hold()``) lives once in
``tenure.core.store``. A backend receives arguments that are already validated, decides
ownership with the *store's* clock, and records every rejected renew/complete/release as a
``Rejection`` in the same atomic step where the store allows it, then raises ``StaleLease``.

``RecordBackend`` serves stores that can lock and rewrite one record per job (memory,
SQLite): they provide the transaction and the protocol comes from ``transitions``.
"""

from __future__ import annotations

import abc
import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from tenure.core import audit, contention, protocol, queries, transitions, watch

# corrupt_status (codec), history_event and state_at (transitions), fold (queries) live with
# what they belong to; the "as" imports keep them importable from here (backends, dashboard).
from tenure.core.codec import corrupt_status as corrupt_status
from tenure.core.errors import (
    BackendUnavailable,
    CorruptRecord,
    JobNotFound,
    LeaseError,
    StaleLease,
    TokenChanged,
)
from tenure.core.queries import fold as fold
from tenure.core.records import (
    Change,
    HistoryEvent,
    JobPage,
    JobRecord,
    JobState,
    JobStatus,
    Lease,
    Op,
    Rejection,
    Summary,
)
from tenure.core.transitions import history_event as history_event
from tenure.core.transitions import state_at as state_at
from tenure.core.validation import MAX_TTL

if TYPE_CHECKING:
    from tenure.core.clock import Clock
    from tenure.core.options import Options, StoreURL

DEFAULT_MAX_RESULT_BYTES = 512 * 1024  # for third-party backends that do not say
T = TypeVar("T")


@dataclass(frozen=True)
class Characteristics:
    """What a backend guarantees, for callers and for the conformance suite."""

    name: str
    store_clock: str  # whose clock decides expiry, in words
    min_ttl: float = 0.0
    max_ttl: float = MAX_TTL
    # The smallest step of the store's clock (0: not declared). A holder's margin, its TTL
    # times drift_margin, must cover it: a clock that lags by up to one step starts a lease
    # that much early.
    clock_resolution: float = 0.0
    shared_between_processes: bool = True
    tokens_ordered_across_jobs: bool = False  # true where tokens come from one global counter
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
    # (environment variable, option) pairs the client library reads when the URL does not give
    # the option (libpq: PGSSLMODE, PGPASSWORD): they count when judging what is sent in clear text.
    environment: tuple[tuple[str, str], ...] = ()


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
    def submit(self, job_id: str, actor: str | None = None) -> None:
        """``actor``, when given, is who asked (an operator): history records it as the owner."""

    def submit_many(self, job_ids: list[str], actor: str | None = None) -> None:
        """Submit several jobs; backends that can batch them override this."""
        for job_id in job_ids:
            self.submit(job_id, actor)

    @abc.abstractmethod
    def claim(self, job_id: str, owner: str, ttl: float) -> Lease: ...

    @abc.abstractmethod
    def claim_next(self, owner: str, ttl: float) -> Lease | None: ...

    @abc.abstractmethod
    def renew(self, lease: Lease, ttl: float) -> Lease: ...

    @abc.abstractmethod
    def complete(self, lease: Lease, result: bytes | None) -> None: ...

    @abc.abstractmethod
    def release(self, lease: Lease) -> None: ...

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


class Transaction(abc.ABC):
    """One atomic step on a record store; ``now`` is read once, inside the step.

    A store that locks (memory, SQLite) commits every step it began. An optimistic store
    (reads that carry versions, one conditional commit) instead sets ``conflict`` when its
    commit found something it read changed: nothing was written, and the core runs the step
    again in a new transaction with fresh reads (``RecordBackend.transaction(fresh=True)``),
    pausing and giving up as ``tenure.core.contention`` says. On a first attempt its ``load``
    may answer from what this process last wrote, setting ``guessed``; the conditional commit
    verifies a guess, and a refusal decided on one is decided again on fresh reads. A step
    whose guess the commit refuted runs again at once (a wrong guess is no collision); only
    conflicts of fresh reads pause.

    The protocol's steps read through ``load_for``, which tells the store what the step will
    do, so that it can guess per operation; ``preload`` and ``follow`` let it read less often;
    ``stored`` gives back what a step saved as the store wrote it (etcd's token). Each has a
    default for stores that need none of it (memory, SQLite).
    """

    now: float
    conflict: bool = False  # set by the commit: lost a race, nothing was written
    guessed: bool = False  # set by load: answered from a cache, not a fresh read

    @abc.abstractmethod
    def load(self, job_id: str) -> JobRecord | None:
        """The job's record; raises CorruptRecord for one that cannot be read."""

    def load_for(self, job_id: str, op: Op, lease: Lease | None = None) -> JobRecord | None:
        """``load`` for a step that will ``op`` the job; ``lease``: the caller's, for renew,
        complete and release. An optimistic store may answer a first attempt with a guess
        (``guessed``) its commit verifies: ZooKeeper takes a claimed job to be new (etcd too
        with a pooled etcd lease at hand, and a submitted one), ZooKeeper answers a holder from
        the record this process wrote while the lease's safe deadline runs
        (``clock.deadline_runs``), etcd from the lease itself (its commit compares the keys
        the lease implies)."""
        return self.load(job_id)

    def preload(self, job_ids: list[str]) -> None:  # noqa: B027 - nothing to do is the default
        """The step will load all of ``job_ids`` (submit_many): a store may read them at once."""

    def follow(self, previous: Transaction) -> None:  # noqa: B027 - nothing to do is the default
        """Called on a retry's transaction with the attempt before it (its commit conflicted or
        its guess was refuted), before the step runs: a store whose failed commit brought back
        what it now holds (etcd's failure branch, a read ZooKeeper sent behind its multi) may
        answer ``load`` from that."""

    def stored(self, record: JobRecord) -> JobRecord:
        """After the commit, ``record`` (what a claim or holder step saved) as the store wrote
        it: a store that numbers claims itself (etcd: the commit's revision is the token) or
        estimates a lease's end its own way says so here. This default: as saved."""
        return record

    @abc.abstractmethod
    def save(self, record: JobRecord) -> None: ...

    @abc.abstractmethod
    def next_claimable(self) -> str | None:
        """A pending job, or one whose lease expired by ``now``; oldest first."""

    @abc.abstractmethod
    def add_rejection(self, rejection: Rejection) -> None: ...

    @abc.abstractmethod
    def add_event(self, event: HistoryEvent) -> None: ...


class SteppedBackend(Backend):
    """renew, complete and release as one holder step each (``_holder_op``), whose decision is
    ``transitions.holder_step``: record backends, and ZooKeeper."""

    @abc.abstractmethod
    def _holder_op(self, op: Op, lease: Lease, change: transitions.Change) -> JobRecord:
        """Apply ``change`` if ``lease`` is current; otherwise audit and raise StaleLease."""

    def renew(self, lease: Lease, ttl: float) -> Lease:
        rec = self._holder_op(Op.RENEW, lease, lambda r, now: transitions.renew(r, ttl, now))
        return transitions.lease_of(rec)

    def complete(self, lease: Lease, result: bytes | None) -> None:
        self._holder_op(Op.COMPLETE, lease, lambda r, now: transitions.complete(r, result, now))

    def release(self, lease: Lease) -> None:
        self._holder_op(Op.RELEASE, lease, transitions.release)


class RecordBackend(SteppedBackend):
    """The protocol over ``transitions`` for stores with a per-job record and transactions."""

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

    def _run(self, job_id: str, step: Callable[[Transaction], T]) -> T:
        """``step`` in a transaction, again with fresh reads while it conflicts or decided a
        refusal on a guess; ``Outraced`` when every attempt lost its race."""
        previous: Transaction | None = None
        retries = 0
        for _ in range(contention.ATTEMPTS):
            if previous is not None and not previous.guessed:
                retries += 1
                contention.wait(retries)  # a collision: pause, so colliders fall out of step
            tx: Transaction | None = None
            try:
                with self.transaction(fresh=True) if previous else self.transaction() as tx:
                    if previous is not None:
                        tx.follow(previous)
                    result = step(tx)
            except (_Reread, LeaseError) as exc:
                if tx is None or not tx.guessed or isinstance(exc, BackendUnavailable):
                    raise
                previous = tx
                continue  # decided on a cached guess: decide again on what the store holds
            if not tx.conflict:
                return tx.stored(result) if isinstance(result, JobRecord) else result  # type: ignore[return-value]
            previous = tx
        raise contention.outraced(job_id)

    def submit(self, job_id: str, actor: str | None = None) -> None:
        self._run(job_id, self._submitting([job_id], actor))

    def submit_many(self, job_ids: list[str], actor: str | None = None) -> None:
        if not self.SUBMIT_BATCH:  # one transaction: all of them or none
            self._run(job_ids[0] if job_ids else "", self._submitting(job_ids, actor))
            return

        def batch(chunk: list[str]) -> bool:
            try:
                self._run(chunk[0], self._submitting(chunk, actor))
            except CorruptRecord:
                return False  # job by job: those before it are submitted, then it raises
            return True

        protocol.submit_in_batches(job_ids, self.SUBMIT_BATCH, batch, lambda job_id: self.submit(job_id, actor),
                                   self.submit_weight if self.SUBMIT_BYTES else None, self.SUBMIT_BYTES)

    def _submitting(self, job_ids: list[str], actor: str | None) -> Callable[[Transaction], None]:
        def step(tx: Transaction) -> None:
            tx.preload(job_ids)
            for job_id in job_ids:
                new = transitions.submit(tx.load_for(job_id, Op.SUBMIT), job_id, tx.now)
                if new is not None:
                    tx.save(new)
                    tx.add_event(transitions.history_event(new, Op.SUBMIT, tx.now, actor))

        return step

    def _claim_in(self, tx: Transaction, job_id: str, owner: str, ttl: float) -> JobRecord:
        new = transitions.claim(tx.load_for(job_id, Op.CLAIM), job_id, owner, ttl, tx.now)
        tx.save(new)
        tx.add_event(transitions.history_event(new, Op.CLAIM, tx.now))
        return new

    def claim(self, job_id: str, owner: str, ttl: float) -> Lease:
        return transitions.lease_of(self._run(job_id, lambda tx: self._claim_in(tx, job_id, owner, ttl)))

    def claim_next(self, owner: str, ttl: float) -> Lease | None:
        def step(tx: Transaction) -> JobRecord | None:
            job_id = tx.next_claimable()
            return None if job_id is None else self._claim_in(tx, job_id, owner, ttl)

        claimed = self._run("(claim_next)", step)
        return None if claimed is None else transitions.lease_of(claimed)

    def _holder_op(self, op: Op, lease: Lease, change: transitions.Change) -> JobRecord:
        def step(tx: Transaction) -> JobRecord | Rejection:
            found = transitions.holder_step(tx.load_for(lease.job_id, op, lease), op, lease, change, tx.now)
            if isinstance(found, JobRecord):
                tx.save(found)
                tx.add_event(transitions.history_event(found, op, tx.now))
            elif tx.guessed:
                raise _Reread  # never audit a refusal of what may be an old copy
            else:
                tx.add_rejection(found)
            return found

        done = self._run(lease.job_id, step)
        if isinstance(done, Rejection):
            raise StaleLease(done)
        return done

    def force_expire(self, job_id: str, actor: str | None = None, token: int | None = None) -> None:
        def step(tx: Transaction) -> None:
            rec = tx.load_for(job_id, Op.EXPIRE)
            if rec is None:
                raise JobNotFound(job_id)
            if token is not None and rec.token != token:
                raise TokenChanged(job_id, token, rec.token)
            if rec.state is JobState.LEASED and transitions.is_claimable(rec, tx.now) is False:
                new = transitions.force_expire(rec, tx.now)
                tx.save(new)
                tx.add_event(transitions.history_event(new, Op.EXPIRE, tx.now, actor))

        self._run(job_id, step)

    def record_rejection(self, rejection: Rejection) -> None:
        self._run(rejection.job_id, lambda tx: tx.add_rejection(rejection))


class _Reread(Exception):
    """Raised by a step that must not act on a guessed record: run it again on fresh reads."""
