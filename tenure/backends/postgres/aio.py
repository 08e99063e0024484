"""``postgresql://`` for ``tenure.aio``: psycopg's asyncio connections and ``AsyncConnectionPool``.

The operations are ``ops``'s plans, the very ones the sync backend runs: the same
statements, parameters and decoding; this module only runs their queries on the event loop.
No thread per call: a statement is a socket write and read the loop waits on, its timeout a
timer of the loop (``loop_watchdog``). Opening the store creates or migrates its schema and
checks durability once, with the sync code (``postgres.prepare``) in a thread, before the
pool opens: a one-time step, not a per-call one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

import psycopg
import psycopg_pool

from tenure.aio.backend import AsyncBackend, poll
from tenure.backends.postgres.backend import PostgresBackend, health, log, prepare, settings_from_url
from tenure.backends.postgres.connection import (
    Settings,
    connection_error,
    idle_problem,
    loop_watchdog,
    pool_only_waited,
    retryable,
)
from tenure.backends.postgres.ops import Effect, Plan, Plans, Query, Rows, Trims
from tenure.backends.postgres.schema import check_schema_name
from tenure.core import contention, io_drivers
from tenure.core.clock import Clock
from tenure.core.errors import BackendUnavailable, LeaseError
from tenure.core.lifecycle import Retry
from tenure.core.options import Options, StoreURL
from tenure.core.records import Change, HistoryEvent, JobPage, JobState, JobStatus, Lease, Rejection, Summary
from tenure.core.steps import Completion, Renewal

T = TypeVar("T")


class AsyncPostgresBackend(AsyncBackend):
    characteristics = PostgresBackend.characteristics
    io = "psycopg asyncio connections (AsyncConnectionPool), no thread per call"

    def __init__(self, settings: Settings, *, schema: str = "tenure", retention: int = 10_000,
                 notify: bool = True, unsafe_durability: bool = False, create: bool = True) -> None:
        self.settings = settings
        self.schema = check_schema_name(schema)
        self.retention = retention
        self.channel = f"tenure_{schema}"[:63]
        self.notify = notify
        self._unsafe_durability = unsafe_durability
        self._create = create
        self._trims = Trims()
        self._pool: psycopg_pool.AsyncConnectionPool[Any] | None = None
        self.quoted = ""
        self.server_version = 0
        self.plans = Plans(self.schema, "", "")  # replaced once open() knows the quoted name

    @classmethod
    def from_url(cls, url: StoreURL, options: Options, clock: Clock | None) -> AsyncPostgresBackend:
        settings, kwargs = settings_from_url(url, options)
        return cls(settings, **kwargs)

    async def open(self) -> None:
        prepared = await asyncio.to_thread(prepare, self.settings, self.schema, self._unsafe_durability,
                                          self._create)
        self.quoted, self.server_version = prepared.quoted, prepared.server_version
        self.plans = Plans(self.schema, self.quoted, self.channel if self.notify else "")
        self._pool = psycopg_pool.AsyncConnectionPool(
            self.settings.conninfo(prepared.synchronous_commit), min_size=1, max_size=self.settings.pool_size,
            timeout=self.settings.timeout, kwargs={"autocommit": True}, check=_idle_and_alive, open=False,
            name="tenure-aio", reconnect_timeout=self.settings.timeout)  # as open_pool's, for the same reasons
        await self._pool.open(wait=False)

    @property
    def native_watch(self) -> bool:
        return self.notify

    # -- running statements ------------------------------------------------------------------
    async def _do(self, plan: Plan[T]) -> T:
        return await io_drivers.run_async(plan, self.answer)

    @property
    def pool(self) -> psycopg_pool.AsyncConnectionPool[Any]:
        if self._pool is None:
            raise BackendUnavailable("the store is not open (or closed)")
        return self._pool

    async def answer(self, effect: Effect) -> Rows:
        """What a plan asked for: a query's rows, or none after the pause the core asked for."""
        if isinstance(effect, contention.Pause):
            await asyncio.sleep(effect.seconds)
            return []
        return await self.execute(effect)

    async def execute(self, query: Query) -> Rows:
        """Run one query on a pooled connection; ``Collided`` if the server rolled it back."""
        sent = False
        try:
            async with self.pool.connection() as conn:
                sent = True
                with loop_watchdog(conn, self.settings.timeout + 1.0):
                    # A raw cursor: the statement is in PostgreSQL's form already (ops.Statement).
                    cursor = await psycopg.AsyncRawCursor(conn).execute(query.text, query.args)
                    rows: Rows = await cursor.fetchall()
        except psycopg.Error as exc:
            if retryable(exc):  # rolled back by the server: certainly not applied
                raise contention.Collided from exc
            raise await self._error(exc, sent_write=query.write and sent) from exc
        if query.write and self._trims.due(query.rows):
            await self._trim()
        return rows

    async def _error(self, exc: psycopg.Error, *, sent_write: bool) -> BackendUnavailable:
        if pool_only_waited(exc, sent_write):
            try:
                await (await psycopg.AsyncConnection.connect(self.settings.conninfo(), autocommit=True)).close()
            except psycopg.Error as cause:
                return connection_error(self.settings, cause)
        return connection_error(self.settings, exc, sent_write=sent_write)

    async def _trim(self) -> None:
        try:
            async with self.pool.connection() as conn:
                with loop_watchdog(conn, self.settings.timeout + 1.0):
                    for statement in self.plans.trims:
                        await conn.execute(statement, {"keep": self.retention})
        except psycopg.Error as exc:
            log.warning("trimming the audit failed (it is retried later): %s", self.settings.scrub(str(exc)))

    # -- the protocol ------------------------------------------------------------------------
    async def submit_many(self, job_ids: list[str], actor: str | None = None, *, max_attempts: int | None = None,
                          delay: float = 0.0) -> None:
        await self._do(self.plans.submit_many(job_ids, actor, max_attempts, delay))

    async def claim(self, job_id: str, owner: str, ttl: float, *, max_attempts: int | None = None) -> Lease:
        return await self._do(self.plans.claim(job_id, owner, ttl, max_attempts))

    async def fail(self, lease: Lease, error: str | None, retry: Retry) -> None:
        await self._do(self.plans.fail(lease, error, retry))

    async def requeue(self, job_id: str, actor: str | None = None, delay: float = 0.0,
                      token: int | None = None) -> None:
        await self._do(self.plans.requeue(job_id, actor, delay, token))

    async def claim_next(self, owner: str, ttl: float) -> Lease | None:
        return await self._do(self.plans.claim_next(owner, ttl))

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        return await self._do(self.plans.renew(lease, ttl))

    @property
    def renews_in_batches(self) -> bool:
        return True

    @property
    def claims_in_batches(self) -> bool:
        return True

    @property
    def completes_in_batches(self) -> bool:
        return True

    async def claim_next_many(self, owner: str, ttl: float, n: int) -> list[Lease]:
        return await self._do(self.plans.claim_next_many(owner, ttl, n))  # one statement for all of them

    async def complete_many(self, completions: Sequence[Completion]) -> list[LeaseError | None]:
        return await self._do(self.plans.complete_many(completions))  # one statement for all of them

    async def renew_many(self, renewals: Sequence[Renewal]) -> list[Lease | LeaseError]:
        return await self._do(self.plans.renew_many(renewals))  # one statement for all of them

    async def complete(self, lease: Lease, result: bytes | None) -> None:
        await self._do(self.plans.complete(lease, result))

    async def release(self, lease: Lease) -> None:
        await self._do(self.plans.release(lease))

    async def force_expire(self, job_id: str, actor: str | None = None, token: int | None = None) -> None:
        await self._do(self.plans.force_expire(job_id, actor, token))

    async def record_rejection(self, rejection: Rejection) -> None:
        await self._do(self.plans.record_rejection(rejection))

    # -- reads -------------------------------------------------------------------------------
    async def get(self, job_id: str) -> JobStatus | None:
        return await self._do(self.plans.get(job_id))

    async def jobs(self) -> AsyncIterator[JobStatus]:
        after: str | None = ""
        while after is not None:
            found, after = await self._do(self.plans.jobs_page(after))
            for job in found:
                yield job

    async def rejections(self, since: float | None, limit: int | None) -> list[Rejection]:
        return await self._do(self.plans.rejections(since, limit))

    async def job_rejections(self, job_id: str, since: float | None, limit: int | None) -> list[Rejection]:
        return await self._do(self.plans.job_rejections(job_id, since, limit))

    async def history(self, job_id: str | None, since: float | None, limit: int | None) -> list[HistoryEvent]:
        return await self._do(self.plans.history(job_id, since, limit))

    async def now(self) -> float:
        return await self._do(self.plans.now())

    async def summary(self, now: float, soon: float) -> Summary:
        return await self._do(self.plans.summary(now, soon))

    async def page(self, now: float, states: frozenset[JobState] | None, job: str | None,
                   owner: str | None, order: str, offset: int, limit: int) -> JobPage:
        return await self._do(self.plans.page(now, states, job, owner, order, offset, limit))

    def watch(self, interval: float) -> AsyncIterator[Change]:
        if not self.notify:  # writes do not notify: poll, as the sync backend does then
            return poll(self, interval)
        from tenure.backends.postgres.watch import watch_async

        return watch_async(self, interval)

    async def health(self) -> dict[str, Any]:
        counts = await self._do(self.plans.state_counts())
        return {**health(self.settings, self.schema, self.server_version, counts), "io": self.io}

    async def close(self) -> None:
        pool, self._pool = self._pool, None  # later calls: BackendUnavailable("... not open (or closed)")
        if pool is not None:
            await pool.close()


async def _idle_and_alive(conn: psycopg.AsyncConnection[Any]) -> None:
    """The pool's check before handing a connection out (see ``idle_problem``)."""
    problem = idle_problem(conn)
    if problem is not None:
        await conn.close()
        raise psycopg.OperationalError(problem)
