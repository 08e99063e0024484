"""SQLite queues pending jobs by the time they became pending (submitted, or released), like
the other backends, also in a store made before it kept that time (``queued_at``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import tenure

# The jobs table as tenure wrote it before queued_at (schema 1), with two pending jobs.
_OLD = """
CREATE TABLE tenure_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO tenure_meta VALUES ('schema_version', '1');
CREATE TABLE tenure_jobs (
    job_id TEXT PRIMARY KEY, state TEXT NOT NULL, owner TEXT, token INTEGER NOT NULL,
    lease_until REAL, ttl REAL, submitted_at REAL, claimed_at REAL, renewed_at REAL,
    completed_at REAL, runs INTEGER NOT NULL, result BLOB);
CREATE INDEX tenure_jobs_pending ON tenure_jobs (submitted_at) WHERE state = 'pending';
INSERT INTO tenure_jobs (job_id, state, token, submitted_at, runs) VALUES ('old-b', 'pending', 0, 20.0, 1);
INSERT INTO tenure_jobs (job_id, state, token, submitted_at, runs) VALUES ('old-a', 'pending', 0, 10.0, 1);
"""


def test_a_released_job_queues_behind_the_jobs_waiting(tmp_path: Path) -> None:
    clock = tenure.ManualClock()
    with tenure.connect(f"sqlite:///{tmp_path}/q.db", clock=clock) as store:
        lease = store.claim("back", owner="a", ttl=30)  # submitted (and claimed) first
        for job_id in ("w1", "w2"):
            clock.advance(1)
            store.submit(job_id)
        clock.advance(1)
        store.release(lease)
        order = [store.claim_next(owner="b", ttl=30) for _ in range(3)]
        assert [lease.job_id for lease in order if lease] == ["w1", "w2", "back"]


def test_a_store_from_before_queued_at_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(_OLD)
    clock = tenure.ManualClock(start=100.0)
    with tenure.connect(f"sqlite:///{path}", clock=clock) as store:
        store.submit("new")
        first, second, third = (store.claim_next(owner="w", ttl=30) for _ in range(3))
        assert [x.job_id if x else None for x in (first, second, third)] == ["old-a", "old-b", "new"]
    with sqlite3.connect(path) as db:
        indexes = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    # The queue is read through its index (test_sqlite_lifecycle reads claim_next's plan).
    assert "tenure_jobs_ready" in indexes and "tenure_jobs_pending" not in indexes


def test_claim_next_passes_over_a_row_it_cannot_read(tmp_path: Path) -> None:
    # As on PostgreSQL, etcd and ZooKeeper: a corrupt row at the head of the queue (or an
    # overdue "lease" that is not one) is listed as corrupt, and never blocks the jobs behind it.
    clock = tenure.ManualClock()
    with tenure.connect(f"sqlite:///{tmp_path}/q.db", clock=clock) as store:
        store.submit_many(["bad-pending", "minus-infinity", "text-time", "good"])
        store.claim("bad-leased", owner="a", ttl=30)
        store.claim("ends-never", owner="a", ttl=30)
        clock.advance(60)
        with sqlite3.connect(tmp_path / "q.db") as db:
            db.execute("UPDATE tenure_jobs SET token = 'x' WHERE job_id = 'bad-pending'")
            db.execute("UPDATE tenure_jobs SET owner = NULL WHERE job_id = 'bad-leased'")
            # Values SQLite keeps but no record of tenure's holds (the codec refuses them):
            db.execute("UPDATE tenure_jobs SET submitted_at = ? WHERE job_id = 'minus-infinity'", (float("-inf"),))
            db.execute("UPDATE tenure_jobs SET submitted_at = 'soon' WHERE job_id = 'text-time'")
            db.execute("UPDATE tenure_jobs SET lease_until = ? WHERE job_id = 'ends-never'", (float("-inf"),))
        lease = store.claim_next(owner="b", ttl=30)
        assert lease is not None and lease.job_id == "good"
        assert store.claim_next(owner="b", ttl=30) is None
        corrupt = {"bad-pending", "bad-leased", "minus-infinity", "text-time", "ends-never"}
        assert {j.job_id for j in store.page(states=["corrupt"]).jobs} == corrupt
        assert {j.job_id for j in store.jobs() if j.state is tenure.JobState.CORRUPT} == corrupt
        assert store.summary().corrupt == len(corrupt)


def test_a_listing_pages_past_a_job_id_whose_bytes_are_not_utf8(tmp_path: Path) -> None:
    # SQLite keeps any bytes as text; Python cannot read such text, so before it was read
    # leniently every listing (and claim_next) failed on it. Here it ends the first page of
    # jobs() (2000 rows): the next page starts after it, as stored.
    with tenure.connect(f"sqlite:///{tmp_path}/q.db") as store:
        store.submit_many([f"j{n:04d}" for n in range(2000)] + ["k"])
        with sqlite3.connect(tmp_path / "q.db") as db:
            db.execute("UPDATE tenure_jobs SET job_id = CAST(CAST(job_id AS BLOB) || x'ff' AS TEXT) "
                       "WHERE job_id = 'j1999'")
        listed = list(store.jobs())
        assert [j.job_id for j in listed[-2:]] == ["'j1999\\udcff'", "k"] and len(listed) == 2001
        assert listed[-2].state is tenure.JobState.CORRUPT
        assert listed[-2].problem == "the job id is not UTF-8 text (the surrogate character U+DCFF ('\\udcff'))"


def test_renewals_do_not_push_claims_out_of_the_trimmed_history(tmp_path: Path) -> None:
    # Each renewal replaces the claim's earlier renewal row, and the trim counts rows, not ids.
    with tenure.connect(f"sqlite:///{tmp_path}/h.db?retention=6") as store:  # the rows the history ends with
        held = [store.claim(f"j{i}", owner="w", ttl=30) for i in range(3)]
        for _ in range(90):
            held = store.renew_many(held)  # type: ignore[assignment]  # all current
            held[0] = store.renew(held[0])  # 363 ids: trims at 256
        assert [(e.job_id, e.op) for e in store.history()] == [
            ("j0", tenure.Op.CLAIM), ("j1", tenure.Op.CLAIM), ("j2", tenure.Op.CLAIM),
            ("j1", tenure.Op.RENEW), ("j2", tenure.Op.RENEW), ("j0", tenure.Op.RENEW)]
        for i in range(300):  # and a trim does keep the newest 6: ids 507 to 512, and those since
            store.submit(f"s{i}")
        assert [e.job_id for e in store.history()] == [f"s{i}" for i in range(143, 300)]
