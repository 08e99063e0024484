"""Idempotency keys: an effect recorded with the effect itself, so a retry applies it once.

A worker can crash after its effect committed and before it completed the job; the next
holder then runs the job again. If the effect and its key ``(job, effect id)`` commit in
one transaction, the retry finds the key and skips the effect, whatever its token.
The token that applied the effect is kept beside the key for operators.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tenure.core import validation
from tenure.core.errors import BackendUnavailable, InvalidArgument
from tenure.fencing import claims
from tenure.fencing.dbapi import Connection, Driver, identifier, transaction

DEFAULT_PREFIX = "tenure_effects"

_DDL = """CREATE TABLE IF NOT EXISTS {t} (
    job_id TEXT NOT NULL, effect_id TEXT NOT NULL, token BIGINT NOT NULL, owner TEXT,
    applied_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (job_id, effect_id))"""
_RECORD = """INSERT INTO {t} (job_id, effect_id, token, owner, applied_at) VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (job_id, effect_id) DO NOTHING RETURNING token"""
_APPLIED = "SELECT token FROM {t} WHERE job_id = ? AND effect_id = ?"


class IdempotencyKeys:
    """Keys of applied effects in the destination's database, over one DB-API connection."""

    def __init__(self, conn: Connection, *, table_prefix: str = DEFAULT_PREFIX, create: bool = True) -> None:
        self.conn = conn
        self.table = identifier("table_prefix", table_prefix)
        self._db = Driver(conn)
        self._record_sql = self._db.statement(_RECORD.format(t=self.table))
        self._applied_sql = self._db.statement(_APPLIED.format(t=self.table))
        if create:
            self.create_tables()

    def create_tables(self) -> None:
        for attempt in (1, 2):
            try:
                with transaction(self.conn, self._db, "creating the effects table"), \
                        self._db.errors("creating the effects table"):
                    self.conn.cursor().execute(_DDL.format(t=self.table))
                return
            except BackendUnavailable:
                if attempt == 2:  # see SQLFence.create_tables: a lost race on PostgreSQL's catalog
                    raise

    def record(self, effect_id: str, token: int | claims.LeaseLike, *, job_id: str | None = None,
               owner: str | None = None) -> bool:
        """Record the key in the current transaction: True the first time, False if applied.

        Produce the effect only on True, in the same transaction, then commit both. A
        concurrent writer of the same key waits for this transaction and then gets False.
        """
        return self._record(_key(effect_id, token, job_id, owner))

    def _record(self, key: tuple[str, str, int, str | None]) -> bool:
        with self._db.errors("recording an idempotency key"):
            row = self._record_sql.run(self.conn.cursor(), *key, time.time()).fetchone()
        return row is not None

    def apply_once(self, effect_id: str, token: int | claims.LeaseLike, effect: Callable[[Any], object],
                   *, job_id: str | None = None, owner: str | None = None) -> bool:
        """Run ``effect(cursor)`` with its key in one transaction, unless the key exists.

        Returns True if the effect was applied now, False if it had been applied before.
        An error inside ``effect`` rolls back both, so a retry applies it.
        """
        key = _key(effect_id, token, job_id, owner)
        if not callable(effect):
            raise InvalidArgument(f"effect must be callable, not {type(effect).__name__}")
        with transaction(self.conn, self._db, "an idempotent effect"):
            if not self._record(key):
                return False
            cursor = self.conn.cursor()
            try:
                effect(cursor)
            finally:
                cursor.close()
        return True

    def applied(self, effect_id: str, *, job_id: str) -> int | None:
        """The token under which the effect was applied, or None if it was not."""
        values = validation.job_id(job_id), validation.effect_id(effect_id)
        was_open = self._db.in_transaction(self.conn)
        with self._db.errors("reading an idempotency key"):
            row = self._applied_sql.run(self.conn.cursor(), *values).fetchone()
            if was_open is False:
                self.conn.rollback()
        return None if row is None else int(row[0])


def _key(effect_id: object, token: object, job_id: object, owner: object) -> tuple[str, str, int, str | None]:
    """(job id, effect id, token, owner), validated, in the order of the table's columns."""
    effect = validation.effect_id(effect_id)
    job, checked, who = claims.holder(token, job_id=job_id, owner=owner)
    return job, effect, checked, who
