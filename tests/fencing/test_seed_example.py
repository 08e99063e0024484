"""The seed's example end to end, with the destination's fence doing what the store cannot.

Worker A claims and writes, then pauses past its TTL; B claims and writes with a higher
token; A resumes: the store rejects its completion and the fence rejects its delayed
write. The lease store runs on a ManualClock, so A's lease expires without sleeping.
"""

from __future__ import annotations

import uuid

import pytest

import tenure
from tenure import Op, RejectionKind
from tenure.fencing import SQLFence, forward_to
from tests.fencing.databases import Database

WRITE = ("INSERT INTO documents (id, body, token) VALUES ('report', ?, ?) "
         "ON CONFLICT (id) DO UPDATE SET body = excluded.body, token = excluded.token")


def test_a_delayed_write_from_a_reclaimed_job_is_rejected_at_the_destination(db: Database) -> None:
    clock = tenure.ManualClock()
    store = tenure.connect(f"memory://seed-{uuid.uuid4().hex}", clock=clock)
    db.execute("CREATE TABLE documents (id TEXT PRIMARY KEY, body TEXT NOT NULL, token BIGINT NOT NULL)")
    conn = db.connect()
    fence = SQLFence(conn, on_reject=forward_to(store))

    def write(lease: tenure.Lease, body: str) -> None:
        with fence.fenced("documents/report", lease) as cur:
            cur.execute(db.q(WRITE), (body, lease.token))

    try:
        store.submit("job-42")
        a = store.claim("job-42", owner="worker-a", ttl=10.0)
        write(a, "A, first part")
        clock.advance(10.5)  # A pauses past its TTL (by the store's clock)
        b = store.claim("job-42", owner="worker-b", ttl=10.0)
        assert b.token > a.token
        write(b, "B, whole report")

        with pytest.raises(tenure.StaleToken) as caught:  # A resumes: its delayed write
            write(a, "A, second part")
        assert (caught.value.token, caught.value.highest) == (a.token, b.token)
        with pytest.raises(tenure.StaleLease):
            store.complete(a)
        store.complete(b, "done")

        assert db.rows("SELECT body, token FROM documents") == [("B, whole report", b.token)]
        [at_destination] = fence.rejections()
        assert (at_destination.owner, at_destination.token, at_destination.highest) == (
            "worker-a", a.token, b.token)
        audit = {(r.kind, r.op, r.owner, r.token, r.current_token, r.resource) for r in store.rejections()}
        assert audit == {
            (RejectionKind.DESTINATION, Op.EFFECT, "worker-a", a.token, b.token, "documents/report"),
            (RejectionKind.STORE, Op.COMPLETE, "worker-a", a.token, b.token, None),
        }
    finally:
        conn.close()
        store.close()
