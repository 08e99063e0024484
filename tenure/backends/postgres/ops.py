"""The PostgreSQL backend's operations, free of I/O: one definition for the sync and async backends.

Each operation is a generator (sans-I/O, as in h11 or hyper-h2): it yields the ``Query`` to
run and is sent the rows it returned, decodes them and decides, and returns its answer. The
sync backend (``backend``) runs the queries on a ``ConnectionPool``, the asyncio backend
(``aio``) on an ``AsyncConnectionPool``, both with the core's drivers (``io_drivers``);
nothing else differs, so a statement, its parameters and the decoding of its rows are written
once. A statement that lost a race (the server rolled it back, or its answer says the row
changed between its judgement and its write) raises ``contention.Collided``; how often it runs
again, the pauses and ``Outraced`` are the core's (``steps.attempted``), as on every store.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar

from tenure.backends.postgres import sql as q
from tenure.core import codec, contention, transitions
from tenure.core.codec import corrupt_status
from tenure.core.errors import CorruptRecord, JobNotFound, LeaseError, StaleLease, TokenChanged
from tenure.core.lifecycle import Retry
from tenure.core.queries import fold
from tenure.core.records import (
    HistoryEvent,
    JobPage,
    JobRecord,
    JobState,
    JobStatus,
    Lease,
    Op,
    Reason,
    Rejection,
    RejectionKind,
    Summary,
)
from tenure.core.steps import Completion, Renewal, attempted
from tenure.core.transitions import status

T = TypeVar("T")
Rows = list[tuple[Any, ...]]
JOBS_PAGE = 2000
TRIM_EVERY = 256  # writes between two trims of the audit tables
_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class Statement:
    """A statement in PostgreSQL's own form (``$1``..``$n``), run through psycopg's raw cursors:
    psycopg caches its conversion of ``%(name)s`` placeholders only for queries up to 4,096
    bytes and parses a longer one on every call, and most of the hot statements are longer.
    ``text`` is bytes when it is ASCII (any schema name without other letters): psycopg encodes
    a str on every call, and its cache of prepared statements then hashes the new bytes (twice
    a call, 5 KB each: 4 % of a claim+complete); ASCII is the same bytes in every client
    encoding. Other text stays str, for psycopg to encode in the connection's encoding."""

    text: str | bytes
    names: tuple[str, ...]  # the parameter of ``$1``, ``$2``, ...


_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%|%")


@lru_cache(maxsize=512)  # the store's statements are converted when built; listings' as they come
def statement(text: str) -> Statement:
    """``text``, written with psycopg's ``%(name)s`` placeholders and ``%%``, in PostgreSQL's form."""
    names: dict[str, int] = {}

    def number(found: re.Match[str]) -> str:
        name = found.group(1)
        if name is None:
            if found.group(0) == "%%":
                return "%"
            raise ValueError(f"a % that is no %(name)s placeholder at {found.start()} in {text[:80]!r}")
        if text[found.end():found.end() + 1].isdigit():  # $1 then 2 would read as $12
            raise ValueError(f"a digit right after %({name})s in {text[:80]!r}")
        return f"${names.setdefault(name, len(names) + 1)}"

    converted = _PLACEHOLDER.sub(number, text)
    return Statement(converted.encode("ascii") if converted.isascii() else converted, tuple(names))


@dataclass(frozen=True)
class Query:
    """One statement to run on one pooled connection, in autocommit."""

    text: str | bytes  # PostgreSQL's form (``Statement``)
    args: tuple[Any, ...]  # ``$1``, ``$2``, ...: what a raw cursor takes
    params: dict[str, Any]  # the same by name
    write: bool  # a write whose answer is lost has an unknown outcome; it counts toward trims
    rows: int = 1  # audit rows it may add (renew_many: one per lease), what trims count

    @classmethod
    def of(cls, text: str, params: dict[str, Any], *, write: bool, rows: int = 1) -> Query:
        """A query written with psycopg's placeholders (``statement``)."""
        converted = statement(text)
        return cls(converted.text, tuple(map(params.__getitem__, converted.names)), params, write, rows)


Effect = Query | contention.Pause  # what a plan asks its driver for: a query's rows, or a pause
Attempt = Generator[Query, Rows, T]  # one try of an operation: its statements, no retry
Plan = Generator[Effect, Rows, T]  # an operation, its tries run by ``steps.attempted``
# What Outraced names for a statement about no one job: claim_next's, as the core's step names it.
CLAIM_NEXT = "(claim_next)"
READ = "(a read)"


class Trims:
    """Counts writes; every ``TRIM_EVERY``-th is followed by a trim of the audit tables, so
    events and rejections keep bounded retention without a trim per write."""

    def __init__(self) -> None:
        self._writes = 0
        self._lock = threading.Lock()

    def due(self, rows: int = 1) -> bool:
        """After a write that may add ``rows`` audit rows: whether a trim is due (one per
        TRIM_EVERY rows, so a trim deletes about that many, however large the writes)."""
        with self._lock:
            before = self._writes
            self._writes += rows
            return self._writes // TRIM_EVERY > before // TRIM_EVERY


def decode_row(schema: str, row: tuple[Any, ...] | list[Any]) -> JobRecord:
    """A job row (``q.JOB_COLUMNS``) as a record through the one codec; CorruptRecord for one
    tenure did not write (the rule of ``q.valid``)."""
    job_id, state, owner, token, lease_until, ttl, sub, cla, ren, com, runs, result, *life = row
    return codec.job_record(codec.key_of(f"{schema}.jobs", job_id), job_id, state, owner, token, lease_until, ttl,
                            sub, cla, ren, com, runs, None if result is None else bytes(result), *life)


def listed_row(schema: str, row: tuple[Any, ...] | list[Any], now: float) -> JobStatus:
    """A job row's status for a listing, as ``status_of`` gives it: the codec's quick way for a
    row it takes as it is and that holds no result (which the quick way leaves out), else the
    general way, which also says what is wrong with a corrupt one."""
    job_id, state, owner, token, lease_until, ttl, sub, cla, ren, com, runs, result, *life = row
    fast = None if result is not None else codec.listed_status(
        job_id, state, owner, token, runs, lease_until, ttl, sub, cla, ren, com, now,
        **dict(zip(codec.LIFE_FIELDS, life, strict=True)))
    return fast if fast is not None else status_of(schema, row, now)


def status_of(schema: str, row: tuple[Any, ...] | list[Any], now: float) -> JobStatus:
    """A job row's status at ``now`` through the full codec (``codec.job_record``)."""
    try:
        return status(decode_row(schema, row), now)
    except CorruptRecord as exc:
        return corrupt_status(row[0], exc.key, exc)


class Plans:
    """The operations of one store: its schema, and the channel its writes notify."""

    def __init__(self, schema: str, quoted: str, channel: str) -> None:
        self.schema = schema
        self.quoted = quoted
        self.channel = channel  # "" when writes do not notify
        # psycopg's form (watch.py runs some; EXPLAIN in the tests), and PostgreSQL's, what runs.
        self.statements = {name: text.format(s=quoted) for name, text in q.STATEMENTS.items()}
        self.raw = {name: statement(text) for name, text in self.statements.items()}
        self.trims = [q.TRIM.format(s=quoted, table=t) for t in ("events", "rejections")]

    def query(self, name: str, params: dict[str, Any], *, write: bool, rows: int = 1) -> Query:
        raw, params = self.raw[name], {**params, "channel": self.channel}
        # map, not a comprehension: no Python frame a statement (benchmarks/call_trace.py)
        return Query(raw.text, tuple(map(params.__getitem__, raw.names)), params, write, rows)

    def decode(self, row: tuple[Any, ...] | list[Any]) -> JobRecord:
        return decode_row(self.schema, row)

    def rows(self, job: str, name: str, params: dict[str, Any], *, write: bool, rows: int = 1,
             attempts: int = contention.ATTEMPTS) -> Plan[Rows]:
        """One statement's rows, run again while the server rolls it back (``retried``)."""
        return retried(job, self.query(name, params, write=write, rows=rows), attempts)

    # -- the protocol ------------------------------------------------------------------------
    def submit_many(self, job_ids: list[str], actor: str | None, max_attempts: int | None = None,
                    delay: float = 0.0) -> Plan[None]:
        if not job_ids:
            return
        params = {"ids": job_ids, "actor": actor, "max_attempts": max_attempts, "delay": delay}
        ((*bad, _told),) = yield from self.rows(job_ids[0], "SUBMIT", params, write=True)
        if bad[0] is not None:  # a corrupt row among them: nothing was written
            self.decode(bad)
            raise CorruptRecord(f"{self.schema}.jobs/{bad[0]}", "refused by the store's check")

    def claim(self, job_id: str, owner: str, ttl: float, max_attempts: int | None = None) -> Plan[Lease]:
        query = self.query("CLAIM", {"job": job_id, "owner": owner, "ttl": ttl, "max_attempts": max_attempts},
                           write=True)

        def attempt() -> Attempt[Lease]:
            rows = yield query
            if not rows:  # a first claim of the job by someone else, not yet visible to our read
                raise contention.Collided
            outcome, *record, now, _ = rows[0]
            if outcome == "won":
                _, _, holder, token, until, seconds = record[:6]
                return Lease(job_id, holder, token, until, seconds, attempt=record[q.ATTEMPTS_AT])
            # AlreadyClaimed, JobCompleted, JobParked, JobScheduled, TokensExhausted:
            transitions.refuse_claim(self.decode(record), job_id, now)
            # Claimable after all: the row changed between the statement's judgement and its read.
            raise contention.Collided

        return attempted(attempt, job_id)

    def claim_next(self, owner: str, ttl: float) -> Plan[Lease | None]:
        rows = yield from self.rows(CLAIM_NEXT, "CLAIM_NEXT", {"owner": owner, "ttl": ttl}, write=True,
                                    attempts=contention.CLAIM_NEXT_ATTEMPTS)
        return _leases(rows)[0] if rows else None

    def claim_next_many(self, owner: str, ttl: float, n: int) -> Plan[list[Lease]]:
        """CLAIM_NEXT_MANY: up to ``n`` claims in one statement, in claim_next's order."""
        rows = yield from self.rows(CLAIM_NEXT, "CLAIM_NEXT_MANY", {"owner": owner, "ttl": ttl, "n": n}, write=True,
                                    rows=n, attempts=contention.CLAIM_NEXT_ATTEMPTS)
        return _leases(rows)

    def _holder_op(self, name: str, op: Op, lease: Lease, **extra: Any) -> Plan[Lease]:
        """The lease as the change left it (renew's), or StaleLease for a refusal."""
        query = self.query(name, {"job": lease.job_id, "owner": lease.owner, "token": lease.token, **extra},
                           write=True)

        def attempt() -> Attempt[Lease]:
            ((outcome, until, ttl, runs, now, _, *record),) = yield query
            if outcome == "done":
                return Lease(lease.job_id, lease.owner, lease.token, until, ttl, attempt=runs)
            if outcome == "retry":  # the row changed between the statement's judgement and its read
                raise contention.Collided
            raise self._refusal(op, lease, outcome, record, now)

        return attempted(attempt, lease.job_id)

    def _refusal(self, op: Op, lease: Lease, outcome: str, record: list[Any], now: float) -> StaleLease:
        """The refusal a holder statement's row reports; raises CorruptRecord for 'corrupt'."""
        rec = None if record[0] is None else self.decode(record)
        return StaleLease(transitions.rejection(rec, op, lease, Reason(outcome), now))

    def renew(self, lease: Lease, ttl: float) -> Plan[Lease]:
        return (yield from self._holder_op("RENEW", Op.RENEW, lease, ttl=ttl))

    def renew_many(self, renewals: Sequence[Renewal]) -> Plan[list[Lease | LeaseError]]:
        """RENEW_MANY: every lease in one statement, each judged (and refused) alone."""
        found = yield from self._holders("RENEW_MANY", Op.RENEW, renewals, "ttls")
        return [Lease(lease.job_id, lease.owner, lease.token, *done) if isinstance(done, tuple) else done
                for (lease, _), done in zip(renewals, found, strict=True)]

    def complete_many(self, completions: Sequence[Completion]) -> Plan[list[LeaseError | None]]:
        """COMPLETE_MANY: every lease in one statement, each judged (and refused) alone."""
        found = yield from self._holders("COMPLETE_MANY", Op.COMPLETE, completions, "results")
        return [None if isinstance(done, tuple) else done for done in found]

    def _holders(self, name: str, op: Op, asked: Sequence[tuple[Lease, Any]],
                 argument: str) -> Plan[list[tuple[float, float] | LeaseError]]:
        """One of the holder statements over many leases (``q._holders``): for each, its new
        (lease end, TTL), or why it was refused; a lease whose row changed between its
        judgement and its change is asked again; one that lost every race is ``Outraced``."""
        found: dict[int, tuple[float, float] | LeaseError] = {}
        left = list(range(len(asked)))

        def answers() -> list[tuple[float, float] | LeaseError]:
            return [found[i] for i in range(len(asked))]

        def attempt() -> Attempt[list[tuple[float, float] | LeaseError]]:
            nonlocal left
            if not left:
                return answers()
            these = [asked[i] for i in left]
            rows = yield self.query(name, {
                "jobs": [lease.job_id for lease, _ in these], "owners": [lease.owner for lease, _ in these],
                "tokens": [lease.token for lease, _ in these], argument: [arg for _, arg in these]},
                write=True, rows=len(these))
            for n, outcome, until, ttl, now, _, *record in rows:
                i = left[n - 1]
                if outcome == "done":
                    found[i] = (until, ttl)
                else:
                    try:
                        found[i] = self._refusal(op, asked[i][0], outcome, record, now)
                    except CorruptRecord as exc:
                        found[i] = exc
            left = [i for i in left if i not in found]
            if left:  # judged current, changed before written
                raise contention.Collided
            return answers()

        def gave_up() -> list[tuple[float, float] | LeaseError]:
            found.update((i, contention.outraced(asked[i][0].job_id)) for i in left)
            return answers()

        return (yield from attempted(attempt, asked[0][0].job_id if asked else READ, gave_up=gave_up))

    def complete(self, lease: Lease, result: bytes | None) -> Plan[None]:
        yield from self._holder_op("COMPLETE", Op.COMPLETE, lease, result=result)

    def release(self, lease: Lease) -> Plan[None]:
        yield from self._holder_op("RELEASE", Op.RELEASE, lease)

    def fail(self, lease: Lease, error: str | None, retry: Retry) -> Plan[None]:
        yield from self._holder_op("FAIL", Op.FAIL, lease, error=error, after=retry.after, base=retry.base,
                                   factor=retry.factor, cap=retry.cap, draw=retry.draw)

    def requeue(self, job_id: str, actor: str | None, delay: float, token: int | None) -> Plan[None]:
        rows = yield from self.rows(job_id, "REQUEUE", {"job": job_id, "actor": actor, "delay": delay,
                                                        "expected": token}, write=True)
        if not rows:
            raise JobNotFound(job_id)
        *row, now, done = rows[0]
        rec = self.decode(row)
        if token is not None and rec.token != token:
            raise TokenChanged(job_id, token, rec.token)  # the statement changed nothing
        if not done:  # judged on the row it locked first: transitions refuses it too
            transitions.requeue(rec, job_id, delay, now)  # raises JobCompleted, AlreadyClaimed

    def force_expire(self, job_id: str, actor: str | None, token: int | None) -> Plan[None]:
        rows = yield from self.rows(job_id, "FORCE_EXPIRE", {"job": job_id, "actor": actor, "expected": token},
                                    write=True)
        if not rows:
            raise JobNotFound(job_id)
        rec = self.decode(rows[0][:q.WIDTH])
        if token is not None and rec.token != token:
            raise TokenChanged(job_id, token, rec.token)  # the statement changed nothing

    def record_rejection(self, r: Rejection) -> Plan[None]:
        yield from self.rows(r.job_id, "RECORD_REJECTION", {
            "job": r.job_id, "op": r.op.value, "owner": r.owner, "token": r.token,
            "current_owner": r.current_owner, "current_token": r.current_token, "at": r.at,
            "reason": r.reason, "kind": r.kind.value, "resource": r.resource}, write=True)

    # -- reads -------------------------------------------------------------------------------
    def get(self, job_id: str) -> Plan[JobStatus | None]:
        rows = yield from self.rows(job_id, "GET", {"job": job_id}, write=False)
        return status_of(self.schema, rows[0][:q.WIDTH], rows[0][q.WIDTH]) if rows else None

    def jobs_page(self, after: str) -> Plan[tuple[list[JobStatus], str | None]]:
        """Jobs after ``after`` by id, and the id to read the next page after (None: no more).
        ``""`` is below every job id: ids have at least one character."""
        rows = yield from self.rows(READ, "JOBS_PAGE", {"after": after, "limit": JOBS_PAGE}, write=False)
        found = [listed_row(self.schema, row[:q.WIDTH], row[q.WIDTH]) for row in rows]
        return found, (rows[-1][0] if len(rows) == JOBS_PAGE else None)

    def rejections_with_ids(self, since: float | None, limit: int | None,
                            after: int = 0) -> Plan[list[tuple[Rejection, int]]]:
        rows = yield from self.rows(READ, "REJECTIONS", {"since": -1e300 if since is None else since,
                                                           "limit": limit, "after": after}, write=False)
        return [(_rejection(r), r[10]) for r in rows]

    def job_rejections(self, job_id: str, since: float | None, limit: int | None) -> Plan[list[Rejection]]:
        rows = yield from self.rows(job_id, "JOB_REJECTIONS", {  # through rejections_job
            "job": job_id, "since": -1e300 if since is None else since, "limit": limit}, write=False)
        return [_rejection(r) for r in rows]

    def rejections(self, since: float | None, limit: int | None, after: int = 0) -> Plan[list[Rejection]]:
        return [r for r, _ in (yield from self.rejections_with_ids(since, limit, after))]

    def history(self, job_id: str | None, since: float | None, limit: int | None) -> Plan[list[HistoryEvent]]:
        rows = yield from self.rows(job_id or READ, "HISTORY" if job_id is None else "JOB_HISTORY", {
            "job": job_id, "since": -1e300 if since is None else since, "limit": limit}, write=False)
        return [HistoryEvent(r[0], Op(r[1]), r[2], r[3], r[4], r[5]) for r in rows]

    def now(self) -> Plan[float]:
        ((now,),) = yield from self.rows(READ, "NOW", {}, write=False)
        return float(now)

    def state_counts(self) -> Plan[dict[str, int]]:
        return dict((yield from self.rows(READ, "STATE_COUNTS", {}, write=False)))

    # -- operator queries: aggregated in SQL, one page at a time ----------------------------
    def summary(self, now: float, soon: float) -> Plan[Summary]:
        params = {"now": now, "soon": now + soon, "hour": now - 3600.0}
        counts: dict[str, int] = dict((yield from self.rows(READ, "SUMMARY", params, write=False)))
        return Summary(now=now, pending=counts.get("pending", 0),
                       leased=counts.get("leased", 0) + counts.get("soon", 0),
                       expiring_soon=counts.get("soon", 0), expired=counts.get("expired", 0),
                       completed=counts.get("completed", 0), corrupt=counts.get("corrupt", 0),
                       rejections_last_hour=counts.get("rejections", 0), scheduled=counts.get("scheduled", 0),
                       parked=counts.get("parked", 0))

    def page(self, now: float, states: frozenset[JobState] | None, job: str | None,
             owner: str | None, order: str, offset: int, limit: int) -> Plan[JobPage]:
        where = ["true"]
        if states is not None:
            where.append("(" + (" OR ".join(_STATE_SQL[s] for s in sorted(states)) or "false") + ")")
        if job is not None:
            where.append(f"strpos(translate(j.job_id, '{_UPPER}', '{_UPPER.lower()}'), %(job)s) > 0")
        if owner is not None:
            where.append(f"strpos(translate(j.owner, '{_UPPER}', '{_UPPER.lower()}'), %(owner)s) > 0")
        cond = " AND ".join(where)
        by = "j.lease_until IS NULL, j.lease_until, j.job_id" if order == "expiry" else "j.job_id"
        table = f"{self.quoted}.jobs"
        args = {"now": now, "job": None if job is None else fold(job),
                "owner": None if owner is None else fold(owner), "limit": limit, "offset": offset}
        ((total,),) = yield from retried(READ, Query.of(f"SELECT count(*) FROM {table} j WHERE {cond}", args,
                                                          write=False))
        rows = yield from retried(READ, Query.of(f"SELECT {q.JOB_COLUMNS} FROM {table} j WHERE {cond} ORDER BY {by}"
                                                   " LIMIT %(limit)s OFFSET %(offset)s", args, write=False))
        return JobPage([listed_row(self.schema, r, now) for r in rows], int(total), offset, limit)


def retried(job: str, query: Query, attempts: int = contention.ATTEMPTS) -> Plan[Rows]:
    """``query``'s rows; run again while the server rolls it back (a serialization failure, a
    deadlock: certainly not applied), as the core's policy says (``steps.attempted``;
    claim_next's statements as often as the core's claim_next)."""
    def attempt() -> Attempt[Rows]:
        return (yield query)

    return attempted(attempt, job, attempts)


# transitions.judged, state by state, at the page's now.
_SPENT = f"NOT {q.attempt_left('j')}"
_STATE_SQL = {
    JobState.PENDING: f"(j.state = 'pending' AND (j.claimable_at IS NULL OR j.claimable_at <= %(now)s)"
                      f" AND {q.valid('j')})",
    JobState.SCHEDULED: f"(j.state = 'pending' AND j.claimable_at > %(now)s AND {q.valid('j')})",
    JobState.LEASED: f"(j.state = 'leased' AND j.lease_until > %(now)s AND {q.valid('j')})",
    JobState.EXPIRED: f"(j.state = 'leased' AND j.lease_until <= %(now)s AND {q.attempt_left('j')} AND {q.valid('j')})",
    JobState.PARKED: f"((j.state = 'parked' OR (j.state = 'leased' AND j.lease_until <= %(now)s AND {_SPENT}))"
                     f" AND {q.valid('j')})",
    JobState.COMPLETED: f"(j.state = 'completed' AND {q.valid('j')})",
    JobState.CORRUPT: f"(NOT {q.valid('j')})",
}


def _leases(rows: Rows) -> list[Lease]:
    """The leases CLAIM_NEXT and CLAIM_NEXT_MANY won, in their rows' order."""
    return [Lease(job_id, holder, token, until, seconds, attempt=attempt)
            for job_id, holder, token, until, seconds, attempt, _ in rows]


def _rejection(r: tuple[Any, ...]) -> Rejection:
    return Rejection(r[0], Op(r[1]), r[2], r[3], r[4], r[5], r[6], r[7], RejectionKind(r[8]), r[9])
