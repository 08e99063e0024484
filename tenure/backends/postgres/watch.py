"""``watch()`` on LISTEN/NOTIFY: every write statement notifies the store's channel.

The payload names what changed ('j' and a job id, or 'r' for a new rejection), so a change
costs one read of that job, not a scan. A lease that runs out changes nothing in the table:
leases shown as live are re-rated against the server's clock once their expiry has passed.

What the watch reads and decides is one sans-I/O generator (``_follow``), driven by the sync
backend on a psycopg connection and by the asyncio backend on an async one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import threading
import time
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from psycopg import sql

from tenure.backends.postgres.connection import Settings, connection_error
from tenure.backends.postgres.ops import Effect, Plans, Rows
from tenure.core.records import Change, JobState, JobStatus
from tenure.core.transitions import state_at


class Watched(Protocol):
    """What the watch needs of the sync PostgreSQL backend."""

    settings: Settings
    channel: str
    plans: Plans

    def answer(self, effect: Effect) -> Rows: ...


class AsyncWatched(Protocol):
    """What the watch needs of the asyncio PostgreSQL backend."""

    settings: Settings
    channel: str
    plans: Plans

    async def answer(self, effect: Effect) -> Rows: ...


@dataclass(frozen=True)
class Listen:
    """Wait up to ``timeout`` seconds for notifications; sent back their payloads."""

    timeout: float


Step = Effect | Listen | Change
# Sent a query's rows, a Listen's payloads (list[str]) or nothing after a Change: one send type
# per generator cannot follow which step it answers (io_drivers), so it is Any.
Follow = Generator[Step, Any, None]


def watch(backend: Watched, stop: threading.Event, interval: float) -> Iterator[Change]:
    try:
        conn = psycopg.connect(backend.settings.conninfo(), autocommit=True)
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(backend.channel)))
        conn.execute(backend.plans.statements["WATCH_START"])  # from now on every write notifies
    except psycopg.Error as exc:
        raise connection_error(backend.settings, exc) from exc
    with contextlib.closing(conn):
        steps = _follow(backend.plans, backend.settings.timeout, interval)
        try:
            step = next(steps)
            while True:
                if isinstance(step, Change):
                    yield step
                    step = next(steps)
                elif isinstance(step, Listen):
                    if stop.is_set():
                        return
                    step = steps.send(_notes(backend.settings, conn, step.timeout))
                else:
                    try:
                        rows = backend.answer(step)
                    except Exception as exc:  # a statement that lost a race runs again (``ops``)
                        step = steps.throw(exc)
                    else:
                        step = steps.send(rows)
        finally:
            steps.close()
            with contextlib.suppress(psycopg.Error):
                conn.execute(backend.plans.statements["WATCH_STOP"])


def _notes(settings: Settings, conn: psycopg.Connection[Any], timeout: float) -> list[str]:
    try:
        notes = list(conn.notifies(timeout=timeout, stop_after=1))
        if notes:
            notes += conn.notifies(timeout=0.0)  # and whatever came with it
    except psycopg.Error as exc:
        raise connection_error(settings, exc) from exc
    return [note.payload for note in notes]


async def watch_async(backend: AsyncWatched, interval: float) -> AsyncIterator[Change]:
    """The same watch on the event loop; it ends when the ``async for`` is left."""
    try:
        conn = await psycopg.AsyncConnection.connect(backend.settings.conninfo(), autocommit=True)
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(backend.channel)))
        await conn.execute(backend.plans.statements["WATCH_START"])
    except psycopg.Error as exc:
        raise connection_error(backend.settings, exc) from exc
    steps = _follow(backend.plans, backend.settings.timeout, interval)
    try:
        step = next(steps)
        while True:
            if isinstance(step, Change):
                yield step
                step = next(steps)
            elif isinstance(step, Listen):
                step = steps.send(await _notes_async(backend.settings, conn, step.timeout))
            else:
                try:
                    rows = await backend.answer(step)
                except Exception as exc:  # a statement that lost a race runs again (``ops``)
                    step = steps.throw(exc)
                else:
                    step = steps.send(rows)
    finally:
        steps.close()
        with contextlib.suppress(psycopg.Error):
            await conn.execute(backend.plans.statements["WATCH_STOP"])
        await conn.close()


async def _notes_async(settings: Settings, conn: psycopg.AsyncConnection[Any], timeout: float) -> list[str]:
    try:
        notes = [note async for note in conn.notifies(timeout=timeout, stop_after=1)]
        if notes:
            notes += [note async for note in conn.notifies(timeout=0.0)]
    except psycopg.Error as exc:
        raise connection_error(settings, exc) from exc
    return [note.payload for note in notes]


def _follow(plans: Plans, timeout: float, interval: float) -> Follow:
    """Every job, then every change, as ``Change`` steps; ``Effect`` (a query, a pause) and
    ``Listen`` steps ask the driver for rows and notification payloads. Runs until the driver
    stops asking."""
    shown: dict[str, JobStatus] = {}
    # Jobs shown whose state changes with time alone, by when: live leases by their expiry,
    # scheduled jobs by their claimable_at. Stale entries are skipped.
    expiries: list[tuple[float, str]] = []

    def show(job: JobStatus) -> Iterator[Change]:
        if shown.get(job.job_id) != job:
            shown[job.job_id] = job
            at = _changes_at(job)
            if at is not None:
                heapq.heappush(expiries, (at, job.job_id))
            yield Change(job=job)

    def every_job() -> Generator[Step, Rows, None]:
        after: str | None = ""
        while after is not None:
            found, after = yield from plans.jobs_page(after)
            for job in found:
                yield from show(job)

    # Listening and registered before the first read. A write that began before we registered
    # may not notify; it ends within the statement timeout, so one more full read after that
    # catches it.
    yield from every_job()
    relist_at: float | None = time.monotonic() + timeout + 1.0
    last = 0  # id of the newest rejection shown
    for rejection, number in (yield from plans.rejections_with_ids(None, None)):
        last = number
        yield Change(rejection=rejection)
    while True:
        payloads: list[str] = yield Listen(interval)
        jobs: dict[str, None] = {}  # in order, once each
        rejected = False
        for payload in payloads:
            if payload == "r":
                rejected = True
            else:
                jobs[payload[1:]] = None
        for job_id in jobs:
            current = yield from plans.get(job_id)
            if current is None:
                if shown.pop(job_id, None) is not None:
                    yield Change(removed=job_id)
            else:
                yield from show(current)
        if rejected:
            for rejection, number in (yield from plans.rejections_with_ids(None, None, after=last)):
                last = number
                yield Change(rejection=rejection)
        if relist_at is not None and time.monotonic() >= relist_at:
            relist_at = None
            yield from every_job()
        if expiries:
            now = yield from plans.now()
            while expiries and expiries[0][0] <= now:
                until, job_id = heapq.heappop(expiries)
                seen = shown.get(job_id)
                if seen is not None and _changes_at(seen) == until:
                    yield from show(_judged(seen, until))


def _changes_at(job: JobStatus) -> float | None:
    """When a status shown changes with no write: a live lease's end, a scheduled job's time."""
    if job.state is JobState.LEASED:
        return job.expires_at
    return job.claimable_at if job.state is JobState.SCHEDULED else None


def _judged(job: JobStatus, at: float) -> JobStatus:
    """``job`` as a read at ``at`` shows it (transitions.status): expired, or parked if that
    was its last attempt; pending once scheduled."""
    state = state_at(job, at)
    if state is JobState.PENDING:
        return dataclasses.replace(job, state=state, claimable_at=None)
    return dataclasses.replace(job, state=state, parked_at=job.expires_at if state is JobState.PARKED else None)
