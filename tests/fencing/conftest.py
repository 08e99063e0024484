"""Each fencing test runs on a new SQLite file and on a new schema of the local PostgreSQL.

The PostgreSQL schema is dropped after the test: other test runs share the database.
In CI (``CI=true``) an unreachable PostgreSQL fails the test instead of skipping it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from devservers.availability import in_ci
from tests.fencing.databases import PG_CONNINFO, Database

KINDS = ("sqlite", "postgres")


def _unavailable(message: str) -> NoReturn:
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def _admin() -> Any:
    try:
        import psycopg
    except ImportError:
        _unavailable("psycopg is not installed: pip install 'tenure[postgres]'")
    try:
        return psycopg.connect(PG_CONNINFO, autocommit=True)
    except psycopg.OperationalError as exc:
        _unavailable(f"PostgreSQL at 127.0.0.1:5432 is unreachable: {exc}")


@pytest.fixture(params=KINDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        yield Database("sqlite", str(tmp_path / "destination.db"))
        return
    schema = f"tenure_fencing_{uuid.uuid4().hex[:16]}"
    with _admin() as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        yield Database("postgres", schema)
    finally:
        with _admin() as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")
