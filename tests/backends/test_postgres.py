"""PostgreSQL specifics: URLs and options, credentials, one statement per operation, schema versions.

The protocol itself is the conformance suite's (``TENURE_TEST_BACKENDS=postgres``).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
from devservers.ports import free_port
from devservers.postgres import AUTH_PASSWORD, AUTH_USER, PostgresServer, admin
from tenure.backends.postgres import schema as postgres_schema
from tenure.backends.postgres.ops import Query, statement
from tenure.core import contention
from tests.servers.postgres import PostgresHarness

pytest.importorskip("psycopg_pool")


@pytest.fixture
def pg(postgres_session_harness: PostgresHarness) -> PostgresHarness:
    return postgres_session_harness


@pytest.mark.parametrize("url, match", [
    ("postgresql://postgres@127.0.0.1:5432/", "dbname"),
    ("postgresql://postgres@127.0.0.1:5432/a/b", "dbname"),
    ("postgresql:///postgres", "dbname"),
    ("postgresql://postgres@127.0.0.1:5432/postgres?schema=Bad-Name", "schema"),
    ("postgresql://postgres@127.0.0.1:5432/postgres?schema=x;drop", "schema"),
    ("postgresql://postgres@127.0.0.1:5432/postgres?colour=blue", "colour"),
    ("postgresql://postgres@127.0.0.1:5432/postgres?timeout=0", "timeout"),
    ("postgresql://postgres@127.0.0.1:5432/postgres?pool_size=0", "pool_size"),
    ("postgresql://postgres@127.0.0.1:5432/postgres?notify=maybe", "notify"),
    ("postgresql://postgres@127.0.0.1:5432/postgres?sslmode=sometimes", "sslmode"),
])
def test_bad_urls_and_options_are_invalid_arguments(url: str, match: str) -> None:
    with pytest.raises(tenure.InvalidArgument, match=match):
        tenure.connect(url)


def test_a_password_never_appears_in_errors_or_the_store_url() -> None:
    port = free_port()  # nothing listens there
    url = f"postgresql://someone:{AUTH_PASSWORD}@127.0.0.1:{port}/postgres?colour=blue"
    with pytest.raises(tenure.InvalidArgument) as bad:
        tenure.connect(url)
    with pytest.raises(tenure.InvalidArgument) as typo:  # one slash short: not a URL at all
        tenure.connect(url.replace("://", ":/"))
    with pytest.raises(tenure.BackendUnavailable) as down:
        tenure.connect(url.split("?")[0] + "?timeout=2")
    for exc in (bad.value, typo.value, down.value):
        assert AUTH_PASSWORD not in str(exc) and AUTH_PASSWORD not in repr(exc)


def test_server_down_is_backend_unavailable_with_the_cause() -> None:
    port = free_port()
    with pytest.raises(tenure.BackendUnavailable) as info:
        tenure.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres?timeout=2")
    assert not isinstance(info.value, tenure.AuthenticationFailed)
    assert f"127.0.0.1:{port}" in str(info.value) and "refused" in str(info.value).lower()
    assert info.value.__cause__ is not None


def test_wrong_password_is_authentication_failed(postgres_private: PostgresServer) -> None:
    base = f"127.0.0.1:{postgres_private.port}/postgres?schema=auth"
    with pytest.raises(tenure.AuthenticationFailed) as info:
        tenure.connect(f"postgresql://{AUTH_USER}:wrong-{AUTH_PASSWORD}@{base}")
    assert "wrong-" not in str(info.value)
    with pytest.warns(tenure.InsecureTransportWarning), \
            tenure.connect(f"postgresql://{AUTH_USER}:{AUTH_PASSWORD}@{base}") as store:  # no TLS here
        store.submit("j")  # the right one is let in
        assert AUTH_PASSWORD not in store.url and AUTH_PASSWORD not in repr(store)


class _Counter:
    def __init__(self) -> None:
        self.statements: list[str] = []


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Counter]:
    import psycopg

    counter = _Counter()
    real = psycopg.Cursor.execute  # the backends' raw cursors' too

    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        counter.statements.append(str(query))
        return real(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    yield counter


def test_each_protocol_operation_is_one_statement(pg: PostgresHarness, counted: _Counter) -> None:
    with pg.connect() as store:
        store.submit_many(["a", "b"])
        steps: list[tuple[str, Any]] = [
            ("claim", lambda: store.claim("a", owner="w", ttl=30)),
            ("claim_next", lambda: store.claim_next(owner="w", ttl=30)),
        ]
        for name, call in steps:
            counted.statements.clear()
            call()
            assert len(counted.statements) == 1, name
        lease = store.claim("c", owner="w", ttl=30)
        stale = store.claim("d", owner="w", ttl=30)
        store.force_expire("d")
        store.claim("d", owner="v", ttl=30)
        for name, op in (("renew", lambda: store.renew(lease)), ("release", lambda: store.release(lease)),
                         ("complete", lambda: store.complete(store.claim("c", owner="w", ttl=30)))):
            counted.statements.clear()
            op()
            assert len(counted.statements) == (2 if name == "complete" else 1), name  # complete: claim + complete
        counted.statements.clear()
        with pytest.raises(tenure.StaleLease):
            store.complete(stale)  # the refusal and its audit: the same one statement
        assert len(counted.statements) == 1
        failing = store.claim("f", owner="w", ttl=30)
        for name, op in (("fail", lambda: store.fail(failing, "boom")), ("requeue", lambda: store.requeue("f"))):
            counted.statements.clear()
            op()
            assert len(counted.statements) == 1, name
        counted.statements.clear()
        with pytest.raises(tenure.StaleLease):
            store.fail(stale)  # refused and audited (op fail): one statement too
        assert len(counted.statements) == 1


def test_a_write_whose_answer_is_lost_is_outcome_unknown_not_refused(postgres_private: PostgresServer) -> None:
    with tenure.connect(f"{postgres_private.url}?schema=cut&timeout=1") as store:
        store.submit("j")
        store.get("j")  # a pooled connection, idle and ready
        postgres_private.pause()  # the claim reaches the server's socket, the answer never comes back
        try:
            with pytest.raises(tenure.OutcomeUnknown) as info:
                store.claim("j", owner="a", ttl=30)
        finally:
            postgres_private.resume()
        assert "may or may not have been applied" in str(info.value)
        # The server runs the claim once it wakes, on its own backend: it was applied after all.
        deadline = time.monotonic() + 10
        while (status := store.get("j")) is not None and status.owner is None and time.monotonic() < deadline:
            time.sleep(0.05)  # that backend resumes on its own schedule
        assert status is not None and status.state is tenure.JobState.LEASED and status.owner == "a"


def test_fsync_off_is_refused_and_synchronous_commit_off_is_overridden(postgres_private: PostgresServer) -> None:
    url = f"{postgres_private.url}?schema=durability"
    with admin(postgres_private.url) as conn:
        conn.execute("ALTER SYSTEM SET fsync = off")
        conn.execute("ALTER ROLE postgres SET synchronous_commit = off")
        conn.execute("SELECT pg_reload_conf()")
    try:
        with pytest.raises(tenure.BackendUnavailable, match="fsync=off"):
            tenure.connect(url)
        with tenure.connect(url, unsafe_durability=True) as store, \
                store.backend.pool.connection() as pooled:  # type: ignore[attr-defined]
            assert pooled.execute("SHOW synchronous_commit").fetchone()[0] == "on"
    finally:
        with admin(postgres_private.url) as conn:
            conn.execute("ALTER SYSTEM RESET fsync")
            conn.execute("ALTER ROLE postgres RESET synchronous_commit")
            conn.execute("SELECT pg_reload_conf()")


def test_schema_versions_migrate_once_and_a_newer_schema_is_refused(pg: PostgresHarness) -> None:
    url = pg.url()
    with tenure.connect(url) as first:
        assert first.backend.previous_version == 0  # type: ignore[attr-defined]
        schema = first.backend.quoted  # type: ignore[attr-defined]
    with tenure.connect(url) as again:
        assert again.backend.previous_version == postgres_schema.VERSION  # type: ignore[attr-defined]
    with admin(pg.base_url) as conn:  # back to how version 1 left a store
        conn.execute(f"DROP TABLE {schema}.watchers")
        conn.execute(f"DROP INDEX {schema}.rejections_job")
        conn.execute(f"UPDATE {schema}.meta SET value = '1' WHERE key = 'schema_version'")
    with tenure.connect(url) as upgraded:
        assert upgraded.backend.previous_version == 1  # type: ignore[attr-defined]
        upgraded.submit("j")  # its statements read the table migration 2 made
    with admin(pg.base_url) as conn:  # the index migration 3 made, made again
        assert conn.execute("SELECT count(*) FROM pg_indexes WHERE indexname = 'rejections_job'"
                            " AND schemaname = %s", (schema.strip('"'),)).fetchone() == (1,)
    with admin(pg.base_url) as conn:
        conn.execute(f"UPDATE {schema}.meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(tenure.InvalidArgument, match="version 99"):
        tenure.connect(url)


def test_claim_next_takes_overdue_leases_first_then_pending_in_submission_order(pg: PostgresHarness) -> None:
    with pg.connect() as store:
        store.submit_many(["z", "y", "x"])
        short = store.claim("w", owner="a", ttl=0.2)
        pg.expire(store, short)
        taken = [store.claim_next(owner="b", ttl=30) for _ in range(4)]
        assert [lease.job_id for lease in taken if lease] == ["w", "z", "y", "x"]
        assert store.claim_next(owner="b", ttl=30) is None


def test_claim_next_passes_over_rows_with_times_no_record_holds(pg: PostgresHarness) -> None:
    # float8 keeps infinities and NaN, the codec refuses them: a lease that would never end, or
    # a queue place that is no time, is listed as corrupt and never blocks the jobs behind it.
    with pg.connect() as store:
        store.submit_many(["nan-submitted", "good"])
        store.claim("ends-never", owner="a", ttl=0.2)
        backend: Any = store.backend
        with admin(pg.base_url) as conn:
            conn.execute(f"UPDATE {backend.quoted}.jobs SET submitted_at = 'NaN' WHERE job_id = 'nan-submitted'")
            conn.execute(f"UPDATE {backend.quoted}.jobs SET lease_until = '-Infinity' WHERE job_id = 'ends-never'")
        lease = store.claim_next(owner="b", ttl=30)
        assert lease is not None and lease.job_id == "good"
        assert store.claim_next(owner="b", ttl=30) is None
        corrupt = {j.job_id: j.problem for j in store.jobs() if j.state is tenure.JobState.CORRUPT}
        assert corrupt == {"nan-submitted": "field 'submitted_at' is nan", "ends-never": "field 'lease_until' is -inf"}
        assert {j.job_id for j in store.page(states=["corrupt"]).jobs} == set(corrupt)
        assert store.summary().corrupt == 2


def test_the_audit_is_trimmed_to_its_retention(pg: PostgresHarness) -> None:
    with pg.connect(pg.url() + "&retention=5") as store:
        for i in range(130):
            store.complete(store.claim(f"j{i}", owner="w", ttl=30))  # 260 writes: one trim
        assert 5 <= len(store.history()) < 5 + 10  # trimmed at the 256th, then 4 more


def test_renewals_do_not_push_claims_out_of_the_trimmed_history(pg: PostgresHarness) -> None:
    # Each renewal replaces the claim's earlier renewal row, and the trim counts rows, not ids.
    with pg.connect(pg.url() + "&retention=6") as store:  # the rows the history ends with
        held = [store.claim(f"j{i}", owner="w", ttl=30) for i in range(3)]
        for _ in range(90):
            held = store.renew_many(held)  # type: ignore[assignment]  # all current
            held[0] = store.renew(held[0])  # 360 rows: a trim
        assert [(e.job_id, e.op) for e in store.history()] == [
            ("j0", tenure.Op.CLAIM), ("j1", tenure.Op.CLAIM), ("j2", tenure.Op.CLAIM),
            ("j1", tenure.Op.RENEW), ("j2", tenure.Op.RENEW), ("j0", tenure.Op.RENEW)]


def test_writes_notify_only_while_a_watcher_is_registered(pg: PostgresHarness) -> None:
    with pg.connect() as store:
        backend: Any = store.backend
        with admin(pg.base_url) as listener:
            listener.execute(f'LISTEN "{backend.channel}"')
            store.submit("quiet")
            assert list(listener.notifies(timeout=0.3)) == []  # nobody watches: no NOTIFY, no commit lock
            stop = threading.Event()
            changes = store.watch(stop, interval=0.05)
            assert next(changes).job.job_id == "quiet"  # type: ignore[union-attr]  # registered by now
            store.submit("heard")
            assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == ["jheard"]
            stop.set()
            list(changes)  # the watch ends and deregisters
            store.submit("quiet-again")
            assert list(listener.notifies(timeout=0.3)) == []


def test_claim_next_reads_the_queue_index_in_order_even_with_stale_statistics(pg: PostgresHarness) -> None:
    # A queue that grew since the last ANALYZE: the planner believes it holds a few rows. It
    # must still read the partial index in order (LIMIT 1), not fetch and sort every pending row.
    with pg.connect() as store:
        store.submit_many([f"q{i:05d}" for i in range(5000)])
        backend: Any = store.backend
        with backend.pool.connection() as conn:
            plan = "\n".join(row[0] for row in conn.execute(
                "EXPLAIN " + backend.statements["CLAIM_NEXT"], {"owner": "w", "ttl": 30.0, "channel": ""}))
        assert "Index Scan using jobs_pending" in plan and "Bitmap" not in plan, plan


def test_a_statement_the_server_cancelled_is_unavailable_not_unknown(pg: PostgresHarness) -> None:
    # Another session holds the job's row; the server's statement_timeout cancels our claim and
    # rolls it back: certainly not applied, so not OutcomeUnknown.
    with pg.connect(pg.url() + "&timeout=1") as store:
        store.submit("j")
        backend: Any = store.backend
        with admin(pg.base_url) as blocker, blocker.transaction():
            blocker.execute(f"SELECT 1 FROM {backend.quoted}.jobs WHERE job_id = 'j' FOR UPDATE")
            with pytest.raises(tenure.BackendUnavailable) as info:
                store.claim("j", owner="a", ttl=30)
        assert not isinstance(info.value, tenure.OutcomeUnknown), info.value
        assert "statement timeout" in str(info.value)
        assert store.get("j").state is tenure.JobState.PENDING  # type: ignore[union-attr]


def test_a_claim_that_loses_every_race_is_outraced_and_writes_nothing(pg: PostgresHarness) -> None:
    # The claim statement finds no row to answer with while another session's first claim of
    # the job is not yet visible to it; on every attempt, here (injected), it gives up with
    # Outraced, the one error of a lost race on every backend: nothing was written.
    with pg.connect() as store:
        backend: Any = store.backend
        execute, claim = backend.execute, backend.plans.raw["CLAIM"].text
        backend.execute = lambda query: [] if query.text == claim else execute(query)
        with pytest.raises(tenure.Outraced):
            store.claim("j", owner="a", ttl=30)
        assert store.get("j") is None and store.history("j") == []


def test_a_serialization_failure_runs_again_then_gives_up_as_outraced(pg: PostgresHarness) -> None:
    # The server answers the renew statement with a real serialization failure (SQLSTATE
    # 40001, raised by a function in the store's schema) a set number of times: it was rolled
    # back, so the statement runs again, and a renew that fails every time is Outraced (nothing
    # was written), not a plain BackendUnavailable.
    with pg.connect() as store:
        backend: Any = store.backend
        s = backend.quoted
        with backend.pool.connection() as conn:
            conn.execute(f"CREATE SEQUENCE {s}.lost_races")
            conn.execute(f"""CREATE FUNCTION {s}.lose_a_race(times bigint) RETURNS void AS $$
                BEGIN IF nextval('{s}.lost_races') <= times THEN
                    RAISE EXCEPTION 'injected' USING ERRCODE = '40001'; END IF; END $$ LANGUAGE plpgsql""")
        store.submit("j")
        lease = store.claim("j", owner="a", ttl=30)
        execute, renew = backend.execute, backend.plans.raw["RENEW"].text

        def losing(times: int) -> Any:
            def run(query: Any) -> Any:
                if query.text == renew:
                    execute(dataclasses.replace(query, text=f"SELECT {s}.lose_a_race({times})", args=()))
                return execute(query)
            return run

        backend.execute = losing(2)  # two lost races, then the statement runs
        assert store.renew(lease, ttl=30).token == lease.token
        backend.execute = losing(10**6)
        with pytest.raises(tenure.Outraced):
            store.renew(lease, ttl=30)
        events = [e.op for e in store.history("j")]
        assert events == [tenure.Op.SUBMIT, tenure.Op.CLAIM, tenure.Op.RENEW], events


def test_the_watchs_reads_the_server_rolled_back_run_again(pg: PostgresHarness) -> None:
    # The watch's reads are the same plans: a read the server rolled back (a serialization
    # failure, as a hot standby's conflict with recovery answers) is thrown back into the plan,
    # which runs it again after the core's pause, and the watch goes on.
    with pg.connect() as store:
        store.submit("seen")
        backend: Any = store.backend
        execute, page = backend.execute, backend.plans.raw["JOBS_PAGE"].text
        lost = [2]

        def losing(query: Any) -> Any:
            if query.text == page and lost[0]:
                lost[0] -= 1
                raise contention.Collided  # what execute raises for SQLSTATE 40001
            return execute(query)

        backend.execute = losing
        stop = threading.Event()
        changes = store.watch(stop, interval=0.05)
        assert next(changes).job.job_id == "seen"  # type: ignore[union-attr]
        assert lost == [0]
        stop.set()
        list(changes)


def test_a_jobs_history_reads_its_index_under_a_generic_plan(pg: PostgresHarness) -> None:
    # psycopg prepares a statement run often and PostgreSQL may then plan it once for every
    # value: a job's history must still read the (job_id, id) index, not scan every event.
    with pg.connect() as store:
        store.submit_many([f"h{i:05d}" for i in range(3000)])
        backend: Any = store.backend
        text = backend.statements["JOB_HISTORY"]
        for name, number in (("job", 1), ("since", 2), ("limit", 3)):
            text = text.replace(f"%({name})s", f"${number}")
        with backend.pool.connection() as conn:
            conn.execute("ANALYZE " + backend.quoted + ".events")
            conn.execute(f"PREPARE job_history(text, float8, bigint) AS {text}")
            conn.execute("SET plan_cache_mode = force_generic_plan")
            try:
                plan = "\n".join(row[0] for row in conn.execute("EXPLAIN EXECUTE job_history('h00042', -1e300, 10)"))
            finally:
                conn.execute("DEALLOCATE job_history")
                conn.execute("RESET plan_cache_mode")
        assert "events_job" in plan and "Seq Scan" not in plan, plan
        assert [e.job_id for e in store.history("h00042")] == ["h00042"]


def test_claim_next_planned_on_a_small_table_reads_indexes_as_it_grows(pg: PostgresHarness) -> None:
    # A generic plan made while the table was small stays while it grows, until an ANALYZE;
    # here one made at 130 rows before the table's first ANALYZE (one made on statistics of
    # 130 rows scans them, as it should then; at 300 rows and more it reads the indexes):
    # claim_next's must reach overdue leases through jobs_leased's bound on the store's time
    # (a plan that read the whole index took 10 ms at 10,000 held leases) and update the row
    # it picked through the primary key (a plan that scanned the table took 1.4 ms more).
    with pg.connect() as store:
        backend: Any = store.backend
        with backend.pool.connection() as conn:  # no ANALYZE meanwhile: a plan on those statistics
            conn.execute("ALTER TABLE " + backend.quoted + ".jobs SET (autovacuum_enabled = false)")
        store.submit_many([f"held{i:03d}" for i in range(100)])
        store.claim_next_many(owner="w", ttl=600.0, n=100)
        store.submit_many([f"pending{i:02d}" for i in range(30)])
        found = statement(backend.statements["CLAIM_NEXT"])
        text = found.text.decode() if isinstance(found.text, bytes) else found.text
        types = {"owner": "text", "ttl": "float8", "channel": "text"}
        with backend.pool.connection() as conn:
            conn.execute(f"PREPARE claim_next_small({', '.join(types[n] for n in found.names)}) AS {text}")
            conn.execute("SET plan_cache_mode = force_generic_plan")
            try:
                args = ", ".join({"owner": "'w'", "ttl": "30", "channel": "''"}[n] for n in found.names)
                plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN EXECUTE claim_next_small({args})"))
            finally:
                conn.execute("DEALLOCATE claim_next_small")
                conn.execute("RESET plan_cache_mode")
                conn.rollback()
        leased = plan.split("jobs_leased", 1)[1].split("->", 1)[0]
        assert "Index Cond: (lease_until <=" in leased, plan
        assert "jobs_pkey" in plan and "Seq Scan on jobs" not in plan, plan


def test_statements_in_postgresqls_form_answer_as_psycopgs_own_conversion(pg: PostgresHarness) -> None:
    # The backend runs its statements through raw cursors, converted once (ops.statement): a
    # name used twice is one parameter, %% is a %, and the answer is psycopg's for the same text.
    text = "SELECT %(a)s::int + %(a)s::int, 'x%%y', %(b)s::text, %(a)s::float8 / 4"
    params = {"b": "b", "a": 3, "unused": object()}
    with pg.connect() as store:
        backend: Any = store.backend
        with backend.pool.connection() as conn:
            expected = conn.execute(text, params).fetchall()
        assert backend.execute(Query.of(text, params, write=False)) == expected == [(6, "x%y", "b", 0.75)]
    assert statement(text).names == ("a", "b")
    with pytest.raises(ValueError, match="placeholder"):
        statement("SELECT %s")
    with pytest.raises(ValueError, match="digit"):
        statement("SELECT %(a)s1")
