"""A fence in the destination's own SQL database: it refuses writes under stale tokens.

The fence table keeps, per key, the highest token admitted. The key is ``(resource, job)``
by default, because tokens of different jobs are not comparable on most stores; a resource
shared across jobs is fenced by one key only where the store's tokens are globally ordered.

``admit`` is one statement, an upsert that only ever raises the token::

    INSERT ... ON CONFLICT (resource, scope) DO UPDATE SET token = excluded.token
        WHERE fence.token <= excluded.token RETURNING token

No row back means a higher token was admitted before: the token is stale. An *equal* token
is admitted, so the holder of one lease may write many times. The upsert locks the fence
row until commit, so ``fenced()`` serialises the writers of one key and a lower token can
never commit its effect after a higher one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from tenure.core import validation
from tenure.core.errors import BackendUnavailable, InvalidArgument, StaleToken
from tenure.core.store import Store
from tenure.fencing import claims
from tenure.fencing.claims import FenceClaim, FenceRejection, RejectHook
from tenure.fencing.dbapi import Connection, Driver, identifier, transaction

DEFAULT_PREFIX = "tenure_fence"

_DDL = (
    """CREATE TABLE IF NOT EXISTS {t} (
        resource TEXT NOT NULL, scope TEXT NOT NULL, token BIGINT NOT NULL,
        admitted_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (resource, scope))""",
    """CREATE TABLE IF NOT EXISTS {t}_rejections (
        resource TEXT NOT NULL, scope TEXT NOT NULL, job_id TEXT NOT NULL, owner TEXT,
        token BIGINT NOT NULL, highest BIGINT NOT NULL, rejected_at DOUBLE PRECISION NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS {t}_rejections_at ON {t}_rejections (rejected_at)",
)
_ADMIT = """INSERT INTO {t} (resource, scope, token, admitted_at) VALUES (?, ?, ?, ?)
    ON CONFLICT (resource, scope) DO UPDATE SET token = excluded.token, admitted_at = excluded.admitted_at
    WHERE {t}.token <= excluded.token RETURNING token"""
_HIGHEST = "SELECT token FROM {t} WHERE resource = ? AND scope = ?"
_REJECT = """INSERT INTO {t}_rejections (resource, scope, job_id, owner, token, highest, rejected_at)
    VALUES (?, ?, ?, ?, ?, ?, ?)"""
_REJECTIONS = """SELECT resource, scope, job_id, owner, token, highest, rejected_at
    FROM {t}_rejections ORDER BY rejected_at DESC LIMIT ?"""


class SQLFence:
    """A fence over one DB-API connection (sqlite3, psycopg 3 ...); not thread-safe, like it.

    Each ``FenceRejection`` is recorded at the destination, then reported: given ``store``,
    to that lease store's audit (``store.rejections()``, ``tenure rejections``, the
    dashboard), through ``claims.forward_to(store)``; given ``on_reject``, to that hook
    instead.
    """

    def __init__(self, conn: Connection, *, table_prefix: str = DEFAULT_PREFIX,
                 on_reject: RejectHook | None = None, store: Store | None = None, create: bool = True) -> None:
        self.on_reject = claims.reporting(on_reject, store)
        self.conn = conn
        self.table = identifier("table_prefix", table_prefix)
        self._db = Driver(conn)
        sql = self._db.statement
        self._admit_sql = sql(_ADMIT.format(t=self.table))
        self._highest_sql = sql(_HIGHEST.format(t=self.table))
        self._reject_sql = sql(_REJECT.format(t=self.table))
        self._rejections_sql = sql(_REJECTIONS.format(t=self.table))
        if create:
            self.create_tables()

    def create_tables(self) -> None:
        """Create the fence and rejection tables if they do not exist (committed at once)."""
        for attempt in (1, 2):
            try:
                with transaction(self.conn, self._db, "creating fence tables"), \
                        self._db.errors("creating fence tables"):
                    cursor = self.conn.cursor()
                    for ddl in _DDL:
                        cursor.execute(ddl.format(t=self.table))
                return
            except BackendUnavailable:
                # PostgreSQL: two sessions creating the same table at once, one loses the
                # race on the catalog even with IF NOT EXISTS; the second try finds it.
                if attempt == 2:
                    raise

    # -- the check -------------------------------------------------------------------------
    def admit(self, resource: str, token: int | claims.LeaseLike, *, job_id: str | None = None,
              owner: str | None = None, shared: bool = False) -> int:
        """Admit ``token`` for ``resource`` in the connection's current transaction; return it.

        Commit that transaction together with your writes (``fenced()`` does both). A stale
        token raises ``StaleToken`` after rolling the transaction back, so nothing written
        in it lands, and recording the rejection here.
        """
        return self._admit(claims.claim(resource, token, job_id=job_id, owner=owner, shared=shared))

    @contextlib.contextmanager
    def fenced(self, resource: str, token: int | claims.LeaseLike, *, job_id: str | None = None,
               owner: str | None = None, shared: bool = False) -> Iterator[Any]:
        """Admit the token, then run the caller's writes in the same transaction.

        Yields a cursor of the connection; commits on a clean exit, rolls back on an error.
        A stale writer's effect never lands; a current writer's lands with its check.
        """
        claim = claims.claim(resource, token, job_id=job_id, owner=owner, shared=shared)
        with transaction(self.conn, self._db, "a fenced write"):
            self._admit(claim)
            cursor = self.conn.cursor()
            try:
                yield cursor
            finally:
                cursor.close()

    def _admit(self, claim: FenceClaim) -> int:
        with self._db.errors("admitting a token"):
            row = self._admit_sql.run(self.conn.cursor(), claim.resource, claim.scope, claim.token,
                                      time.time()).fetchone()
        if row is not None:
            return int(row[0])
        rejection = self._record(claim)
        claims.report(self.on_reject, rejection)
        raise StaleToken(claim.resource, claim.token, rejection.highest)

    def _record(self, claim: FenceClaim) -> FenceRejection:
        """Roll back the stale writer's transaction, then keep the rejection in its own."""
        with self._db.errors("recording a rejection"):
            self.conn.rollback()
            cursor = self.conn.cursor()
            row = self._highest_sql.run(cursor, claim.resource, claim.scope).fetchone()
            rejection = FenceRejection(claim.resource, claim.job_id, claim.owner, claim.token,
                                       0 if row is None else int(row[0]), time.time(), claim.shared)
            self._reject_sql.run(cursor, claim.resource, claim.scope, claim.job_id, claim.owner,
                                 claim.token, rejection.highest, rejection.at)
            self.conn.commit()
        return rejection

    # -- reading -----------------------------------------------------------------------------
    def highest(self, resource: str, *, job_id: str | None = None, shared: bool = False) -> int | None:
        """The highest token admitted for the key, or None if none was."""
        name = validation.resource(resource)
        if shared:
            scope = claims.SHARED_SCOPE
        elif job_id is None:
            raise InvalidArgument("a per-job fence needs job_id= (or shared=True)")
        else:
            scope = validation.job_id(job_id)
        rows = self._read(self._highest_sql, name, scope)
        return int(rows[0][0]) if rows else None

    def rejections(self, limit: int | None = 100) -> list[FenceRejection]:
        """The destination's own rejections, oldest first; the most recent ``limit`` (None: all)."""
        count = validation.limit(limit)
        rows = self._read(self._rejections_sql, claims.MAX_TOKEN if count is None else count)
        return [FenceRejection(r[0], r[2], r[3], int(r[4]), int(r[5]), float(r[6]),
                               r[1] == claims.SHARED_SCOPE) for r in reversed(rows)]

    def _read(self, statement: Any, *values: Any) -> list[Any]:
        # Leave the connection as we found it: psycopg opens a transaction even to read.
        was_open = self._db.in_transaction(self.conn)
        with self._db.errors("reading the fence"):
            rows = list(statement.run(self.conn.cursor(), *values).fetchall())
            if was_open is False:
                self.conn.rollback()
        return rows


def fenced(conn: Connection, resource: str, token: int | claims.LeaseLike, *,
           job_id: str | None = None, owner: str | None = None, shared: bool = False,
           table_prefix: str = DEFAULT_PREFIX, on_reject: RejectHook | None = None,
           store: Store | None = None) -> contextlib.AbstractContextManager[Any]:
    """``SQLFence(conn, ...).fenced(...)`` in one call (it creates the tables if missing)."""
    fence = SQLFence(conn, table_prefix=table_prefix, on_reject=on_reject, store=store)
    return fence.fenced(resource, token, job_id=job_id, owner=owner, shared=shared)
