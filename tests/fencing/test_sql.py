"""The SQL fence on real SQLite and PostgreSQL: admission, rejection records, transactions."""

from __future__ import annotations

from typing import Any

import pytest

import tenure
from tenure.fencing import FenceRejection, SQLFence, fenced
from tenure.fencing.dbapi import Driver
from tests.fencing.databases import Database

DOC = "CREATE TABLE doc (id INTEGER PRIMARY KEY, body TEXT NOT NULL, token BIGINT NOT NULL)"
WRITE = "INSERT INTO doc (id, body, token) VALUES (1, ?, ?) ON CONFLICT (id) DO UPDATE SET body = excluded.body, token = excluded.token"  # noqa: E501


@pytest.fixture
def conn(db: Database) -> Any:
    db.execute(DOC)
    c = db.connect()
    yield c
    c.close()


def _write(db: Database, fence: SQLFence, body: str, token: int, job_id: str = "job") -> None:
    with fence.fenced("doc/1", token, job_id=job_id, owner="w") as cur:
        cur.execute(db.q(WRITE), (body, token))


def test_equal_and_higher_tokens_are_admitted_lower_ones_rejected(db: Database, conn: Any) -> None:
    fence = SQLFence(conn)
    assert fence.admit("doc/1", 7, job_id="job") == 7
    conn.commit()
    assert fence.admit("doc/1", 7, job_id="job") == 7  # the same holder writing again
    assert fence.admit("doc/1", 9, job_id="job") == 9
    conn.commit()
    with pytest.raises(tenure.StaleToken) as caught:
        fence.admit("doc/1", 8, job_id="job", owner="late")
    assert (caught.value.resource, caught.value.token, caught.value.highest) == ("doc/1", 8, 9)
    assert fence.highest("doc/1", job_id="job") == 9
    [rejected] = fence.rejections()
    assert (rejected.job_id, rejected.owner, rejected.token, rejected.highest) == ("job", "late", 8, 9)


def test_a_stale_writer_never_writes_and_a_current_one_writes_with_its_check(db: Database, conn: Any) -> None:
    fence = SQLFence(conn)
    _write(db, fence, "eight", 8)
    body_ran = False
    with pytest.raises(tenure.StaleToken), fence.fenced("doc/1", 7, job_id="job") as cur:
        body_ran = True
        cur.execute(db.q(WRITE), ("seven", 7))
    assert not body_ran
    assert db.rows("SELECT body, token FROM doc") == [("eight", 8)]


def test_an_error_in_the_body_rolls_back_the_write_and_the_admission(db: Database, conn: Any) -> None:
    fence = SQLFence(conn)
    _write(db, fence, "five", 5)
    with pytest.raises(RuntimeError), fence.fenced("doc/1", 6, job_id="job") as cur:
        cur.execute(db.q(WRITE), ("six", 6))
        raise RuntimeError("the caller failed half-way")
    assert db.rows("SELECT body, token FROM doc") == [("five", 5)]
    assert fence.highest("doc/1", job_id="job") == 5  # token 6 was never admitted for good


def test_admit_rolls_back_the_callers_transaction_when_stale(db: Database, conn: Any) -> None:
    fence = SQLFence(conn)
    _write(db, fence, "nine", 9)
    conn.cursor().execute(db.q(WRITE), ("written before the check", 3))
    with pytest.raises(tenure.StaleToken):
        fence.admit("doc/1", 3, job_id="job")
    conn.commit()
    assert db.rows("SELECT body FROM doc") == [("nine",)]
    assert [r.token for r in fence.rejections()] == [3]  # the rejection itself was kept


def test_fences_are_per_job_unless_shared(db: Database, conn: Any) -> None:
    fence = SQLFence(conn)
    _write(db, fence, "x", 50, job_id="job-x")
    _write(db, fence, "y", 3, job_id="job-y")  # another job's token sequence: not comparable
    with fence.fenced("doc/1", 50, job_id="job-x", shared=True):
        pass
    with pytest.raises(tenure.StaleToken), fence.fenced("doc/1", 3, job_id="job-y", shared=True):
        pass
    assert fence.highest("doc/1", shared=True) == 50
    assert fence.highest("doc/1", job_id="job-y") == 3
    assert fence.highest("doc/2", job_id="job-y") is None
    assert [r.shared for r in fence.rejections()] == [True]


def test_on_reject_hears_each_rejection_and_a_failing_hook_changes_nothing(db: Database, conn: Any) -> None:
    heard: list[FenceRejection] = []

    def hook(rejection: FenceRejection) -> None:
        heard.append(rejection)
        raise tenure.BackendUnavailable("the lease store is down")

    fence = SQLFence(conn, on_reject=hook)
    _write(db, fence, "two", 2)
    with pytest.raises(tenure.StaleToken):
        _write(db, fence, "one", 1)
    assert [(r.resource, r.token, r.highest) for r in heard] == [("doc/1", 1, 2)]
    assert len(fence.rejections()) == 1


def test_the_one_call_helper_creates_tables_and_fences(db: Database, conn: Any) -> None:
    with fenced(conn, "doc/1", 4, job_id="job", table_prefix="other_fence") as cur:
        cur.execute(db.q(WRITE), ("four", 4))
    with pytest.raises(tenure.StaleToken), fenced(conn, "doc/1", 2, job_id="job", table_prefix="other_fence"):
        pass
    assert db.rows("SELECT token FROM other_fence") == [(4,)]
    assert db.rows("SELECT token, highest FROM other_fence_rejections") == [(2, 4)]


def test_connections_that_cannot_keep_check_and_writes_together_are_refused(db: Database, conn: Any) -> None:
    SQLFence(conn)  # tables exist
    auto = db.connect(autocommit=True)
    try:
        with pytest.raises(tenure.InvalidArgument, match="autocommit"):
            SQLFence(auto)
    finally:
        auto.close()
    fence = SQLFence(conn)
    conn.cursor().execute(db.q(WRITE), ("uncommitted", 1))
    with pytest.raises(tenure.InvalidArgument, match="open transaction"):
        fence.fenced("doc/1", 1, job_id="job").__enter__()
    conn.rollback()
    assert db.rows("SELECT COUNT(*) FROM tenure_fence") == [(0,)]


def test_driver_errors_become_backend_unavailable_with_the_cause(db: Database, conn: Any) -> None:
    fence = SQLFence(conn, table_prefix="never_created", create=False)
    with pytest.raises(tenure.BackendUnavailable) as caught:
        fence.admit("doc/1", 1, job_id="job")
    assert isinstance(caught.value.__cause__, Driver(conn).error)


@pytest.mark.parametrize(("style", "text", "params"), [
    ("qmark", "a = ? AND b = ?", (1, 2)),
    ("format", "a = %s AND b = %s", (1, 2)),
    ("pyformat", "a = %(p0)s AND b = %(p1)s", {"p0": 1, "p1": 2}),
    ("numeric", "a = :1 AND b = :2", (1, 2)),
    ("named", "a = :p0 AND b = :p1", {"p0": 1, "p1": 2}),
])
def test_statements_are_rewritten_once_for_each_paramstyle(style: str, text: str, params: object) -> None:
    from tenure.fencing.dbapi import _Statement

    statement = _Statement("a = ? AND b = ?", style)
    assert (statement.text, statement.params((1, 2))) == (text, params)
