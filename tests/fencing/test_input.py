"""Bad input gives InvalidArgument naming the problem, and nothing is written."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import tenure
from tenure.fencing import IdempotencyKeys, SQLFence, fencing_headers, read_headers
from tests.fencing.databases import Database

BAD_RESOURCES = [("", "resource must be 1 to"), (42, "resource must be a str"),
                 (None, "resource must be a str"), ("a\x00b", "control character"),
                 ("r" * 257, "resource must be 1 to 256")]
BAD_TOKENS = [(-1, "positive"), (0, "positive"), ("7", "token must be an int"), (7.0, "token must be an int"),
              (True, "token must be an int"), (2**63, "at most"), (None, "token must be an int")]


@pytest.fixture
def fence(db: Database) -> Any:
    conn = db.connect()
    yield SQLFence(conn)
    conn.close()


def _nothing_written(db: Database) -> None:
    assert db.rows("SELECT COUNT(*) FROM tenure_fence") == [(0,)]
    assert db.rows("SELECT COUNT(*) FROM tenure_fence_rejections") == [(0,)]


@pytest.mark.parametrize(("resource", "message"), BAD_RESOURCES)
def test_bad_resource_names(db: Database, fence: SQLFence, resource: Any, message: str) -> None:
    with pytest.raises(tenure.InvalidArgument, match=message):
        fence.admit(resource, 1, job_id="job")
    with pytest.raises(tenure.InvalidArgument, match=message), fence.fenced(resource, 1, job_id="job"):
        pytest.fail("the body of a refused fenced() must not run")
    _nothing_written(db)


@pytest.mark.parametrize(("token", "message"), BAD_TOKENS)
def test_bad_tokens(db: Database, fence: SQLFence, token: Any, message: str) -> None:
    with pytest.raises(tenure.InvalidArgument, match=message):
        fence.admit("doc", token, job_id="job")
    with pytest.raises(tenure.InvalidArgument, match=message):
        IdempotencyKeys(fence.conn).apply_once("e", token, lambda cur: None, job_id="job")
    _nothing_written(db)
    assert db.rows("SELECT COUNT(*) FROM tenure_effects") == [(0,)]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "needs job_id"),
    ({"job_id": ""}, "job id must be 1 to"),
    ({"job_id": b"job"}, "job id must be a str"),
    ({"job_id": "job", "owner": 5}, "owner must be a str"),
    ({"job_id": "job", "shared": "yes"}, "shared must be a bool"),
])
def test_bad_job_owner_and_sharing(db: Database, fence: SQLFence, kwargs: Any, message: str) -> None:
    with pytest.raises(tenure.InvalidArgument, match=message):
        fence.admit("doc", 1, **kwargs)
    _nothing_written(db)


def test_a_lease_carries_its_own_job_and_owner(db: Database, fence: SQLFence) -> None:
    lease = tenure.Lease(job_id="job", owner="w", token=3, expires_at=0.0, ttl=1.0)
    with pytest.raises(tenure.InvalidArgument, match="only with an int token"):
        fence.admit("doc", lease, job_id="other")
    _nothing_written(db)


def test_a_lost_held_lease_is_refused_before_the_fence(db: Database, fence: SQLFence) -> None:
    clock = tenure.ManualClock()
    with tenure.connect(f"memory://lost-{uuid.uuid4().hex}", clock=clock) as store:
        store.submit("job")
        held = store.hold("job", owner="w", ttl=10.0)
        clock.advance(11)  # past the safe local deadline with no renewal
        with pytest.raises(tenure.LeaseLost), fence.fenced("doc", held):
            pytest.fail("no effect may be produced under a lost lease")
    _nothing_written(db)


def test_bad_fence_and_key_arguments(db: Database, fence: SQLFence) -> None:
    with pytest.raises(tenure.InvalidArgument, match="DB-API connection"):
        SQLFence(object())  # type: ignore[arg-type]
    with pytest.raises(tenure.InvalidArgument, match="plain SQL identifier"):
        SQLFence(fence.conn, table_prefix="fence; DROP TABLE doc")
    with pytest.raises(tenure.InvalidArgument, match="on_reject must be callable"):
        SQLFence(fence.conn, on_reject="store")  # type: ignore[arg-type]
    keys = IdempotencyKeys(fence.conn)
    with pytest.raises(tenure.InvalidArgument, match="effect id must be 1 to"):
        keys.apply_once("", 1, lambda cur: None, job_id="job")
    with pytest.raises(tenure.InvalidArgument, match="effect must be callable"):
        keys.apply_once("e", 1, "INSERT ...", job_id="job")  # type: ignore[arg-type]
    _nothing_written(db)
    assert db.rows("SELECT COUNT(*) FROM tenure_effects") == [(0,)]


@pytest.mark.parametrize(("headers", "message"), [
    ({"Tenure-Job-Id": "j", "Tenure-Fencing-Token": "abc", "Tenure-Owner": "w"}, "decimal integer"),
    ({"Tenure-Job-Id": "j", "Tenure-Fencing-Token": "-3", "Tenure-Owner": "w"}, "decimal integer"),
    ({"Tenure-Job-Id": "j", "Tenure-Fencing-Token": "0", "Tenure-Owner": "w"}, "positive"),
    ({"Tenure-Job-Id": "j", "Tenure-Fencing-Token": "3"}, "missing Tenure-Owner"),
    ({"Tenure-Job-Id": "%ff", "Tenure-Fencing-Token": "3", "Tenure-Owner": "w"}, "UTF-8"),
    ({"Tenure-Job-Id": "", "Tenure-Fencing-Token": "3", "Tenure-Owner": "w"}, "job id must be 1 to"),
])
def test_bad_fencing_headers(headers: dict[str, str], message: str) -> None:
    with pytest.raises(tenure.InvalidArgument, match=message):
        read_headers(headers)


def test_headers_need_a_lease() -> None:
    with pytest.raises(tenure.InvalidArgument, match=r"expected a tenure\.Lease"):
        fencing_headers(7)  # type: ignore[arg-type]
