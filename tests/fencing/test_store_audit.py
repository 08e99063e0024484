"""A fence given the lease store reports each refusal to the store's audit, where
``tenure rejections`` and the dashboard look, not only to the destination's own table."""

from __future__ import annotations

import re
import sqlite3
import uuid
from pathlib import Path

import pytest

import tenure
from tenure import Op, RejectionKind
from tenure.fencing import FenceRejection, SQLFence, StaleToken, fenced
from tests.fencing.databases import Database


def superseded(store: tenure.Store) -> tuple[tenure.Lease, tenure.Lease]:
    """A's lease, ended by an operator, and B's, which superseded it."""
    a = store.claim("job-42", owner="worker-a", ttl=60.0)
    store.force_expire("job-42", token=a.token)
    return a, store.claim("job-42", owner="worker-b", ttl=60.0)


def test_a_fence_given_the_store_reports_a_stale_write_to_its_audit(db: Database) -> None:
    with tenure.connect(f"memory://audit-{uuid.uuid4().hex}") as store:
        a, b = superseded(store)
        conn = db.connect()
        fence = SQLFence(conn, store=store)
        with fence.fenced("ledger/42", b):
            pass
        with pytest.raises(StaleToken), fence.fenced("ledger/42", a):
            pass
        with pytest.raises(StaleToken), fenced(conn, "ledger/42", a, store=store):  # the one-call form too
            pass
        assert len(fence.rejections()) == 2  # the destination keeps its own record
        conn.close()
        audited = store.rejections()
        assert [(r.kind, r.op, r.owner, r.token, r.current_token, r.resource) for r in audited] == [
            (RejectionKind.DESTINATION, Op.EFFECT, "worker-a", a.token, b.token, "ledger/42")] * 2


def test_a_hook_given_with_the_store_is_called_instead() -> None:
    with tenure.connect(f"memory://hook-{uuid.uuid4().hex}") as store:
        a, b = superseded(store)
        heard: list[FenceRejection] = []
        conn = sqlite3.connect(":memory:")
        fence = SQLFence(conn, store=store, on_reject=heard.append)
        with fence.fenced("ledger/42", b):
            pass
        with pytest.raises(StaleToken), fence.fenced("ledger/42", a):
            pass
        assert [(r.owner, r.token) for r in heard] == [("worker-a", a.token)]
        assert store.rejections() == []  # reported once, where the caller said
        conn.close()


def test_the_store_must_be_a_store() -> None:
    conn = sqlite3.connect(":memory:")
    with pytest.raises(tenure.InvalidArgument, match=r"store must be a tenure\.Store, not str"):
        SQLFence(conn, store="sqlite:///jobs.db")  # type: ignore[arg-type]
    conn.close()


def test_the_readme_worker_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    found = re.search(r"## In a program\n+```python\n(.*?)```", readme, re.S)
    assert found, "the README's worker example is missing"
    monkeypatch.chdir(tmp_path)  # it opens jobs.db and ledger.db in the working directory
    with sqlite3.connect("ledger.db") as conn:
        conn.execute("CREATE TABLE lines (chunk TEXT, token INTEGER)")
    conn.close()
    exec(compile(found.group(1), "README.md", "exec"), {"work": lambda: ["line 1", "line 2"]})
    with sqlite3.connect("ledger.db") as conn:
        assert conn.execute("SELECT chunk, token FROM lines").fetchall() == [("line 1", 1), ("line 2", 1)]
    conn.close()
