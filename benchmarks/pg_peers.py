"""PostgreSQL's floor and tooz's PostgreSQL lock, measured on the same server as tenure.

Every function takes ``clients`` threads, each with its own connection (tenure's store
shares one pool of that many), and returns the seconds that ``n`` cycles took in all.
"""

from __future__ import annotations

import importlib.util
import threading
import time
import uuid
from collections.abc import Callable

import psycopg

from tenure.backends.postgres.schema import migrate


def _parallel(n: int, clients: int, work: Callable[[int, int], Callable[[], None]]) -> float:
    """``work(client, count)`` prepares a client and returns its loop; only the loops are timed."""
    share = max(1, n // clients)
    loops = [work(c, share) for c in range(clients)]
    threads = [threading.Thread(target=loop) for loop in loops]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def floor(conninfo: str, n: int, clients: int = 1) -> float:
    """Two bare statements per cycle with the writes of a tenure claim and completion.

    The tables are tenure's own (made by its migrations: the same indexes to maintain).
    Claim: insert the job row and its history row; completion: update the job row and add a
    history row. Each is one autocommit statement, as tenure's are, judging nothing.
    """
    schema = f"floor_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        migrate(conn, schema, schema)
    claim = (f"WITH j AS (INSERT INTO {schema}.jobs (job_id, state, owner, token, lease_until, ttl, submitted_at,"
             " claimed_at, runs, queued) VALUES (%s, 'leased', 'bench', 1, %s, 30, %s, %s, 1, 0)"
             f" RETURNING job_id, token, lease_until) INSERT INTO {schema}.events (job_id, op, owner, token, at,"
             " expires_at) SELECT job_id, 'claim', 'bench', token, %s, lease_until FROM j")
    complete = (f"WITH j AS (UPDATE {schema}.jobs SET state = 'completed', lease_until = NULL, completed_at = %s"
                f" WHERE job_id = %s RETURNING job_id, token) INSERT INTO {schema}.events (job_id, op, owner,"
                " token, at) SELECT job_id, 'complete', 'bench', token, %s FROM j")
    connections: list[psycopg.Connection[tuple[object, ...]]] = []

    def work(client: int, count: int) -> Callable[[], None]:
        conn = psycopg.connect(conninfo, autocommit=True)
        connections.append(conn)
        prefix = f"c{client}-{uuid.uuid4().hex[:6]}"

        def loop() -> None:
            for i in range(count):
                now = time.time()
                conn.execute(claim, (f"{prefix}-{i}", now + 30, now, now, now))
                conn.execute(complete, (now, f"{prefix}-{i}", now))
        return loop

    try:
        return _parallel(n, clients, work)
    finally:
        for c in connections:
            c.close()
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def tooz_installed() -> bool:
    """Whether tooz's PostgreSQL lock can run here (the ``bench`` dependency group: tooz and
    its driver, psycopg2)."""
    return all(importlib.util.find_spec(name) is not None for name in ("tooz", "psycopg2"))


def tooz_lock(url: str, n: int, clients: int = 1) -> float:
    """tooz's PostgreSQL lock (advisory locks): acquire and release, a fresh lock name per cycle."""
    from tooz import coordination

    coordinators: list[object] = []

    def work(client: int, count: int) -> Callable[[], None]:
        coordinator = coordination.get_coordinator(url, f"bench-{client}".encode())
        coordinator.start()
        coordinators.append(coordinator)
        prefix = f"c{client}-{uuid.uuid4().hex[:6]}"

        def loop() -> None:
            for i in range(count):
                lock = coordinator.get_lock(f"{prefix}-{i}".encode())
                assert lock.acquire(blocking=False), "an uncontended lock must be granted"
                lock.release()
        return loop

    try:
        return _parallel(n, clients, work)
    finally:
        for c in coordinators:
            c.stop()  # type: ignore[attr-defined]
