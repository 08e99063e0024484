"""The PostgreSQL harness for tests (a schema per store, on the machine's server or a private
one the fault suite may kill) and its fixtures."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import tenure
from devservers.control import ServerProcess
from devservers.postgres import MACHINE_URL, PostgresServer, admin, cannot_start, running
from devservers.versions import POSTGRES, is_machine
from tenure.testing.kit import Tampering
from tests.faults import catalog
from tests.harness import ServerHarness, tampered_row


class PostgresHarness(ServerHarness):
    """A schema per store: on the machine's server (conformance), or on a private server the
    fault suite may kill and pause (``server``, owned by the harness)."""

    name = "postgres"
    short_ttl = 0.5

    def __init__(self, base_url: str, query: str = "", server: PostgresServer | None = None) -> None:
        super().__init__(query)  # "&option=value...": the URL's first option is the schema
        self.base_url = base_url
        self.server = server
        self.schemas: list[str] = []

    def url(self) -> str:
        self.prefix = schema = f"t_{uuid.uuid4().hex[:12]}"
        self.schemas.append(schema)
        return f"{self.base_url}?schema={schema}{self.query}"

    def store_url(self, hosts: str, prefix: str) -> str:
        return f"postgresql://postgres@{hosts}/postgres?schema={prefix}{self.query}"

    def nodes(self) -> list[ServerProcess]:
        return [] if self.server is None else [self.server]

    def leader(self) -> ServerProcess:
        assert self.server is not None, "the machine's server is not ours to fault"
        return self.server

    def endpoints(self) -> list[tuple[str, int]]:
        assert self.server is not None, "the machine's server is not ours to fault"
        return [("127.0.0.1", self.server.port)]

    @property
    def faults(self) -> tuple[str, ...]:
        return (*super().faults, catalog.BY_NAME["leader-pause"].name)  # one server: the primary is its "leader"

    def start(self) -> None:
        if self.server is not None:
            self.server.start(60)

    def close(self) -> None:
        super().close()
        if self.server is not None:
            self.server.close()

    def corrupt(self, store: tenure.Store, job_id: str) -> None:
        backend: Any = store.backend
        with admin(self.base_url) as conn:
            conn.execute(f"UPDATE {backend.quoted}.jobs SET state = 'bogus', token = -1 WHERE job_id = %s", (job_id,))

    def plant(self, store: tenure.Store, job_id: str, tampering: Tampering) -> bool:
        if tampering in (Tampering.UNREADABLE, Tampering.BINARY_ID, Tampering.UNDECODABLE_ID):  # text is UTF-8
            return super().plant(store, job_id, tampering)
        store.submit(job_id)
        backend: Any = store.backend
        change, params = tampered_row(tampering, "%s")
        with admin(self.base_url) as conn:
            conn.execute(f"UPDATE {backend.quoted}.jobs SET {change} WHERE job_id = %s", (*params, job_id))
        return True

    def drop(self) -> None:
        if not self.schemas:
            return
        with admin(self.base_url) as conn:
            for schema in self.schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        self.schemas.clear()


@pytest.fixture(scope="session")
def postgres_session_harness() -> Iterator[PostgresHarness]:
    if not is_machine(POSTGRES):  # another version than the machine's: a private server of it
        with running() as server:
            harness = PostgresHarness(server.url)
            yield harness
            harness.drop()
        return
    try:
        import psycopg_pool  # noqa: F401 - the postgres extra, which the backend needs

        with admin(MACHINE_URL):
            pass
    except Exception as exc:  # a missing extra, the driver's errors, a server that is not there
        cannot_start(f"{MACHINE_URL}: {exc!r}")
    harness = PostgresHarness(MACHINE_URL)
    yield harness
    harness.drop()


@pytest.fixture
def postgres_harness(postgres_session_harness: PostgresHarness) -> PostgresHarness:
    return postgres_session_harness


@pytest.fixture(scope="session")
def postgres_private() -> Iterator[PostgresServer]:
    with running() as server:
        yield server
