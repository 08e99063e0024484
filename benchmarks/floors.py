"""The floor: the same writes as a tenure claim and completion, made directly on the store.

Each function runs ``n`` claim-like + complete-like pairs of bare round trips and returns
the seconds they took, so ``tenure cycle / floor`` shows what the protocol costs on top.
"""

from __future__ import annotations

import json
import sqlite3
import time


def sqlite_floor(path: str, n: int) -> float:
    """Two transactions per cycle, each writing the job row and a history row, as tenure does."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS jobs (job_id TEXT PRIMARY KEY, state TEXT, owner TEXT, "
               "token INTEGER, lease_until REAL, data TEXT)")
    db.execute("CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT, "
               "op TEXT, token INTEGER, at REAL)")
    start = time.perf_counter()
    for i in range(n):
        job = f"floor-{i}"
        for state, op in (("leased", "claim"), ("completed", "complete")):
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT OR REPLACE INTO jobs VALUES (?, ?, 'w', 1, ?, ?)",
                       (job, state, time.time() + 10, json.dumps({"ttl": 10})))
            db.execute("INSERT INTO events (job_id, op, token, at) VALUES (?, ?, 1, ?)", (job, op, time.time()))
            db.execute("COMMIT")
    elapsed = time.perf_counter() - start
    db.close()
    return elapsed
