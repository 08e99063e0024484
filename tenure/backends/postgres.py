"""``postgresql://user@host:5432/dbname?schema=tenure``: leases in PostgreSQL tables.

Every claim, renew, complete and release is ONE statement (one round trip) that reads the
server's ``clock_timestamp()``, judges, writes and audits (see ``postgres_sql``). Store time
is the server's clock, never the worker's. Tokens live in the job's row, which is never
deleted, so they grow across completion and resubmission, restarts and crashes, as long as
an acknowledged commit is never lost: the backend refuses ``fsync=off``, makes its sessions
``synchronous_commit=on`` where the server says otherwise, and warns about asynchronous
standbys (a failover to one can lose the latest claim). docs/backends/postgres.md has the
layout, the statements and what a failover needs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql

from tenure.backends import postgres_sql as q
from tenure.backends.postgres_connection import (
    Settings,
    Watchdog,
    connection_error,
    open_pool,
    retryable,
)
from tenure.backends.postgres_schema import check_durability, check_schema_name, migrate
from tenure.core import codec, contention, transitions
from tenure.core.backend import Backend, Characteristics, corrupt_status
from tenure.core.clock import Clock
from tenure.core.errors import BackendUnavailable, CorruptRecord, InvalidArgument, JobNotFound, StaleLease, TokenChanged
from tenure.core.options import Options, StoreURL
from tenure.core.queries import fold
from tenure.core.records import (
    Change,
    HistoryEvent,
    JobPage,
    JobState,
    JobStatus,
    Lease,
    Op,
    Reason,
    Rejection,
    RejectionKind,
    Summary,
)
from tenure.core.transitions import JobRecord, status

log = logging.getLogger("tenure.postgres")

_ATTEMPTS = 5  # a statement that lost a race (a row changed between two of its reads) is re-run
_TRIM_EVERY = 256  # writes between two trims of the audit tables
_PAGE = 2000
_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
_LIBPQ_OPTIONS = ("sslrootcert", "sslcert", "sslkey", "target_session_attrs", "application_name")
_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def decode_row(schema: str, row: tuple[Any, ...] | list[Any]) -> JobRecord:
    """A job row as a record; CorruptRecord for one tenure did not write (the rule of ``q.valid``)."""
    job_id, state, owner, token, lease_until, ttl, sub, cla, ren, com, runs, result = row
    key = f"{schema}.jobs/{job_id}"
    state = codec.state(key, state)
    if token < 0 or runs < 0:
        raise CorruptRecord(key, f"bad token {token!r} or runs {runs!r}")
    if state is JobState.LEASED and (owner is None or lease_until is None or ttl is None):
        raise CorruptRecord(key, "leased without owner or expiry")
    return JobRecord(job_id, state, owner, token, lease_until, ttl, sub, cla, ren, com, runs,
                     None if result is None else bytes(result))


class PostgresBackend(Backend):
    characteristics = Characteristics(
        name="postgres",
        store_clock="the PostgreSQL server's clock (clock_timestamp(), read inside each deciding statement)",
        # libpq's prefer (its default) and allow fall back to clear text: they do not count.
        tls_options=("sslmode=require", "sslmode=verify-ca", "sslmode=verify-full"),
    )

    def __init__(self, settings: Settings, *, schema: str = "tenure", retention: int = 10_000,
                 notify: bool = True, unsafe_durability: bool = False) -> None:
        self.settings = settings
        self.schema = check_schema_name(schema)
        self.retention = retention
        self.channel = f"tenure_{schema}"[:63]
        self.notify = notify
        self._writes = 0
        self._count_lock = threading.Lock()
        self.watchdog = Watchdog(settings.timeout + 1.0)
        try:
            with psycopg.connect(settings.conninfo(), autocommit=True) as conn:
                quoted = sql.Identifier(schema).as_string(conn)
                self.previous_version = migrate(conn, schema, quoted)
                commit = check_durability(conn, unsafe_durability)
                self.server_version = conn.info.server_version
        except psycopg.Error as exc:
            raise connection_error(settings, exc) from exc
        if commit:
            log.info("%s: this store's sessions use synchronous_commit=%s", settings.where(), commit)
        self.quoted = quoted
        self.statements = {name: text.format(s=quoted) for name, text in q.STATEMENTS.items()}
        self._trim = [q.TRIM.format(s=quoted, table=t) for t in ("events", "rejections")]
        self.pool = open_pool(settings, settings.conninfo(commit))

    @classmethod
    def from_url(cls, url: StoreURL, options: Options, clock: Clock | None) -> PostgresBackend:
        # An injected clock serves the holders' deadlines (Store); store time stays the server's.
        dbname = url.path.strip("/")
        if not url.hosts or not dbname or "/" in dbname:
            raise InvalidArgument("PostgreSQL URLs look like postgresql://user@host:5432/dbname?schema=tenure")
        timeout = options.number("timeout", 5.0, low=0.1, high=600.0)
        assert timeout is not None
        libpq = {"sslmode": value} if (value := options.text("sslmode", choices=_SSLMODES)) else {}
        libpq.update({name: value for name in _LIBPQ_OPTIONS if (value := options.text(name)) is not None})
        settings = Settings(url.hosts, dbname, url.username, url.password, timeout,
                            options.integer("pool_size", 10, low=1, high=1000), libpq)
        kwargs: dict[str, Any] = {
            "schema": options.text("schema", "tenure"),
            "retention": options.integer("retention", 10_000, low=1),
            "notify": options.boolean("notify", True),
            "unsafe_durability": options.boolean("unsafe_durability", False),
        }
        options.finish()
        return cls(settings, **kwargs)

    # -- running statements ------------------------------------------------------------------
    def _run(self, name: str, params: dict[str, Any], *, write: bool) -> list[tuple[Any, ...]]:
        params = {**params, "channel": self.channel if self.notify else ""}
        for attempt in range(_ATTEMPTS):
            sent = False
            try:
                with self.pool.connection() as conn, self.watchdog.guard(conn):
                    sent = True
                    rows: list[tuple[Any, ...]] = conn.execute(self.statements[name], params).fetchall()
                break
            except psycopg.Error as exc:
                if retryable(exc) and attempt + 1 < _ATTEMPTS:
                    continue  # rolled back by the server: certainly not applied
                raise self._error(exc, sent_write=write and sent) from exc
        if write:
            self._count_write()
        return rows

    def _error(self, exc: psycopg.Error, *, sent_write: bool) -> BackendUnavailable:
        if not sent_write and isinstance(exc, psycopg.OperationalError) and "couldn't get a connection" in str(exc):
            # The pool says only that it waited: one direct attempt tells the operator why.
            try:
                psycopg.connect(self.settings.conninfo(), autocommit=True).close()
            except psycopg.Error as cause:
                return connection_error(self.settings, cause)
        return connection_error(self.settings, exc, sent_write=sent_write)

    def _count_write(self) -> None:
        with self._count_lock:
            self._writes += 1
            due = self._writes % _TRIM_EVERY == 0
        if due:  # housekeeping, after the operation: bounded retention of events and rejections
            try:
                with self.pool.connection() as conn, self.watchdog.guard(conn):
                    for statement in self._trim:
                        conn.execute(statement, {"keep": self.retention})
            except psycopg.Error as exc:
                log.warning("trimming the audit failed (it is retried later): %s", self.settings.scrub(str(exc)))

    def _decode(self, row: tuple[Any, ...] | list[Any]) -> JobRecord:
        return decode_row(self.schema, row)

    # -- the protocol ------------------------------------------------------------------------
    def submit(self, job_id: str, actor: str | None = None) -> None:
        self.submit_many([job_id], actor)

    def submit_many(self, job_ids: list[str], actor: str | None = None) -> None:
        if not job_ids:
            return
        ((*bad, _told),) = self._run("SUBMIT", {"ids": job_ids, "actor": actor}, write=True)
        if bad[0] is not None:  # a corrupt row among them: nothing was written
            self._decode(bad)
            raise CorruptRecord(f"{self.schema}.jobs/{bad[0]}", "refused by the store's check")

    def claim(self, job_id: str, owner: str, ttl: float) -> Lease:
        for _ in range(_ATTEMPTS):
            rows = self._run("CLAIM", {"job": job_id, "owner": owner, "ttl": ttl}, write=True)
            if not rows:
                continue  # a first claim of the job by someone else, not yet visible to our read
            outcome, *record, now, _ = rows[0]
            if outcome == "won":
                _, _, holder, token, until, seconds = record[:6]
                return Lease(job_id, holder, token, until, seconds)
            transitions.claim(self._decode(record), job_id, owner, ttl, now)  # raises AlreadyClaimed, JobCompleted
            # Claimable after all: the row changed between the statement's judgement and its read.
        raise contention.outraced(job_id, _ATTEMPTS)  # nothing was written: as on every backend

    def claim_next(self, owner: str, ttl: float) -> Lease | None:
        rows = self._run("CLAIM_NEXT", {"owner": owner, "ttl": ttl}, write=True)
        if not rows:
            return None
        job_id, holder, token, until, seconds, _ = rows[0]
        return Lease(job_id, holder, token, until, seconds)

    def _holder_op(self, name: str, op: Op, lease: Lease, **extra: Any) -> tuple[float, float]:
        params = {"job": lease.job_id, "owner": lease.owner, "token": lease.token, **extra}
        for _ in range(_ATTEMPTS):
            ((outcome, until, ttl, now, _, *record),) = self._run(name, params, write=True)
            if outcome == "done":
                return until, ttl
            if outcome == "retry":
                continue  # the row changed between the statement's judgement and its read
            rec = None if record[0] is None else self._decode(record)  # raises for 'corrupt'
            raise StaleLease(transitions.rejection(rec, op, lease, Reason(outcome), now))
        raise BackendUnavailable(f"job {lease.job_id!r} changed under every one of {_ATTEMPTS} attempts")

    def renew(self, lease: Lease, ttl: float) -> Lease:
        until, seconds = self._holder_op("RENEW", Op.RENEW, lease, ttl=ttl)
        return Lease(lease.job_id, lease.owner, lease.token, until, seconds)

    def complete(self, lease: Lease, result: bytes | None) -> None:
        self._holder_op("COMPLETE", Op.COMPLETE, lease, result=result)

    def release(self, lease: Lease) -> None:
        self._holder_op("RELEASE", Op.RELEASE, lease)

    def force_expire(self, job_id: str, actor: str | None = None, token: int | None = None) -> None:
        rows = self._run("FORCE_EXPIRE", {"job": job_id, "actor": actor, "expected": token}, write=True)
        if not rows:
            raise JobNotFound(job_id)
        rec = self._decode(rows[0][:12])
        if token is not None and rec.token != token:
            raise TokenChanged(job_id, token, rec.token)  # the statement changed nothing

    def record_rejection(self, r: Rejection) -> None:
        self._run("RECORD_REJECTION", {
            "job": r.job_id, "op": r.op.value, "owner": r.owner, "token": r.token,
            "current_owner": r.current_owner, "current_token": r.current_token, "at": r.at,
            "reason": r.reason, "kind": r.kind.value, "resource": r.resource}, write=True)

    # -- reads -------------------------------------------------------------------------------
    def status_of(self, row: tuple[Any, ...] | list[Any], now: float) -> JobStatus:
        try:
            return status(self._decode(row), now)
        except CorruptRecord as exc:
            return corrupt_status(str(row[0]), exc.key, exc)

    def get(self, job_id: str) -> JobStatus | None:
        rows = self._run("GET", {"job": job_id}, write=False)
        return self.status_of(rows[0][:12], rows[0][12]) if rows else None

    def jobs(self) -> Iterator[JobStatus]:
        after = ""  # below every job id: ids have at least one character
        while True:
            rows = self._run("JOBS_PAGE", {"after": after, "limit": _PAGE}, write=False)
            for row in rows:
                yield self.status_of(row[:12], row[12])
            if len(rows) < _PAGE:
                return
            after = rows[-1][0]

    def rejections(self, since: float | None, limit: int | None, after: int = 0) -> list[Rejection]:
        return [r for r, _ in self.rejections_with_ids(since, limit, after)]

    def rejections_with_ids(self, since: float | None, limit: int | None,
                            after: int = 0) -> list[tuple[Rejection, int]]:
        rows = self._run("REJECTIONS", {"since": -1e300 if since is None else since, "limit": limit,
                                        "after": after}, write=False)
        return [(_rejection(r), r[10]) for r in rows]

    def job_rejections(self, job_id: str, since: float | None, limit: int | None) -> list[Rejection]:
        rows = self._run("JOB_REJECTIONS", {"job": job_id, "since": -1e300 if since is None else since,
                                            "limit": limit}, write=False)  # through rejections_job
        return [_rejection(r) for r in rows]

    def history(self, job_id: str | None, since: float | None, limit: int | None) -> list[HistoryEvent]:
        rows = self._run("HISTORY", {"job": job_id, "since": -1e300 if since is None else since,
                                     "limit": limit}, write=False)
        return [HistoryEvent(r[0], Op(r[1]), r[2], r[3], r[4], r[5]) for r in rows]

    def now(self) -> float:
        ((now,),) = self._run("NOW", {}, write=False)
        return float(now)

    def watch(self, stop: threading.Event, interval: float) -> Iterator[Change]:
        if not self.notify:
            return super().watch(stop, interval)
        from tenure.backends.postgres_watch import watch

        return watch(self, stop, interval)

    def health(self) -> dict[str, Any]:
        counts = dict(self._run("STATE_COUNTS", {}, write=False))
        return {"backend": "postgres", "server": self.settings.where(), "schema": self.schema,
                "server_version": self.server_version, "jobs": sum(counts.values()),
                "store_clock": self.characteristics.store_clock}

    def close(self) -> None:
        self.pool.close()
        self.watchdog.close()

    # -- operator queries: aggregated in SQL, one page at a time ----------------------------
    def summary(self, now: float, soon: float) -> Summary:
        counts = dict(self._run("SUMMARY", {"now": now, "soon": now + soon, "hour": now - 3600.0}, write=False))
        return Summary(now=now, pending=counts.get("pending", 0),
                       leased=counts.get("leased", 0) + counts.get("soon", 0),
                       expiring_soon=counts.get("soon", 0), expired=counts.get("expired", 0),
                       completed=counts.get("completed", 0), corrupt=counts.get("corrupt", 0),
                       rejections_last_hour=counts.get("rejections", 0))

    def page(self, now: float, states: frozenset[JobState] | None, job: str | None,
             owner: str | None, order: str, offset: int, limit: int) -> JobPage:
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
        try:
            with self.pool.connection() as conn, self.watchdog.guard(conn):
                ((total,),) = conn.execute(f"SELECT count(*) FROM {table} j WHERE {cond}", args).fetchall()
                rows = conn.execute(f"SELECT {q.JOB_COLUMNS} FROM {table} j WHERE {cond} ORDER BY {by}"
                                    " LIMIT %(limit)s OFFSET %(offset)s", args).fetchall()
        except psycopg.Error as exc:
            raise self._error(exc, sent_write=False) from exc
        return JobPage([self.status_of(r, now) for r in rows], int(total), offset, limit)


_STATE_SQL = {
    JobState.PENDING: f"(j.state = 'pending' AND {q.valid('j')})",
    JobState.LEASED: f"(j.state = 'leased' AND j.lease_until > %(now)s AND {q.valid('j')})",
    JobState.EXPIRED: f"(j.state = 'leased' AND j.lease_until <= %(now)s AND {q.valid('j')})",
    JobState.COMPLETED: f"(j.state = 'completed' AND {q.valid('j')})",
    JobState.CORRUPT: f"(NOT {q.valid('j')})",
}


def _rejection(r: tuple[Any, ...]) -> Rejection:
    return Rejection(r[0], Op(r[1]), r[2], r[3], r[4], r[5], r[6], r[7], RejectionKind(r[8]), r[9])
