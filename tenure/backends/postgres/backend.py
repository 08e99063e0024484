"""``postgresql://user@host:5432/dbname?schema=tenure``: leases in PostgreSQL tables.

Every claim, renew, complete, release, fail and requeue is ONE statement (one round trip) that reads the
server's ``clock_timestamp()``, judges, writes and audits (see ``sql``). Store time
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
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from tenure.backends.postgres.connection import (
    Settings,
    Watchdog,
    connection_error,
    open_pool,
    pool_only_waited,
    retryable,
)
from tenure.backends.postgres.ops import Effect, Plan, Plans, Query, Rows, Trims
from tenure.backends.postgres.schema import check_durability, check_schema_name, migrate
from tenure.core import contention, io_drivers
from tenure.core.backend import Backend, Characteristics, Durability
from tenure.core.clock import Clock
from tenure.core.errors import BackendUnavailable, InvalidArgument, LeaseError
from tenure.core.lifecycle import Retry
from tenure.core.options import Options, StoreURL
from tenure.core.records import Change, HistoryEvent, JobPage, JobState, JobStatus, Lease, Rejection, Summary
from tenure.core.steps import Completion, Renewal

log = logging.getLogger("tenure.postgres")

_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
_LIBPQ_OPTIONS = ("sslrootcert", "sslcert", "sslkey", "target_session_attrs", "application_name")
T = TypeVar("T")


def settings_from_url(url: StoreURL, options: Options) -> tuple[Settings, dict[str, Any]]:
    """The connection settings and the backend's keyword arguments a URL gives (both flavours)."""
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
        "create": options.boolean("create", True),
    }
    options.finish()
    return settings, kwargs


@dataclass(frozen=True)
class Prepared:
    quoted: str  # the schema's name, quoted for SQL
    previous_version: int  # the schema's version before this store migrated it (0: created)
    server_version: int
    synchronous_commit: str | None  # what this store's sessions set, where the server says otherwise


def prepare(settings: Settings, schema: str, unsafe_durability: bool, create: bool = True) -> Prepared:
    """Create (unless ``create`` is false) or migrate the schema and check durability, on a
    connection of its own, once per store (for the asyncio backend too: a one-time step when it opens)."""
    try:
        with psycopg.connect(settings.conninfo(), autocommit=True) as conn:
            quoted = sql.Identifier(schema).as_string(conn)
            previous = migrate(conn, schema, quoted, create)
            commit = check_durability(conn, unsafe_durability)
            prepared = Prepared(quoted, previous, conn.info.server_version, commit)
    except psycopg.Error as exc:
        raise connection_error(settings, exc) from exc
    if commit:
        log.info("%s: this store's sessions use synchronous_commit=%s", settings.where(), commit)
    return prepared


class PostgresBackend(Backend):
    characteristics = Characteristics(
        name="postgres",
        store_clock="the PostgreSQL server's clock (clock_timestamp(), read inside each deciding statement)",
        durability=Durability.FSYNC,  # fsync=off refused, synchronous_commit=on (schema.py)
        min_ttl=0.1,  # a held lease renews every TTL/3, each renewal a round trip and a commit
        # libpq's prefer (its default) and allow fall back to clear text: they do not count.
        tls_options=("sslmode=require", "sslmode=verify-ca", "sslmode=verify-full"),
        environment=(("PGSSLMODE", "sslmode"), ("PGPASSWORD", "password")),
        create_option=True,
    )

    def __init__(self, settings: Settings, *, schema: str = "tenure", retention: int = 10_000,
                 notify: bool = True, unsafe_durability: bool = False, create: bool = True) -> None:
        self.settings = settings
        self.schema = check_schema_name(schema)
        self.retention = retention
        self.channel = f"tenure_{schema}"[:63]
        self.notify = notify
        self.watchdog = Watchdog(settings.timeout + 1.0)
        prepared = prepare(settings, schema, unsafe_durability, create)
        self.quoted, self.server_version = prepared.quoted, prepared.server_version
        self.previous_version = prepared.previous_version
        self.plans = Plans(self.schema, self.quoted, self.channel if notify else "")
        self.statements = self.plans.statements
        self._trims = Trims()
        self.pool = open_pool(settings, settings.conninfo(prepared.synchronous_commit))

    @classmethod
    def from_url(cls, url: StoreURL, options: Options, clock: Clock | None) -> PostgresBackend:
        # An injected clock serves the holders' deadlines (Store); store time stays the server's.
        settings, kwargs = settings_from_url(url, options)
        return cls(settings, **kwargs)

    # -- running statements ------------------------------------------------------------------
    def _do(self, plan: Plan[T]) -> T:
        return io_drivers.run(plan, self.answer)

    def answer(self, effect: Effect) -> Rows:
        """What a plan asked for: a query's rows, or none after the pause the core asked for."""
        if isinstance(effect, contention.Pause):
            time.sleep(effect.seconds)
            return []
        return self.execute(effect)

    def execute(self, query: Query) -> Rows:
        """Run one query on a pooled connection; ``Collided`` if the server rolled it back."""
        sent = False
        try:
            with self.pool.connection() as conn, self.watchdog.guard(conn):
                sent = True
                # A raw cursor: the statement is in PostgreSQL's form already (ops.Statement).
                rows: Rows = psycopg.RawCursor(conn).execute(query.text, query.args).fetchall()
        except psycopg.Error as exc:
            if retryable(exc):  # rolled back by the server: certainly not applied
                raise contention.Collided from exc
            raise self._error(exc, sent_write=query.write and sent) from exc
        if query.write and self._trims.due(query.rows):
            self._trim()
        return rows

    def _error(self, exc: psycopg.Error, *, sent_write: bool) -> BackendUnavailable:
        if pool_only_waited(exc, sent_write):
            try:
                psycopg.connect(self.settings.conninfo(), autocommit=True).close()
            except psycopg.Error as cause:
                return connection_error(self.settings, cause)
        return connection_error(self.settings, exc, sent_write=sent_write)

    def _trim(self) -> None:
        # Housekeeping, after the operation: bounded retention of events and rejections.
        try:
            with self.pool.connection() as conn, self.watchdog.guard(conn):
                for statement in self.plans.trims:
                    conn.execute(statement, {"keep": self.retention})
        except psycopg.Error as exc:
            log.warning("trimming the audit failed (it is retried later): %s", self.settings.scrub(str(exc)))

    # -- the protocol ------------------------------------------------------------------------
    def submit(self, job_id: str, actor: str | None = None, *, max_attempts: int | None = None,
               delay: float = 0.0) -> None:
        self.submit_many([job_id], actor, max_attempts=max_attempts, delay=delay)

    def submit_many(self, job_ids: list[str], actor: str | None = None, *, max_attempts: int | None = None,
                    delay: float = 0.0) -> None:
        self._do(self.plans.submit_many(job_ids, actor, max_attempts, delay))

    def claim(self, job_id: str, owner: str, ttl: float, *, max_attempts: int | None = None) -> Lease:
        return self._do(self.plans.claim(job_id, owner, ttl, max_attempts))

    def fail(self, lease: Lease, error: str | None, retry: Retry) -> None:
        self._do(self.plans.fail(lease, error, retry))

    def requeue(self, job_id: str, actor: str | None = None, delay: float = 0.0, token: int | None = None) -> None:
        self._do(self.plans.requeue(job_id, actor, delay, token))

    def claim_next(self, owner: str, ttl: float) -> Lease | None:
        return self._do(self.plans.claim_next(owner, ttl))

    def renew(self, lease: Lease, ttl: float) -> Lease:
        return self._do(self.plans.renew(lease, ttl))

    RENEWS_IN_BATCHES = True
    CLAIMS_IN_BATCHES = True
    COMPLETES_IN_BATCHES = True

    def claim_next_many(self, owner: str, ttl: float, n: int) -> list[Lease]:
        return self._do(self.plans.claim_next_many(owner, ttl, n))  # one statement for all of them

    def complete_many(self, completions: Sequence[Completion]) -> list[LeaseError | None]:
        return self._do(self.plans.complete_many(completions))  # one statement for all of them

    def renew_many(self, renewals: Sequence[Renewal]) -> list[Lease | LeaseError]:
        return self._do(self.plans.renew_many(renewals))  # one statement for all of them

    def complete(self, lease: Lease, result: bytes | None) -> None:
        self._do(self.plans.complete(lease, result))

    def release(self, lease: Lease) -> None:
        self._do(self.plans.release(lease))

    def force_expire(self, job_id: str, actor: str | None = None, token: int | None = None) -> None:
        self._do(self.plans.force_expire(job_id, actor, token))

    def record_rejection(self, r: Rejection) -> None:
        self._do(self.plans.record_rejection(r))

    # -- reads -------------------------------------------------------------------------------
    def get(self, job_id: str) -> JobStatus | None:
        return self._do(self.plans.get(job_id))

    def jobs(self) -> Iterator[JobStatus]:
        after: str | None = ""
        while after is not None:
            found, after = self._do(self.plans.jobs_page(after))
            yield from found

    def rejections(self, since: float | None, limit: int | None, after: int = 0) -> list[Rejection]:
        return self._do(self.plans.rejections(since, limit, after))

    def rejections_with_ids(self, since: float | None, limit: int | None,
                            after: int = 0) -> list[tuple[Rejection, int]]:
        return self._do(self.plans.rejections_with_ids(since, limit, after))

    def job_rejections(self, job_id: str, since: float | None, limit: int | None) -> list[Rejection]:
        return self._do(self.plans.job_rejections(job_id, since, limit))

    def history(self, job_id: str | None, since: float | None, limit: int | None) -> list[HistoryEvent]:
        return self._do(self.plans.history(job_id, since, limit))

    def now(self) -> float:
        return self._do(self.plans.now())

    def watch(self, stop: threading.Event, interval: float) -> Iterator[Change]:
        if not self.notify:
            return super().watch(stop, interval)
        from tenure.backends.postgres.watch import watch

        return watch(self, stop, interval)

    def health(self) -> dict[str, Any]:
        return health(self.settings, self.schema, self.server_version, self._do(self.plans.state_counts()))

    def close(self) -> None:
        self.pool.close()
        self.watchdog.close()

    def summary(self, now: float, soon: float) -> Summary:
        return self._do(self.plans.summary(now, soon))

    def page(self, now: float, states: frozenset[JobState] | None, job: str | None,
             owner: str | None, order: str, offset: int, limit: int) -> JobPage:
        return self._do(self.plans.page(now, states, job, owner, order, offset, limit))


def health(settings: Settings, schema: str, version: int, counts: dict[str, int]) -> dict[str, Any]:
    return {"backend": "postgres", "server": settings.where(), "schema": schema,
            "server_version": version, "jobs": sum(counts.values()),
            "store_clock": PostgresBackend.characteristics.store_clock}

