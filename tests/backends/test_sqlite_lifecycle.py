"""SQLite and the job life cycle (issue 28): a store made before it is upgraded in place and
keeps working; claim_next finds its candidate through indexes, at a cost that does not grow
with the jobs it must pass over; the life cycle adds no statement to claim, claim_next or
complete."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure.backends.sqlite import CLAIM_NEXT_SQL, claimable
from tenure.core.backend import Backend

# The schema tenure wrote before the life cycle (schema 1, with queued_at), and jobs in it as
# that version wrote them: pending, leased (one lease ran out by t=100, one runs), completed.
_BEFORE = """
CREATE TABLE tenure_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO tenure_meta VALUES ('schema_version', '1');
CREATE TABLE tenure_jobs (
    job_id TEXT PRIMARY KEY, state TEXT NOT NULL, owner TEXT, token INTEGER NOT NULL,
    lease_until REAL, ttl REAL, submitted_at REAL, claimed_at REAL, renewed_at REAL,
    completed_at REAL, runs INTEGER NOT NULL, result BLOB, queued_at REAL);
CREATE INDEX tenure_jobs_leased ON tenure_jobs (lease_until) WHERE state = 'leased';
CREATE TABLE tenure_rejections (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, op TEXT NOT NULL,
    owner TEXT NOT NULL, token INTEGER NOT NULL, current_owner TEXT, current_token INTEGER,
    at REAL NOT NULL, reason TEXT NOT NULL, kind TEXT NOT NULL, resource TEXT);
CREATE INDEX tenure_rejections_at ON tenure_rejections (at);
CREATE INDEX tenure_rejections_job ON tenure_rejections (job_id, id);
CREATE TABLE tenure_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, op TEXT NOT NULL,
    owner TEXT, token INTEGER NOT NULL, at REAL NOT NULL, expires_at REAL);
CREATE INDEX tenure_events_job ON tenure_events (job_id, id);
CREATE INDEX tenure_events_at ON tenure_events (at);
CREATE INDEX tenure_jobs_queued ON tenure_jobs (coalesce(queued_at, submitted_at)) WHERE state = 'pending';
INSERT INTO tenure_jobs (job_id, state, token, submitted_at, runs, queued_at)
    VALUES ('waiting', 'pending', 0, 10.0, 1, 10.0);
INSERT INTO tenure_jobs (job_id, state, owner, token, lease_until, ttl, submitted_at, claimed_at, runs)
    VALUES ('ran-out', 'leased', 'old', 3, 50.0, 30.0, 5.0, 20.0, 1);
INSERT INTO tenure_jobs (job_id, state, owner, token, lease_until, ttl, submitted_at, claimed_at, runs)
    VALUES ('held', 'leased', 'old', 1, 500.0, 30.0, 5.0, 90.0, 1);
INSERT INTO tenure_jobs (job_id, state, owner, token, submitted_at, claimed_at, completed_at, runs, result)
    VALUES ('done', 'completed', NULL, 2, 1.0, 2.0, 3.0, 1, x'6f6b');
"""


def _open(path: Path, clock: tenure.ManualClock, **options: Any) -> tenure.Store:
    return tenure.connect(f"sqlite:///{path}", clock=clock, **options)


def _schema(path: Path) -> tuple[str, set[str], set[str]]:
    with sqlite3.connect(path) as db:
        (version,) = db.execute("SELECT value FROM tenure_meta WHERE key = 'schema_version'").fetchone()
        columns = {row[1] for row in db.execute("PRAGMA table_info(tenure_jobs)")}
        indexes = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    return version, columns, indexes


def test_a_store_from_before_the_life_cycle_is_upgraded_in_place_and_keeps_working(tmp_path: Path) -> None:
    path = tmp_path / "before.db"
    with sqlite3.connect(path) as db:
        db.executescript(_BEFORE)
    clock = tenure.ManualClock(start=100.0)
    with _open(path, clock) as store:
        # Records from before read as attempts 0, no limit, claimable now.
        for job_id, state in (("waiting", tenure.JobState.PENDING), ("ran-out", tenure.JobState.EXPIRED),
                              ("held", tenure.JobState.LEASED), ("done", tenure.JobState.COMPLETED)):
            job = store.get(job_id)
            assert job is not None and job.state is state, job_id
            assert (job.attempts, job.max_attempts, job.last_error, job.claimable_at) == (0, None, None, None)
        assert store.get("done").result == b"ok"  # type: ignore[union-attr]
        summary = store.summary()
        assert (summary.pending, summary.expired, summary.leased, summary.completed) == (1, 1, 1, 1)
        assert summary.scheduled == summary.parked == summary.corrupt == 0
        # The queue as before: the lease that ran out, then the waiting job.
        overdue = store.claim_next(owner="w", ttl=30)
        assert overdue is not None and (overdue.job_id, overdue.token, overdue.attempt) == ("ran-out", 4, 1)
        lease = store.claim_next(owner="w", ttl=30)
        assert lease is not None and (lease.job_id, lease.attempt) == ("waiting", 1)
        assert store.claim_next(owner="w", ttl=30) is None
        # fail, retry by the store's clock, park, requeue: on rows written before the columns.
        store.fail(lease, "first", retry_in=5)
        assert store.get("waiting").state is tenure.JobState.SCHEDULED  # type: ignore[union-attr]
        assert store.claim_next(owner="w", ttl=30) is None
        clock.advance(5)
        again = store.claim_next(owner="w", ttl=30)
        assert again is not None and (again.job_id, again.attempt) == ("waiting", 2)
        store.complete(again)
        store.submit("new", max_attempts=1)
        store.fail(store.claim("new", owner="w", ttl=30), "poison")
        assert store.get("new").state is tenure.JobState.PARKED  # type: ignore[union-attr]
        with pytest.raises(tenure.JobParked):
            store.claim("new", owner="w", ttl=30)
        store.requeue("new", actor="ops")
        assert store.claim("new", owner="w", ttl=30).attempt == 1
    version, columns, indexes = _schema(path)
    assert version == "2"
    assert {"attempts", "max_attempts", "last_error", "claimable_at", "failed_at"} <= columns
    assert {"tenure_jobs_ending", "tenure_jobs_ready", "tenure_jobs_scheduled"} <= indexes
    assert "tenure_jobs_queued" not in indexes  # replaced by tenure_jobs_ready


def test_the_upgrade_is_idempotent_and_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "before.db"
    with sqlite3.connect(path) as db:
        db.executescript(_BEFORE)
    clock = tenure.ManualClock(start=100.0)
    with _open(path, clock) as first, _open(path, clock) as second:  # two openers, one upgrade
        first.submit("later", delay=60)
        assert second.get("later").state is tenure.JobState.SCHEDULED  # type: ignore[union-attr]
    upgraded = _schema(path)
    with _open(path, clock) as store:
        assert store.get("later").claimable_at == 160.0  # type: ignore[union-attr]
        assert len(list(store.jobs())) == 5
    assert _schema(path) == upgraded
    with sqlite3.connect(path) as db:
        db.execute("UPDATE tenure_meta SET value = '3' WHERE key = 'schema_version'")
    with pytest.raises(tenure.InvalidArgument, match="schema 3"):
        _open(path, clock)


def _connection(path: Path) -> sqlite3.Connection:
    """A connection of the test's own to a store's file, able to run the store's statements."""
    db = sqlite3.connect(path, isolation_level=None)
    db.create_function("tenure_utf8", 1, lambda data: True, deterministic=True)  # ids here are ASCII
    return db


def _crowd(path: Path, n: int) -> None:
    """``n`` jobs of every kind claim_next must pass over at t=1000, as the store writes them:
    live leases, leases that ran out on their last attempt (parked), parked, scheduled for
    later, completed; then one expired lease and one pending job at the end of their queues."""
    rows: list[tuple[Any, ...]] = []
    for i in range(n):
        rows += [(f"live-{i}", "leased", "w", 1, 2000.0 + i, 30.0, 1.0, 1, 1, None, None),
                 (f"spent-{i}", "leased", "w", 1, 10.0 + i, 30.0, 1.0, 1, 1, 1, None),
                 (f"parked-{i}", "parked", None, 1, None, None, 1.0, 1, 3, 3, None),
                 (f"later-{i}", "pending", None, 0, None, None, 1.0, 1, 0, None, 5000.0 + i),
                 (f"done-{i}", "completed", None, 1, None, None, 1.0, 1, 1, None, None)]
    rows += [("overdue", "leased", "w", 1, 999.0, 30.0, 1.0, 1, 1, 2, None),
             ("ready", "pending", None, 0, None, None, 999.0, 1, 0, None, None)]
    with _connection(path) as db:
        db.execute("BEGIN")
        db.executemany("INSERT INTO tenure_jobs (job_id, state, owner, token, lease_until, ttl, submitted_at, runs,"
                       " attempts, max_attempts, claimable_at, queued_at)"
                       " VALUES (?,?,?,?,?,?,?,?,?,?,?, coalesce(?11, ?7))", rows)
        db.execute("COMMIT")


def _instructions(path: Path, now: float) -> tuple[str | None, int]:
    """claim_next's candidate at ``now`` and the SQLite VM instructions its statement ran."""
    counted = [0]

    def count() -> int:
        counted[0] += 1
        return 0

    db = _connection(path)
    try:
        db.set_progress_handler(count, 1)
        found = claimable(db.execute(CLAIM_NEXT_SQL, {"now": now, "n": 1}), 1)
    finally:
        db.close()
    return (found[0] if found else None), counted[0]


def test_claim_next_costs_the_same_whatever_the_jobs_it_passes_over(tmp_path: Path) -> None:
    costs = []
    for n in (10, 3000):
        path = tmp_path / f"{n}.db"
        tenure.connect(f"sqlite:///{path}").close()
        _crowd(path, n)
        found, cost = _instructions(path, 1000.0)
        assert found == "overdue"
        costs.append(cost)
        with _connection(path) as db:
            db.execute("DELETE FROM tenure_jobs WHERE job_id = 'overdue'")
        found, cost = _instructions(path, 1000.0)
        assert found == "ready"
        costs.append(cost)
    assert costs[2:] == costs[:2], costs  # the same instructions, not more per job passed over


def test_claim_next_reads_its_candidates_through_the_indexes(tmp_path: Path) -> None:
    path = tmp_path / "plan.db"
    tenure.connect(f"sqlite:///{path}").close()
    with _connection(path) as db:
        plan = [str(row[3]) for row in db.execute(f"EXPLAIN QUERY PLAN {CLAIM_NEXT_SQL}", {"now": 0.0, "n": 1})]
    assert "SEARCH tenure_jobs USING INDEX tenure_jobs_ending (lease_until<?)" in plan
    assert "SCAN tenure_jobs USING INDEX tenure_jobs_ready" in plan  # in queue order: the first valid row ends it
    assert any(p.startswith("SEARCH tenure_jobs USING INDEX tenure_jobs_scheduled (claimable_at") for p in plan)
    assert "SCAN tenure_jobs" not in plan  # no probe reads the table in its own order


def test_claim_next_takes_candidates_in_the_order_they_became_claimable(tmp_path: Path) -> None:
    clock = tenure.ManualClock(start=100.0)
    with _open(tmp_path / "order.db", clock) as store:
        store.submit("scheduled-first", delay=1)  # claimable from 101: before "second" joins
        clock.advance(2)
        store.submit("second")
        store.submit("scheduled-last", delay=0.5)  # claimable from 102.5
        held = store.claim("held", owner="a", ttl=10)  # runs out at 112
        store.submit("spent", max_attempts=1)
        store.claim("spent", owner="a", ttl=1)  # its only attempt: parked when it runs out
        clock.advance(20)
        store.submit("late")
        store.fail(store.claim("late", owner="a", ttl=10), retry_in=0)  # claimable again at once
        order = []
        while (lease := store.claim_next(owner="b", ttl=100)) is not None:
            order.append(lease.job_id)
        assert order == ["held", "scheduled-first", "second", "scheduled-last", "late"]
        assert held.token < store.get("held").token  # type: ignore[union-attr]


def test_a_requeued_scheduled_job_keeps_no_place_from_the_future(tmp_path: Path) -> None:
    # A requeue with no delay of a job scheduled for later makes it claimable now: it joins
    # the queue now, not at the time it was scheduled for.
    clock = tenure.ManualClock(start=100.0)
    with _open(tmp_path / "place.db", clock) as store:
        store.submit("j", delay=1000)
        clock.advance(1)
        store.submit("k")
        clock.advance(1)
        store.requeue("j")
        store.submit("m", delay=0.5)
        clock.advance(1)
        order = [lease.job_id for lease in iter(lambda: store.claim_next(owner="b", ttl=100), None)]
        assert order == ["k", "j", "m"]


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The statements every SQLite connection opened from here on runs (sqlite3's trace)."""
    seen: list[str] = []
    connect: Callable[..., sqlite3.Connection] = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        db = connect(*args, **kwargs)
        db.set_trace_callback(seen.append)
        return db

    monkeypatch.setattr(sqlite3, "connect", traced)
    yield seen


def test_the_life_cycle_adds_no_statement_to_claim_claim_next_or_complete(
        tmp_path: Path, statements: list[str]) -> None:
    # Each is one transaction: BEGIN, the read, the write, its history event, COMMIT; claim_next
    # first finds its candidate, in one statement (two before it, when no lease had run out:
    # 7 statements then); release read the job's place in the queue again (6 then).
    clock = tenure.ManualClock(start=100.0)
    with _open(tmp_path / "count.db", clock, max_attempts=3) as store:
        store.submit_many(["a", "b"], delay=0)

        def counted(call: Callable[[], Any]) -> int:
            statements.clear()
            call()
            return len(statements)

        leases: list[tenure.Lease | None] = []
        claim = counted(lambda: leases.append(store.claim("a", owner="w", ttl=30)))
        claim_next = counted(lambda: leases.append(store.claim_next(owner="w", ttl=30)))
        assert [lease.job_id if lease else None for lease in leases] == ["a", "b"]
        complete = counted(lambda: store.complete(leases[1]))  # type: ignore[arg-type]
        release = counted(lambda: store.release(leases[0]))  # type: ignore[arg-type]
        assert (claim, claim_next, complete) == (5, 6, 5), statements
        assert release == 5  # no read of the queue's place: the step's load brought it


_STATE_SETS: list[frozenset[tenure.JobState] | None] = [
    None, *(frozenset({state}) for state in tenure.JobState),
    frozenset({tenure.JobState.LEASED, tenure.JobState.EXPIRED}),
    frozenset({tenure.JobState.PENDING, tenure.JobState.SCHEDULED}),
    frozenset({tenure.JobState.PARKED, tenure.JobState.EXPIRED}),
]


def test_summary_and_pages_judge_scheduled_and_parked_jobs_as_a_listing_does(tmp_path: Path) -> None:
    # SQL's judgement (summary, page) against the core's, which the default of every backend
    # applies to a listing of every job (transitions.status).
    clock = tenure.ManualClock(start=100.0)
    with _open(tmp_path / "judged.db", clock) as store:
        store.submit_many(["pending", "due"])
        store.submit("scheduled", delay=50)
        store.submit("due-later", delay=2)  # claimable by the time of the checks
        store.fail(store.claim("retrying", owner="a", ttl=30), "boom", retry_in=40)
        store.submit("parked", max_attempts=1)
        store.fail(store.claim("parked", owner="a", ttl=30), "poison")
        store.submit("ran-out", max_attempts=1)
        store.claim("ran-out", owner="a", ttl=5)  # its only lease: parked when it runs out
        store.submit("last-live", max_attempts=1)
        store.claim("last-live", owner="a", ttl=60)  # on its last attempt, still held
        store.claim("expired", owner="a", ttl=5)
        store.claim("leased", owner="b", ttl=60)
        store.complete(store.claim("done", owner="c", ttl=30))
        clock.advance(10)
        with sqlite3.connect(tmp_path / "judged.db") as db:  # no record of tenure's: corrupt
            db.execute("INSERT INTO tenure_jobs (job_id, state, token, runs, attempts, max_attempts)"
                       " VALUES ('bad-limit', 'pending', 0, 1, 0, 0)")
        backend, now = store.backend, store.now()
        judged = {job.job_id: job.state for job in store.jobs()}
        assert judged["scheduled"] is judged["retrying"] is tenure.JobState.SCHEDULED
        assert judged["parked"] is judged["ran-out"] is tenure.JobState.PARKED
        assert judged["due-later"] is tenure.JobState.PENDING and judged["last-live"] is tenure.JobState.LEASED
        assert judged["bad-limit"] is tenure.JobState.CORRUPT
        for soon in (0.0, 30.0, 1e6):
            assert backend.summary(now, soon) == Backend.summary(backend, now, soon)
        counted = store.summary()
        assert (counted.pending, counted.scheduled, counted.parked, counted.leased, counted.expired) == (3, 2, 2, 2, 1)
        for states in _STATE_SETS:
            for order in ("expiry", "job"):
                for offset, limit in ((0, 50), (1, 2)):
                    args: tuple[Any, ...] = (now, states, None, None, order, offset, limit)
                    got, want = backend.page(*args), Backend.page(backend, *args)
                    assert (got.total, got.jobs) == (want.total, want.jobs), (states, order, offset, limit)
        parked = store.get("ran-out")
        assert parked is not None and parked.parked_at == 105.0 and parked.attempts == 1


def test_a_pending_row_with_no_time_queues_first_as_sql_sorts_it(tmp_path: Path) -> None:
    # Written by something else (no submitted_at, no queued_at): readable, so claimable, and
    # ordered where SQL puts NULL, first, rather than breaking the core's merge.
    clock = tenure.ManualClock(start=100.0)
    path = tmp_path / "untimed.db"
    with _open(path, clock) as store:
        store.submit("a")
        store.submit("untimed")
        with _connection(path) as db:
            db.execute("UPDATE tenure_jobs SET submitted_at = NULL, queued_at = NULL WHERE job_id = 'untimed'")
        taken = [lease.job_id for lease in iter(lambda: store.claim_next(owner="b", ttl=10), None)]
    assert taken == ["untimed", "a"]
