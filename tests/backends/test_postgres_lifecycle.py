"""PostgreSQL judges the job life cycle in SQL; these cases hold its statements to
``tenure.core.transitions``, the rules every other store runs.

Each case plants a row (a ``JobRecord`` with times around the server's clock, far enough from
it that a few milliseconds never change a verdict), runs one operation through the backend's
statement, and compares what the statement did with what ``transitions`` decides for the
same record at the statement's time (read back from the history event or the rejection it
wrote): the record it left, the history event, or the error.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tenure
from devservers.postgres import admin
from tenure.backends.postgres import ops as postgres_ops
from tenure.backends.postgres import sql as q
from tenure.core import queries, transitions
from tenure.core.errors import JobNotFound, StaleLease, TokenChanged
from tenure.core.lifecycle import Retry
from tenure.core.records import JobRecord, JobState, Lease, Op, lease_over
from tests.servers.postgres import PostgresHarness

pytest.importorskip("psycopg_pool")

FAR = 1000.0  # seconds between a planted time and the server's now: no verdict is close
TTL = 30.0
JOB = "life"
Make = Callable[[float], JobRecord]  # a record, from the server's now


def pending(**life: Any) -> Make:
    return lambda now: JobRecord(JOB, JobState.PENDING, None, 3, None, None, now - 2 * FAR, **_at(life, now))


def leased(until: float, **life: Any) -> Make:
    return lambda now: JobRecord(JOB, JobState.LEASED, "w1", 3, now + until, TTL, now - 2 * FAR, now - 2 * FAR,
                                 **_at(life, now))


def parked(**life: Any) -> Make:
    return lambda now: JobRecord(JOB, JobState.PARKED, None, 3, None, None, now - 2 * FAR, now - 2 * FAR,
                                 failed_at=now - FAR, **_at(life, now))


def completed(**life: Any) -> Make:
    return lambda now: JobRecord(JOB, JobState.COMPLETED, "w1", 3, None, TTL, now - 2 * FAR, now - 2 * FAR,
                                 completed_at=now - FAR, result=b"done", **_at(life, now))


def _at(life: dict[str, Any], now: float) -> dict[str, Any]:
    """``claimable_at`` given relative to now."""
    return {**life, **({"claimable_at": now + life["claimable_at"]} if life.get("claimable_at") is not None else {})}


# -- the operations, each through the statement and through transitions ------------------------
def holder_lease(rec: JobRecord, token: int | None = None) -> Lease:
    """The lease of the record's holder (of its last holder, for a job given back)."""
    return Lease(JOB, "w1", rec.token if token is None else token, rec.lease_until or 0.0, rec.ttl or TTL)


Operation = tuple[str, Callable[[Any, JobRecord], object], Callable[[JobRecord | None, float], object]]


def claim(max_attempts: int | None = None) -> Operation:
    return ("claim", lambda b, rec: b.claim(JOB, "w2", TTL, max_attempts=max_attempts),
            lambda rec, now: transitions.claim(rec, JOB, "w2", TTL, now, max_attempts))


def claim_next() -> Operation:
    def decide(rec: JobRecord | None, now: float) -> JobRecord | None:
        return transitions.claim(rec, JOB, "w2", TTL, now) if transitions.is_next(rec, now) else rec

    return "claim_next", lambda b, rec: b.claim_next("w2", TTL), decide


def holder(op: Op, change: transitions.Change, call: Callable[[Any, Lease], object],
           token: int | None = None) -> Operation:
    def decide(rec: JobRecord | None, now: float) -> JobRecord:
        found = transitions.holder_step(rec, op, holder_lease_of(rec, token), change, now)
        if not isinstance(found, JobRecord):
            raise StaleLease(found)
        return found

    return str(op), lambda b, rec: call(b, holder_lease(rec, token)), decide


def holder_lease_of(rec: JobRecord | None, token: int | None) -> Lease:
    assert rec is not None
    return holder_lease(rec, token)


def renew(token: int | None = None) -> Operation:
    return holder(Op.RENEW, lambda r, now: transitions.renew(r, TTL, now), lambda b, lease: b.renew(lease, TTL),
                  token)


def complete(token: int | None = None) -> Operation:
    return holder(Op.COMPLETE, lambda r, now: transitions.complete(r, b"ok", now),
                  lambda b, lease: b.complete(lease, b"ok"), token)


def force_expire(token: int | None = None) -> Operation:
    def decide(rec: JobRecord | None, now: float) -> JobRecord:
        if rec is None:
            raise JobNotFound(JOB)
        if token is not None and rec.token != token:
            raise TokenChanged(JOB, token, rec.token)  # steps.force_expire's rules
        live = rec.state is JobState.LEASED and rec.lease_until is not None and not lease_over(rec.lease_until, now)
        return transitions.force_expire(rec, now) if live else rec

    return "expire", lambda b, rec: b.force_expire(JOB, "ops", token), decide


def release(token: int | None = None) -> Operation:
    return holder(Op.RELEASE, transitions.release, lambda b, lease: b.release(lease), token)


def fail(retry: Retry, error: str | None = "boom", token: int | None = None) -> Operation:
    return holder(Op.FAIL, lambda r, now: transitions.fail(r, error, retry, now),
                  lambda b, lease: b.fail(lease, error, retry), token)


def requeue(delay: float = 0.0, token: int | None = None) -> Operation:
    def decide(rec: JobRecord | None, now: float) -> JobRecord:
        if rec is not None and token is not None and rec.token != token:
            raise TokenChanged(JOB, token, rec.token)  # steps.requeue's rule, before the record's
        return transitions.requeue(rec, JOB, delay, now)

    return "requeue", lambda b, rec: b.requeue(JOB, "ops", delay, token), decide


def submit(max_attempts: int | None = None, delay: float = 0.0) -> Operation:
    def decide(rec: JobRecord | None, now: float) -> JobRecord | None:
        return transitions.submit(rec, JOB, now, max_attempts, delay) or rec

    return "submit", lambda b, rec: b.submit(JOB, "ops", max_attempts=max_attempts, delay=delay), decide


def backoff(base: float = 1.0, factor: float = 2.0, cap: float = 600.0,
            draw: float = 0.0) -> Retry:
    return Retry(None, base, factor, cap, draw)


CASES: dict[str, tuple[Make, Operation]] = {
    # claim: counts an attempt; refuses parked and scheduled jobs
    "claim pending": (pending(attempts=1), claim()),
    "claim pending, due": (pending(attempts=1, claimable_at=-FAR), claim()),
    "claim scheduled": (pending(attempts=1, claimable_at=FAR), claim()),
    "claim parked": (parked(attempts=3, max_attempts=3, last_error="oom"), claim()),
    "claim expired, an attempt left": (leased(-FAR, attempts=2, max_attempts=3), claim()),
    "claim expired on the last attempt": (leased(-FAR, attempts=3, max_attempts=3, last_error="x"), claim()),
    "claim live lease": (leased(FAR, attempts=1), claim()),
    "claim completed": (completed(attempts=1), claim()),
    # claim_next: passes over what it may not take
    "claim_next pending": (pending(), claim_next()),
    "claim_next scheduled": (pending(claimable_at=FAR), claim_next()),
    "claim_next due": (pending(attempts=2, claimable_at=-FAR), claim_next()),
    "claim_next parked": (parked(attempts=1, max_attempts=1), claim_next()),
    "claim_next expired on the last attempt": (leased(-FAR, attempts=2, max_attempts=2), claim_next()),
    "claim_next expired, an attempt left": (leased(-FAR, attempts=1, max_attempts=2), claim_next()),
    # renew and complete: the holder's rule
    "renew": (leased(FAR, attempts=2, max_attempts=5), renew()),
    "stale renew, superseded": (leased(FAR, attempts=1), renew(token=2)),
    "stale renew, expired": (leased(-FAR, attempts=1), renew()),
    "stale renew, completed": (completed(attempts=1), renew()),
    "complete": (leased(FAR, attempts=1), complete()),
    "stale complete, expired on the last attempt": (leased(-FAR, attempts=2, max_attempts=2), complete()),
    "stale complete, pending": (pending(attempts=1), complete()),
    # force_expire: the operator's end of a live lease, nothing else
    "force_expire live lease": (leased(FAR, attempts=1), force_expire()),
    "force_expire expired lease": (leased(-FAR, attempts=1), force_expire()),
    "force_expire pending": (pending(), force_expire()),
    "force_expire, token changed": (leased(FAR, attempts=1), force_expire(token=2)),
    # release: gives the attempt back
    "release": (leased(FAR, attempts=2, max_attempts=5), release()),
    "release of a row from before attempts": (leased(FAR), release()),
    "stale release": (leased(FAR, attempts=2), release(token=2)),
    # fail: the holder's rule, then retry_in or the backoff, or parked
    "fail, retry_in": (leased(FAR, attempts=2), fail(Retry(30.0, draw=0.7))),
    "fail, retry_in 0": (leased(FAR, attempts=2), fail(Retry(0.0))),
    "fail, no error": (leased(FAR, attempts=1), fail(Retry(5.0), error=None)),
    "fail, first backoff, least jitter": (leased(FAR, attempts=1), fail(backoff(draw=0.0))),
    "fail, first backoff, most jitter": (leased(FAR, attempts=1), fail(backoff(draw=0.999999))),
    "fail, fifth backoff": (leased(FAR, attempts=5), fail(backoff(base=0.3, factor=1.7, draw=0.37))),
    "fail, backoff at its cap": (leased(FAR, attempts=30), fail(backoff(cap=45.5, draw=0.5))),
    "fail, backoff past a float": (leased(FAR, attempts=5000), fail(backoff(factor=3.0, draw=0.25))),
    "fail, constant backoff": (leased(FAR, attempts=4000), fail(backoff(base=2.5, factor=1.0, draw=0.5))),
    "fail, no backoff": (leased(FAR, attempts=9), fail(backoff(base=0.0, factor=100.0, draw=0.5))),
    "fail, the last attempt": (leased(FAR, attempts=3, max_attempts=3), fail(Retry(30.0))),
    "stale fail, superseded": (leased(FAR, attempts=1), fail(Retry(1.0), token=2)),
    "stale fail, expired": (leased(-FAR, attempts=1), fail(Retry(1.0))),
    "stale fail, parked": (parked(attempts=2, max_attempts=2), fail(Retry(1.0))),
    # requeue: the operator's fresh start
    "requeue parked": (parked(attempts=3, max_attempts=3, last_error="oom"), requeue()),
    "requeue parked, delayed": (parked(attempts=3, max_attempts=3), requeue(delay=60.0)),
    "requeue scheduled": (pending(attempts=2, claimable_at=FAR), requeue()),
    "requeue expired on the last attempt": (leased(-FAR, attempts=2, max_attempts=2), requeue(token=3)),
    "requeue, token changed": (parked(attempts=3, max_attempts=3), requeue(token=2)),
    "requeue live lease": (leased(FAR, attempts=1), requeue()),
    "requeue completed": (completed(), requeue()),
    # submit: a new run of a completed job starts its life cycle again
    "submit completed": (completed(attempts=2, max_attempts=4, last_error="x", failed_at=5.0),
                         submit(max_attempts=7, delay=12.5)),
    "submit parked": (parked(attempts=1, max_attempts=1), submit(max_attempts=9)),
}


@pytest.fixture(scope="module")
def pg(postgres_session_harness: PostgresHarness) -> PostgresHarness:
    return postgres_session_harness


@pytest.fixture(scope="module")
def shared(pg: PostgresHarness) -> Iterator[tenure.Store]:
    with pg.connect() as store:
        yield store


def plant(pg: PostgresHarness, store: tenure.Store, rec: JobRecord) -> None:
    backend: Any = store.backend
    job_id, state, *rest = dataclasses.astuple(rec)[:q.WIDTH]  # the columns (ended_early is a read's fact)
    values = (job_id, state.value, *rest)
    columns = q.JOB_COLUMNS + ", queued_at, queued"
    queued_at = rec.claimable_at if rec.claimable_at is not None else -float("inf")
    with admin(pg.base_url) as conn:
        conn.execute(f"DELETE FROM {backend.quoted}.jobs WHERE job_id = %s", (JOB,))
        conn.execute(f"DELETE FROM {backend.quoted}.events WHERE job_id = %s", (JOB,))
        conn.execute(f"INSERT INTO {backend.quoted}.jobs ({columns}) VALUES "
                     f"({', '.join(['%s'] * (q.WIDTH + 1))}, nextval('{backend.quoted}.queue'))",
                     (*values, queued_at))


def stored(pg: PostgresHarness, store: tenure.Store) -> JobRecord | None:
    backend: Any = store.backend
    with admin(pg.base_url) as conn:
        row = conn.execute(f"SELECT {q.JOB_COLUMNS} FROM {backend.quoted}.jobs WHERE job_id = %s", (JOB,)).fetchone()
    return None if row is None else postgres_ops.decode_row(backend.schema, row)


def outcome(call: Callable[[], object]) -> tuple[object, Exception | None]:
    try:
        return call(), None
    except tenure.LeaseError as exc:
        return None, exc


def facts(exc: Exception | None) -> object:
    """What an error says, apart from the clock it was judged by."""
    if exc is None:
        return None
    if isinstance(exc, StaleLease):
        return type(exc), dataclasses.replace(exc.rejection, at=0.0)
    return type(exc), {k: v for k, v in vars(exc).items() if k not in ("args", "now")}


@pytest.mark.parametrize("case", list(CASES))
def test_the_statements_decide_as_the_transitions(pg: PostgresHarness, shared: tenure.Store, case: str) -> None:
    make, (name, run, decide) = CASES[case]
    now = shared.now()
    before = make(now)
    plant(pg, shared, before)
    answer, error = outcome(lambda: run(shared.backend, before))
    after = stored(pg, shared)
    events = [e for e in shared.history(JOB) if e.at > now - 1.0]
    rejected = [r for r in shared.rejections() if r.job_id == JOB and r.at > now - 1.0]
    at = events[-1].at if events else rejected[-1].at if rejected else shared.now()  # the statement's clock
    expected, expected_error = outcome(lambda: decide(before, at))
    assert facts(error) == facts(expected_error), case
    assert after == (before if expected_error is not None else expected), case
    assert expected is None or isinstance(expected, JobRecord)
    if expected_error is None and expected != before:
        actor = ("ops" if name in ("requeue", "submit", "expire")
                 else "w1" if name in ("release", "fail", "renew", "complete") else None)
        assert expected is not None and len(events) == 1, case
        assert events[0] == transitions.history_event(expected, Op(name if name != "claim_next" else "claim"), at,
                                                      actor), case
    else:
        assert events == [], case
    if isinstance(answer, Lease):  # a claim's lease names its attempt, as transitions.lease_of does
        assert expected is not None and answer == transitions.lease_of(expected), case
        assert answer.attempt == expected.attempts, case


def test_a_requeue_of_a_missing_job_is_job_not_found(shared: tenure.Store) -> None:
    with pytest.raises(JobNotFound):
        shared.backend.requeue("never-submitted", "ops", 0.0, None)
    with pytest.raises(JobNotFound):
        transitions.requeue(None, "never-submitted", 0.0, 0.0)


def test_the_backoff_in_sql_is_the_retrys_to_the_last_bit(pg: PostgresHarness) -> None:
    # Retry.seconds over many attempts and policies against the statement's expression alone.
    expression = q.WAIT.replace("j.attempts", "%(attempts)s::integer")
    retries = [Retry(None, base, factor, cap, draw) for base in (0.0, 0.25, 1.0, 7.0)
               for factor in (1.0, 1.5, 2.0, 100.0) for cap in (0.0, 3.0, 600.0, 31_622_400.0)
               for draw in (0.0, 0.123456789, 0.999999)]
    with admin(pg.base_url) as conn:
        for retry in retries:
            for attempts in (0, 1, 2, 7, 100, 155, 10_000, 1_000_000):
                params = {"attempts": attempts, **dataclasses.asdict(retry)}
                (found,) = conn.execute(f"SELECT {expression}", params).fetchone()
                assert found == retry.seconds(attempts), (retry, attempts)


def test_a_version_3_store_upgrades_and_its_rows_read_as_before_the_life_cycle(pg: PostgresHarness) -> None:
    url = pg.url()
    with tenure.connect(url) as store:
        s = store.backend.quoted  # type: ignore[attr-defined]
    with admin(pg.base_url) as conn:  # back to how version 3 left a store, with its rows
        conn.execute(f"DROP INDEX {s}.jobs_pending")
        conn.execute(f"DROP INDEX {s}.jobs_leased")
        conn.execute(f"ALTER TABLE {s}.jobs DROP COLUMN attempts, DROP COLUMN max_attempts, DROP COLUMN last_error,"
                     " DROP COLUMN claimable_at, DROP COLUMN failed_at, DROP COLUMN queued_at")
        conn.execute(f"CREATE INDEX jobs_pending ON {s}.jobs (queued) WHERE state = 'pending'")
        conn.execute(f"CREATE INDEX jobs_leased ON {s}.jobs (lease_until) WHERE state = 'leased'")
        conn.execute(f"UPDATE {s}.meta SET value = '3' WHERE key = 'schema_version'")
        now = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]
        rows = (("old-b", "pending", None, None), ("old-a", "pending", None, None),
                ("old-held", "leased", "w", now - 5.0), ("old-done", "completed", "w", None))
        for job_id, state, owner, until in rows:
            conn.execute(f"INSERT INTO {s}.jobs (job_id, state, owner, token, lease_until, ttl, submitted_at, runs,"
                         f" queued) VALUES (%s, %s, %s, 1, %s, 30, %s, 1, nextval('{s}.queue'))",
                         (job_id, state, owner, until, now - 60.0))
    with tenure.connect(url) as upgraded:
        assert upgraded.backend.previous_version == 3  # type: ignore[attr-defined]
        read = {j.job_id: (j.state, j.attempts, j.max_attempts, j.claimable_at, j.last_error) for j in upgraded.jobs()}
        assert read == {
            "old-b": (JobState.PENDING, 0, None, None, None), "old-a": (JobState.PENDING, 0, None, None, None),
            "old-held": (JobState.EXPIRED, 0, None, None, None), "old-done": (JobState.COMPLETED, 0, None, None, None)}
        upgraded.submit("new")  # queued after every job queued before the upgrade
        taken = [upgraded.claim_next(owner="x", ttl=30) for _ in range(5)]
        assert [(lease.job_id, lease.attempt) for lease in taken if lease] == [
            ("old-held", 1), ("old-b", 1), ("old-a", 1), ("new", 1)]
        assert taken[-1] is None


def test_claim_next_reads_no_further_than_the_due_jobs_in_its_index(pg: PostgresHarness) -> None:
    # A queue of jobs in backoff (scheduled an hour on) and nothing due: claim_next must stop
    # at the index range up to now, not read every scheduled job to find none.
    with pg.connect() as store:
        store.submit_many([f"later{i:05d}" for i in range(3000)], delay=3600.0)
        backend: Any = store.backend
        with backend.pool.connection() as conn:
            conn.execute(f"ANALYZE {backend.quoted}.jobs")
            plan = "\n".join(row[0] for row in conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS) " + backend.statements["CLAIM_NEXT"],
                {"owner": "w", "ttl": 30.0, "channel": ""}))
        waiting = plan.split("CTE waiting")[1].split("CTE won")[0]
        assert "Index Scan using jobs_pending" in waiting and "Index Cond: (queued_at <=" in waiting, plan
        assert "rows=0 loops=1" in waiting.split("Index Scan using jobs_pending")[1].splitlines()[0], plan
        assert "Rows Removed by Filter" not in waiting, plan
        assert store.claim_next(owner="w", ttl=30) is None


def test_the_native_watch_shows_a_job_parked_or_due_when_its_time_comes(pg: PostgresHarness) -> None:
    # No write marks these moments (a lease on its last attempt running out parks the job; a
    # scheduled job's time coming makes it pending): the watch judges them as a read would.
    # The server's clock cannot be injected: the lease and the delay run out in real time.
    with pg.connect() as store:
        stop = threading.Event()
        changes = store.watch(stop, interval=0.05)
        store.submit("poison", max_attempts=1)
        store.claim("poison", owner="w", ttl=0.3)
        store.submit("later", delay=0.3)
        seen: dict[str, list[JobState]] = {}
        deadline = time.monotonic() + 3  # before the watch lists every job again (timeout + 1 s)
        try:
            for change in changes:
                if change.job is not None:
                    states = seen.setdefault(change.job.job_id, [])
                    if not states or states[-1] is not change.job.state:
                        states.append(change.job.state)
                done = seen.get("poison", [])[-1:] == [JobState.PARKED] and seen.get("later", [])[-1:] == [
                    JobState.PENDING]
                if done or time.monotonic() > deadline:
                    break
        finally:
            stop.set()
            list(changes)
        assert seen["poison"][-2:] == [JobState.LEASED, JobState.PARKED], seen
        assert seen["later"] == [JobState.SCHEDULED, JobState.PENDING], seen
        poison = store.get("poison")
        assert poison is not None and poison.state is JobState.PARKED and poison.parked_at is not None


def test_summary_and_pages_judge_scheduled_and_parked_jobs_as_a_listing_does(pg: PostgresHarness) -> None:
    # The counts and pages are SQL over the rows; the listing is every job through the codec
    # and transitions.status: the two must agree on every state, scheduled and parked included.
    with pg.connect() as store:
        backend: Any = store.backend
        store.submit("pending")
        store.submit("scheduled", delay=FAR)
        store.claim("leased", owner="w", ttl=FAR)
        store.claim("expired", owner="w", ttl=FAR)
        store.submit("failed-last", max_attempts=1)
        store.fail(store.claim("failed-last", owner="w", ttl=FAR), "oom")
        store.submit("ran-out-last", max_attempts=1)
        store.claim("ran-out-last", owner="w", ttl=FAR)
        store.submit("retrying", max_attempts=2)
        store.fail(store.claim("retrying", owner="w", ttl=FAR), "flaky", retry_in=FAR)
        store.complete(store.claim("completed", owner="w", ttl=FAR))
        store.submit("corrupt")
        pg.corrupt(store, "corrupt")
        with admin(pg.base_url) as conn:  # two leases run out, without waiting for them
            conn.execute(f"UPDATE {backend.quoted}.jobs SET lease_until = lease_until - {2 * FAR}"
                         " WHERE job_id IN ('expired', 'ran-out-last')")
        now = store.now()
        listed = list(store.jobs())
        summary = backend.summary(now, 30.0)
        assert summary == queries.summarize(listed, now, 30.0, summary.rejections_last_hour)
        assert (summary.pending, summary.scheduled, summary.leased, summary.expired, summary.parked) == (1, 2, 1, 1, 2)
        for state in JobState:
            for order in ("expiry", "job"):
                page = backend.page(now, frozenset({state}), None, None, order, 0, 50)
                assert page == queries.select_page(listed, now, frozenset({state}), None, None, order, 0, 50), state
        parked = {j.job_id: (j.attempts, j.last_error, j.parked_at is not None) for j in listed
                  if j.state is JobState.PARKED}
        assert parked == {"failed-last": (1, "oom", True), "ran-out-last": (1, None, True)}
