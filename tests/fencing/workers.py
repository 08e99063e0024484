"""Code that runs in spawned worker processes; importable by name, so not in a test module."""

from __future__ import annotations

import random
from typing import Any

import tenure
from tenure.fencing import SQLFence
from tests.fencing.databases import Database

RESOURCE = "ledger"
APPEND = "INSERT INTO effects (seq, token, worker) SELECT COALESCE(MAX(seq), 0) + 1, ?, ? FROM effects"


def race(db: Database, worker: int, iterations: int, start: Any, results: Any) -> None:
    """Write with tokens that mostly rise but jitter, so writers overtake one another."""
    rng = random.Random(worker)
    admitted = rejected = 0
    conn = db.connect()
    try:
        fence = SQLFence(conn, create=False)
        start.wait(timeout=60)  # all processes begin together, so their writes interleave
        for step in range(iterations):
            token = step + 1 + rng.randint(0, 4)
            try:
                with fence.fenced(RESOURCE, token, job_id="job", owner=f"w{worker}") as cur:
                    # seq is taken under the fence's row lock: it is the order of commits.
                    cur.execute(db.q(APPEND), (token, worker))
                admitted += 1
            except tenure.StaleToken:
                rejected += 1
        results.put((worker, admitted, rejected, None))
    except BaseException as exc:  # report it: a worker that dies silently would hide a failure
        results.put((worker, admitted, rejected, repr(exc)))
    finally:
        conn.close()
