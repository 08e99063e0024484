"""``create=false`` opens only a store that exists (issue 26 item 12): on SQLite, the machine's
PostgreSQL and ZooKeeper, a store that is not there is StoreNotFound and nothing is created or
written; the CLI's read-only commands open stores that way and exit 66."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

import tenure
import tenure.aio
from devservers.postgres import admin
from tenure.cli import main
from tests.servers.postgres import PostgresHarness
from tests.servers.zookeeper import ZooKeeperHarness

READ_ONLY = [["ls"], ["get", "j"], ["history"], ["rejections"], ["watch", "--count", "1"], ["health"],
             ["metrics", "--port", "0"], ["dashboard", "--port", "0"]]


def _foreign(path: Path) -> bytes:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE other (a)")
    db.close()
    return path.read_bytes()


@pytest.mark.parametrize("kind", ["missing", "empty", "foreign"])
def test_create_false_opens_no_sqlite_file_that_holds_no_store(tmp_path: Path, kind: str) -> None:
    db = tmp_path / "typo.db"
    before = {"missing": None, "empty": b"", "foreign": None}[kind]
    if kind == "empty":
        db.touch()
    elif kind == "foreign":
        before = _foreign(db)
    with pytest.raises(tenure.StoreNotFound, match=f"no such store: {db}"):
        tenure.connect(f"sqlite:///{db}?create=false")
    assert (db.read_bytes() if db.exists() else None) == before
    assert [p.name for p in tmp_path.iterdir()] == ([] if kind == "missing" else ["typo.db"])


def test_create_false_opens_an_existing_sqlite_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    with tenure.connect(url) as store:
        store.submit("a")
    with tenure.connect(url, create=False) as store:
        assert [job.job_id for job in store.jobs()] == ["a"]


def _schema_exists(harness: PostgresHarness) -> bool:
    with admin(harness.base_url) as conn:
        row = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (harness.prefix,)).fetchone()
    return bool(row[0])


def test_create_false_creates_no_postgres_schema(postgres_harness: PostgresHarness) -> None:
    url = postgres_harness.url()
    with pytest.raises(tenure.StoreNotFound, match=f"no such store: schema '{postgres_harness.prefix}'"):
        tenure.connect(url, create=False)

    async def aio() -> None:
        with pytest.raises(tenure.StoreNotFound):
            await tenure.aio.connect(f"{url}&create=false")

    asyncio.run(aio())
    assert not _schema_exists(postgres_harness)
    with tenure.connect(url) as store:
        store.submit("a")
    with tenure.connect(f"{url}&create=false") as store:
        assert [job.job_id for job in store.jobs()] == ["a"]


@pytest.mark.parametrize("words", READ_ONLY, ids=lambda words: words[0])
def test_a_read_only_command_on_an_empty_sqlite_file_writes_nothing(
        tmp_path: Path, words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    assert main(["--url", f"sqlite:///{db}", *words]) == 66
    assert f"no such store: {db} holds no tenure store" in capsys.readouterr().err
    assert db.read_bytes() == b"" and [p.name for p in tmp_path.iterdir()] == ["empty.db"]


@pytest.mark.parametrize("words", [["ls"], ["get", "j"], ["health"], ["metrics", "--port", "0"]],
                         ids=lambda words: words[0])
def test_a_read_only_command_on_a_mistyped_schema_creates_none(
        postgres_harness: PostgresHarness, words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    url = postgres_harness.url()
    assert main(["--url", url, *words]) == 66
    assert f"no such store: schema '{postgres_harness.prefix}' has no tenure tables" in capsys.readouterr().err
    assert not _schema_exists(postgres_harness)


def test_create_false_creates_no_zookeeper_root(zk_harness: ZooKeeperHarness,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from kazoo.client import KazooClient

    url = zk_harness.url()
    root = f"/{zk_harness.prefix}"
    with pytest.raises(tenure.StoreNotFound, match=f"no such store: {root} has no tenure store"):
        tenure.connect(url, create=False)
    assert main(["--url", url, "ls"]) == 66
    assert f"no such store: {root}" in capsys.readouterr().err
    client = KazooClient(hosts=",".join(f"{h}:{p}" for h, p in zk_harness.endpoints()))
    client.start(timeout=10)
    try:
        assert client.exists(root) is None
    finally:
        client.stop()
        client.close()
    with tenure.connect(url) as store:
        store.submit("a")
    with tenure.connect(url, create=False) as store:
        assert [job.job_id for job in store.jobs()] == ["a"]


def test_no_such_store_shows_no_password(postgres_harness: PostgresHarness,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    url = postgres_harness.url().replace("postgres@", "postgres:Pa55-in-url@", 1)  # trust auth ignores it
    assert "Pa55-in-url" in url
    assert main(["--url", url, "ls"]) == 66
    captured = capsys.readouterr()
    assert "no such store" in captured.err and "Pa55-in-url" not in captured.err + captured.out
