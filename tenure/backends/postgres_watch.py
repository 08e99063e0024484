"""``watch()`` on LISTEN/NOTIFY: every write statement notifies the store's channel.

The payload names what changed ('j' and a job id, or 'r' for a new rejection), so a change
costs one read of that job, not a scan. A lease that runs out changes nothing in the table:
leases shown as live are re-rated against the server's clock once their expiry has passed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import threading
import time
from collections.abc import Iterator
from typing import Protocol

import psycopg
from psycopg import sql

from tenure.backends.postgres_connection import Settings, connection_error
from tenure.core.records import Change, JobState, JobStatus, Rejection


class Watched(Protocol):
    """What the watch uses of the backend (``PostgresBackend``), which imports this module."""

    settings: Settings
    channel: str
    statements: dict[str, str]

    def jobs(self) -> Iterator[JobStatus]: ...

    def get(self, job_id: str) -> JobStatus | None: ...

    def rejections_with_ids(self, since: float | None, limit: int | None,
                            after: int = 0) -> list[tuple[Rejection, int]]: ...

    def now(self) -> float: ...


def watch(backend: Watched, stop: threading.Event, interval: float) -> Iterator[Change]:
    try:
        conn = psycopg.connect(backend.settings.conninfo(), autocommit=True)
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(backend.channel)))
        conn.execute(backend.statements["WATCH_START"])  # from now on every write notifies
    except psycopg.Error as exc:
        raise connection_error(backend.settings, exc) from exc
    with contextlib.closing(conn):
        try:
            yield from _changes(backend, conn, stop, interval)
        finally:
            with contextlib.suppress(psycopg.Error):
                conn.execute(backend.statements["WATCH_STOP"])


def _changes(backend: Watched, conn: psycopg.Connection[tuple[object, ...]], stop: threading.Event,
             interval: float) -> Iterator[Change]:
    shown: dict[str, JobStatus] = {}
    expiries: list[tuple[float, str]] = []  # live leases shown, by expiry; stale entries are skipped

    def show(job: JobStatus) -> Iterator[Change]:
        if shown.get(job.job_id) != job:
            shown[job.job_id] = job
            if job.state is JobState.LEASED and job.expires_at is not None:
                heapq.heappush(expiries, (job.expires_at, job.job_id))
            yield Change(job=job)

    # Listening and registered before the first read. A write that began before we registered
    # may not notify; it ends within the statement timeout, so one more full read after that
    # catches it.
    for job in backend.jobs():
        yield from show(job)
    relist_at: float | None = time.monotonic() + backend.settings.timeout + 1.0
    last = 0  # id of the newest rejection shown
    for rejection, number in backend.rejections_with_ids(None, None):
        last = number
        yield Change(rejection=rejection)
    while not stop.is_set():
        try:
            notes = list(conn.notifies(timeout=interval, stop_after=1))
            if notes:
                notes += conn.notifies(timeout=0.0)  # and whatever came with it
        except psycopg.Error as exc:
            raise connection_error(backend.settings, exc) from exc
        jobs: dict[str, None] = {}  # in order, once each
        rejected = False
        for note in notes:
            if note.payload == "r":
                rejected = True
            else:
                jobs[note.payload[1:]] = None
        for job_id in jobs:
            current = backend.get(job_id)
            if current is None:
                if shown.pop(job_id, None) is not None:
                    yield Change(removed=job_id)
            else:
                yield from show(current)
        if rejected:
            for rejection, number in backend.rejections_with_ids(None, None, after=last):
                last = number
                yield Change(rejection=rejection)
        if relist_at is not None and time.monotonic() >= relist_at:
            relist_at = None
            for job in backend.jobs():
                yield from show(job)
        if expiries and not stop.is_set():
            now = backend.now()
            while expiries and expiries[0][0] <= now:
                until, job_id = heapq.heappop(expiries)
                seen = shown.get(job_id)
                if seen is not None and seen.state is JobState.LEASED and seen.expires_at == until:
                    yield from show(dataclasses.replace(seen, state=JobState.EXPIRED))
