"""Many processes race to write one fenced resource with mixed tokens."""

from __future__ import annotations

import multiprocessing

from tenure.fencing import SQLFence
from tests.fencing import workers
from tests.fencing.databases import Database

PROCESSES = 6
ITERATIONS = 40


def test_no_lower_token_lands_after_a_higher_one(db: Database) -> None:
    db.execute("CREATE TABLE effects (seq INTEGER PRIMARY KEY, token BIGINT NOT NULL, worker INTEGER)")
    if db.kind == "sqlite":
        db.rows("PRAGMA journal_mode=WAL")  # readers do not block the writer
    conn = db.connect()
    fence = SQLFence(conn)  # tables created once, before the race
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(PROCESSES), ctx.Queue()
    procs = [ctx.Process(target=workers.race, args=(db, w, ITERATIONS, start, results))
             for w in range(PROCESSES)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert [o[3] for o in outcomes] == [None] * PROCESSES, outcomes

    admitted = sum(o[1] for o in outcomes)
    rejected = sum(o[2] for o in outcomes)
    assert admitted + rejected == PROCESSES * ITERATIONS
    assert admitted > 0 and rejected > 0  # the race really mixed tokens
    tokens = [t for (t,) in db.rows("SELECT token FROM effects ORDER BY seq")]
    assert len(tokens) == admitted  # every admitted effect landed, no rejected one did
    assert tokens == sorted(tokens), "an effect with a lower token landed after a higher one"
    assert fence.highest(workers.RESOURCE, job_id="job") == tokens[-1]
    assert len(fence.rejections(limit=None)) == rejected
    conn.close()
