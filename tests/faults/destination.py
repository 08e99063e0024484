"""The fenced destination of the workload: an SQLite table of effects behind a token fence.

It is ``tenure.fencing.SQLFence`` (per resource and job, the highest token wins), behind
a ``Proof``: every write carries an HMAC signature made with the run's secret, which the
workers know and the forged-fence fault does not; an unproven token is refused
(``ForgedToken``) and reported to ``audit`` before the fence is asked.

Each effect row carries the id of the operation that wrote it, so an effect whose outcome
the worker never learned (a timeout) is resolved from the table, and the real time at
which the fence admitted it, for the checker's "lease was current" rule.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenure.core.errors import ForgedToken
from tenure.fencing import FenceRejection, Proof, RejectHook, SQLFence, claims, sign

SECRET = "the fault suite's fencing secret"

RESOURCE = "ledger"
_EFFECTS = """CREATE TABLE IF NOT EXISTS effects (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, token INTEGER NOT NULL,
    process TEXT NOT NULL, op_id INTEGER NOT NULL, admitted_at REAL NOT NULL)"""


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


class Destination:
    """One process's connection to the destination database."""

    def __init__(self, path: Path, timeout: float = 2.0, audit: RejectHook | None = None) -> None:
        self.conn = sqlite3.connect(str(path), timeout=timeout)
        self.conn.execute("PRAGMA journal_mode=WAL")
        with self.conn:
            self.conn.execute(_EFFECTS)
        self.fence = SQLFence(self.conn)
        self.proof = Proof(secret=SECRET, unbound=True)  # not HTTP: no request to bind a signature to
        self.audit = audit

    @staticmethod
    def signature(job: str, owner: str, token: int) -> str:
        """What a worker, which knows the run's secret, sends with each write."""
        return sign(SECRET, job, owner, token, unbound=True)

    def write(self, job: str, token: int, owner: str, process: str, op_id: int, now: Any,
              still_held: Any, signature: str | None) -> None:
        """One proven, fenced effect; ``still_held()`` is asked after the fence admitted the token.

        The admission time is read before that last check, so an effect that lands was
        admitted while its worker still trusted its lease.
        """
        claim = claims.claim(RESOURCE, token, job_id=job, owner=owner)
        try:
            self.proof.check(claim, signature)
        except ForgedToken as exc:
            claims.report(self.audit, FenceRejection(RESOURCE, job, owner, token, 0, time.time(),
                                                     reason=f"unproven token: {exc.why}"))
            raise
        with self.fence.fenced(RESOURCE, token, job_id=job, owner=owner) as cur:
            admitted_at = now()
            still_held()
            cur.execute("INSERT INTO effects (job, token, process, op_id, admitted_at) VALUES (?,?,?,?,?)",
                        (job, token, process, op_id, admitted_at))

    def effects(self) -> list[Effect]:
        rows = self.conn.execute("SELECT seq, job, token, process, op_id, admitted_at FROM effects ORDER BY seq")
        return [Effect(*r) for r in rows.fetchall()]

    def rejections(self) -> list[DestRejection]:
        return [DestRejection(r.job_id, r.owner, r.token, r.highest) for r in self.fence.rejections(limit=None)]

    def close(self) -> None:
        self.conn.close()
