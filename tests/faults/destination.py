"""The fenced destination of the workload: an SQLite table of effects behind a token fence.

It uses ``tenure.fencing.SQLFence`` (per resource and job, highest token wins) when the
fencing module is present; until then a fence of the same semantics defined here. Each
effect row carries the id of the operation that wrote it, so an effect whose outcome the
worker never learned (a timeout) is resolved from the table, and the real time at which
the fence admitted it, for the checker's "lease was current" rule.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenure.core.errors import BackendUnavailable, StaleToken

try:
    from tenure.fencing import SQLFence
except ImportError:  # the fencing branch has not been merged yet
    SQLFence = None

RESOURCE = "ledger"
_EFFECTS = """CREATE TABLE IF NOT EXISTS effects (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, token INTEGER NOT NULL,
    process TEXT NOT NULL, op_id INTEGER NOT NULL, admitted_at REAL NOT NULL)"""
_LOCAL_FENCE = (
    "CREATE TABLE IF NOT EXISTS local_fence (job TEXT PRIMARY KEY, token INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS local_fence_rejections (job TEXT, owner TEXT, token INTEGER, highest INTEGER)",
)


@dataclass(frozen=True)
class Effect:
    seq: int
    job: str
    token: int
    process: str
    op_id: int
    admitted_at: float


@dataclass(frozen=True)
class DestRejection:
    job: str
    owner: str | None
    token: int
    highest: int


class _LocalFence:
    """The same rule as tenure.fencing: admit a token not below the highest admitted."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        with conn:
            for ddl in _LOCAL_FENCE:
                conn.execute(ddl)

    @contextlib.contextmanager
    def fenced(self, resource: str, token: int, *, job_id: str, owner: str) -> Iterator[sqlite3.Cursor]:
        try:
            row = self.conn.execute(
                "INSERT INTO local_fence VALUES (?, ?) ON CONFLICT (job) DO UPDATE SET token = excluded.token"
                " WHERE local_fence.token <= excluded.token RETURNING token", (job_id, token)).fetchone()
            if row is None:
                self.conn.rollback()
                (highest,) = self.conn.execute("SELECT token FROM local_fence WHERE job = ?", (job_id,)).fetchone()
                with self.conn:
                    self.conn.execute("INSERT INTO local_fence_rejections VALUES (?, ?, ?, ?)",
                                      (job_id, owner, token, highest))
                raise StaleToken(resource, token, highest)
            cur = self.conn.cursor()
            yield cur
            self.conn.commit()
        except sqlite3.Error as exc:
            self.conn.rollback()
            raise BackendUnavailable(f"destination: {exc}") from exc
        except BaseException:
            self.conn.rollback()
            raise

    def rejections(self) -> list[DestRejection]:
        rows = self.conn.execute("SELECT job, owner, token, highest FROM local_fence_rejections").fetchall()
        return [DestRejection(*r) for r in rows]


class Destination:
    """One process's connection to the destination database."""

    def __init__(self, path: Path, timeout: float = 2.0) -> None:
        self.conn = sqlite3.connect(str(path), timeout=timeout)
        self.conn.execute("PRAGMA journal_mode=WAL")
        with self.conn:
            self.conn.execute(_EFFECTS)
        self.fence: Any = SQLFence(self.conn) if SQLFence is not None else _LocalFence(self.conn)

    def write(self, job: str, token: int, owner: str, process: str, op_id: int, now: Any,
              still_held: Any) -> None:
        """One fenced effect; ``still_held()`` is asked after the fence admitted the token.

        The admission time is read before that last check, so an effect that lands was
        admitted while its worker still trusted its lease.
        """
        with self.fence.fenced(RESOURCE, token, job_id=job, owner=owner) as cur:
            admitted_at = now()
            still_held()
            cur.execute("INSERT INTO effects (job, token, process, op_id, admitted_at) VALUES (?,?,?,?,?)",
                        (job, token, process, op_id, admitted_at))

    def effects(self) -> list[Effect]:
        rows = self.conn.execute("SELECT seq, job, token, process, op_id, admitted_at FROM effects ORDER BY seq")
        return [Effect(*r) for r in rows.fetchall()]

    def rejections(self) -> list[DestRejection]:
        if SQLFence is None:
            return list(self.fence.rejections())
        return [DestRejection(r.job_id, r.owner, r.token, r.highest) for r in self.fence.rejections(limit=None)]

    def close(self) -> None:
        self.conn.close()
