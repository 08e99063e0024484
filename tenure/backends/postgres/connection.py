"""Connections to PostgreSQL: the URL's settings, the pool, timeouts and the one error mapping.

``postgresql://[user[:password]@]host[:port][,host[:port]...]/dbname[?schema=NAME&...]``:
several hosts are handed to libpq, which tries them in order (``target_session_attrs``
defaults to ``read-write`` then, so a standby is passed over).

psycopg has no client-side statement timeout, and a stopped server or a black-holed network
never answers (the kernel still acknowledges the bytes), so a ``Watchdog`` shuts down the
socket of a statement that outlives ``timeout`` (plus a second, after the server's own
``statement_timeout`` had its chance). A write whose connection broke after it was sent may
have been applied: it raises ``OutcomeUnknown``, never a refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import psycopg_pool
from psycopg.conninfo import make_conninfo

from tenure.core.errors import AuthenticationFailed, BackendUnavailable, OutcomeUnknown

log = logging.getLogger("tenure.postgres")

_AUTH_STATES = ("28000", "28P01")  # invalid authorization, invalid password
# The statement failed and was rolled back by the server: certainly not applied.
_RETRYABLE = ("40001", "40P01")  # serialization failure, deadlock


@dataclass(frozen=True)
class Settings:
    hosts: tuple[tuple[str, int | None], ...]
    dbname: str
    user: str | None
    password: str | None
    timeout: float
    pool_size: int
    libpq: dict[str, str]  # sslmode, target_session_attrs ... passed through

    def conninfo(self, synchronous_commit: str | None = None) -> str:
        params: dict[str, Any] = dict(self.libpq)
        params.update(host=",".join(h for h, _ in self.hosts),
                      port=",".join(str(p or 5432) for _, p in self.hosts),
                      dbname=self.dbname, connect_timeout=max(2, round(self.timeout)))
        params.setdefault("application_name", "tenure")
        if len(self.hosts) > 1:
            params.setdefault("target_session_attrs", "read-write")
        if self.user:
            params["user"] = self.user
        if self.password is not None:
            params["password"] = self.password
        # Our statements rely on READ COMMITTED's re-check of a row they wait for; the server
        # cancels a statement at the timeout, the watchdog cuts the connection a second later.
        # enable_bitmapscan=off: a queue that grew faster than autoanalyze looks (at most once a
        # minute) has statistics that say "a few rows", and the planner then reads every pending
        # row by bitmap and sorts them for claim_next's LIMIT 1 (40 ms at 100,000 jobs instead
        # of 3). Without bitmap scans the partial index, read in order, is its only good path;
        # our other statements are primary-key lookups or whole-table scans.
        options = [r"-c default_transaction_isolation=read\ committed",
                   f"-c statement_timeout={int(self.timeout * 1000)}", "-c enable_bitmapscan=off"]
        if synchronous_commit:
            options.append(f"-c synchronous_commit={synchronous_commit}")
        params["options"] = " ".join(options)
        return make_conninfo(**params)

    def where(self) -> str:
        hosts = ",".join(f"{h}:{p or 5432}" for h, p in self.hosts)
        return f"PostgreSQL at {hosts}/{self.dbname}"

    def scrub(self, text: str) -> str:
        """Never a password in an error or a log line, whatever the driver put in its message."""
        return text.replace(self.password, "***") if self.password else text


def connection_error(settings: Settings, exc: Exception, *, sent_write: bool = False) -> BackendUnavailable:
    """The one place where psycopg's errors become tenure's; the caller raises it ``from exc``."""
    where = settings.where()
    detail = settings.scrub(str(exc).strip()) or type(exc).__name__
    state = getattr(exc, "sqlstate", None)
    if state in _AUTH_STATES or "password authentication failed" in detail:
        return AuthenticationFailed(f"{where} refused the credentials: {detail}")
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return BackendUnavailable(f"{where}: no connection within {settings.timeout:g}s: {detail}")
    # No SQLSTATE, a connection exception (08) or the server going away (57P0x): the answer
    # was lost. A cancelled statement (57014, statement_timeout) was rolled back: not applied.
    broken = isinstance(exc, psycopg.OperationalError) and (
        state is None or state.startswith("08") or state.startswith("57P"))
    if sent_write and broken:
        return OutcomeUnknown(f"{where}: the connection broke after the request was sent, so it may or "
                              f"may not have been applied: {detail}")
    return BackendUnavailable(f"{where}: {detail}")


def retryable(exc: Exception) -> bool:
    return getattr(exc, "sqlstate", None) in _RETRYABLE


class Watchdog:
    """Shuts down the socket of any statement still running after ``timeout`` seconds."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._due: dict[int, tuple[float, int]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def guard(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        key = next(self._ids)
        with self._lock:
            self._due[key] = (time.monotonic() + self.timeout, conn.pgconn.socket)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tenure-pg-watchdog", daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:  # after this the connection may be closed and its descriptor reused
                del self._due[key]

    def _run(self) -> None:
        while not self._stop.wait(min(0.1, self.timeout / 4)):
            now = time.monotonic()
            with self._lock:
                for deadline, fd in self._due.values():
                    if deadline <= now:
                        _shut(fd)

    def close(self) -> None:
        self._stop.set()


def _shut(fd: int) -> None:
    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=os.dup(fd))
        try:
            sock.shutdown(socket.SHUT_RDWR)  # the driver's next read sees the end of the stream
        finally:
            sock.close()


def idle_problem(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> str | None:
    """What is wrong with a pooled connection about to be handed out, or None: an idle
    connection has nothing to read.

    A server that restarted or ended the session has closed the socket (or sent a notice of
    termination); that connection is dropped by the pool's check, before a write is sent on it
    and its outcome would be unknown. One poll() call, no round trip.
    """
    if conn.closed or conn.pgconn.status != psycopg.pq.ConnStatus.OK:
        return "connection closed"
    poller = select.poll()
    poller.register(conn.pgconn.socket, select.POLLIN)
    return "the server ended this idle connection" if poller.poll(0) else None


def idle_and_alive(conn: psycopg.Connection[Any]) -> None:
    """The sync pool's check (see ``idle_problem``)."""
    problem = idle_problem(conn)
    if problem is not None:
        conn.close()  # closed, the pool discards it (a connection that only fails the check goes back)
        raise psycopg.OperationalError(problem)


def pool_only_waited(exc: Exception, sent_write: bool) -> bool:
    """Whether the pool's error says only that it waited for a connection: one direct attempt
    to connect then tells the operator why."""
    return not sent_write and isinstance(exc, psycopg.OperationalError) and "couldn't get a connection" in str(exc)


@contextlib.contextmanager
def loop_watchdog(conn: psycopg.AsyncConnection[Any], timeout: float) -> Iterator[None]:
    """``Watchdog`` for the event loop: a timer of the loop, not a thread, shuts the socket of
    a statement still running after ``timeout`` seconds."""
    timer = asyncio.get_running_loop().call_later(timeout, _shut, conn.pgconn.socket)
    try:
        yield
    finally:
        timer.cancel()  # before the connection goes back to the pool and its descriptor is reused


def open_pool(settings: Settings, conninfo: str) -> psycopg_pool.ConnectionPool[Any]:
    pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
        conninfo, min_size=1, max_size=settings.pool_size, timeout=settings.timeout,
        kwargs={"autocommit": True}, check=idle_and_alive, open=False, name="tenure",
        # The pool retries a failed connection with a backoff that doubles from 1 s; giving up
        # after ``timeout`` lets the next request try at once, so a restarted server is found
        # within a timeout instead of after the backoff's 8 or 16 s.
        reconnect_timeout=settings.timeout)
    pool.open(wait=False)
    return pool
