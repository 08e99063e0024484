"""Destination databases for the fencing tests: a real SQLite file or a real PostgreSQL schema.

A ``Database`` is picklable (a kind and a connection string), so spawned worker processes
can open their own connections to the same place.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from typing import Any

# TENURE_TEST_POSTGRES points the tests at another server (a libpq connection string).
PG_CONNINFO = os.environ.get("TENURE_TEST_POSTGRES", "host=127.0.0.1 port=5432 dbname=test connect_timeout=5")


@dataclass(frozen=True)
class Database:
    kind: str  # "sqlite" or "postgres"
    where: str  # a file path, or a PostgreSQL schema

    def connect(self, autocommit: bool = False) -> Any:
        if self.kind == "sqlite":
            # A generous busy timeout: several processes take turns at one file's write lock.
            return sqlite3.connect(self.where, timeout=30, isolation_level=None if autocommit else "")
        import psycopg  # the postgres extra; only PostgreSQL tests need it

        return psycopg.connect(PG_CONNINFO, autocommit=autocommit, options=f"-c search_path={self.where}")

    def q(self, sql: str) -> str:
        """The test's own SQL, written with ``?``, in the driver's placeholder style."""
        return sql if self.kind == "sqlite" else sql.replace("?", "%s")

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        conn = self.connect()
        try:
            return [tuple(r) for r in conn.cursor().execute(self.q(sql), params).fetchall()]
        finally:
            conn.close()

    def execute(self, sql: str, *params: Any) -> None:
        conn = self.connect()
        try:
            conn.cursor().execute(self.q(sql), params)
            conn.commit()
        finally:
            conn.close()
