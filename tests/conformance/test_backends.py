"""tenure's own backends run the shipped conformance suite, exactly as a third party's would.

Each class maps the suite's hooks to the backend's test harness (``tests/harness.py`` and
``tests/servers/fixtures.py``). ``TENURE_TEST_BACKENDS=memory,sqlite`` limits the run to some backends.
Every backend runs the suite a second time through ``tenure.aio`` (an event loop behind the
sync shape, ``tests/aio_sync.py``); ``TENURE_TEST_FLAVOURS=sync`` (or ``aio``) keeps one flavour.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

import tenure
from devservers.etcd import start_or_fail
from devservers.zookeeper import running
from tenure.testing import ConformanceSuite, Restartable
from tenure.testing.kit import CorruptHook, ExpireHook, PlantHook
from tests.aio_sync import SyncStore
from tests.conftest import ALL_BACKENDS, BACKENDS
from tests.harness import Harness, MemoryHarness, SQLiteHarness
from tests.servers.etcd import EtcdHarness
from tests.servers.postgres import PostgresHarness
from tests.servers.zookeeper import ZooKeeperHarness


class HarnessSuite(ConformanceSuite):
    """The suite's hooks from a harness: the ``<backend>_harness`` fixture of ``tests/servers/fixtures.py``."""

    backend: ClassVar[str] = ""

    @pytest.fixture
    def harness(self, request: pytest.FixtureRequest) -> Harness:
        if self.backend not in BACKENDS:
            pytest.skip(f"{self.backend} not in TENURE_TEST_BACKENDS")
        found: Harness = request.getfixturevalue(f"{self.backend}_harness")
        return found

    @pytest.fixture
    def store_url(self, harness: Harness) -> str:
        return harness.url()

    @pytest.fixture
    def connect_options(self, harness: Harness) -> dict[str, Any]:
        return harness.options()

    @pytest.fixture
    def expire_lease(self, harness: Harness) -> ExpireHook:
        return harness.expire

    @pytest.fixture
    def corrupt_record(self, harness: Harness) -> CorruptHook | None:
        return harness.corrupt

    @pytest.fixture
    def plant_raw_record(self, harness: Harness) -> PlantHook | None:
        return harness.plant

    @pytest.fixture
    def unreachable_url(self, harness: Harness, store_url: str) -> str | None:
        return harness.unreachable(store_url)  # None for memory and SQLite: no server to miss


class TestMemory(HarnessSuite):
    backend = "memory"
    ttl, short_ttl = MemoryHarness.ttl, MemoryHarness.short_ttl

    @pytest.fixture
    def corrupt_record(self) -> CorruptHook | None:
        return None  # the memory store holds Python objects: nothing can corrupt them


class TestSQLite(HarnessSuite):
    backend = "sqlite"  # no server to restart: reopening the file is test_store_reopened_...
    ttl, short_ttl = SQLiteHarness.ttl, SQLiteHarness.short_ttl


class TestEtcd(HarnessSuite):
    backend = "etcd"
    ttl, short_ttl = EtcdHarness.ttl, EtcdHarness.short_ttl

    @pytest.fixture
    def restartable_store(self, tmp_path: Path) -> Iterator[Restartable]:
        cluster = start_or_fail(tmp_path / "etcd", 1)  # the test's own: a crash disturbs nobody else
        yield Restartable(f"etcd://{cluster.endpoints}/k9?timeout=2", cluster.nodes[0].restart)
        cluster.close()


class TestZooKeeper(HarnessSuite):
    backend = "zk"
    ttl, short_ttl = ZooKeeperHarness.ttl, ZooKeeperHarness.short_ttl

    @pytest.fixture
    def restartable_store(self, tmp_path: Path) -> Iterator[Restartable]:
        with running(tmp_path / "zk") as server:
            yield Restartable(f"zk://{server.hosts}/restart", server.restart)


class TestPostgres(HarnessSuite):
    backend = "postgres"
    ttl, short_ttl = PostgresHarness.ttl, PostgresHarness.short_ttl

    @pytest.fixture
    def restartable_store(self, postgres_private: Any) -> Restartable:
        def restart() -> None:
            postgres_private.kill()  # SIGKILL: no shutdown checkpoint, recovery from the WAL
            postgres_private.start()

        return Restartable(f"{postgres_private.url}?schema=crash_{uuid.uuid4().hex[:8]}&timeout=3", restart)


FLAVOURS = [f for f in os.environ.get("TENURE_TEST_FLAVOURS", "sync,aio").split(",") if f]
# Cases about sync-only companions of the store, not about the store's contract.
SYNC_ONLY = {
    "test_the_store_proves_the_tokens_it_issued_and_no_other": "fencing.Proof takes a sync tenure.Store",
}


class AioFlavour:
    """The same cases with every store opened through ``tenure.aio.connect``."""

    @pytest.fixture(autouse=True)
    def _aio_cases_only(self, request: pytest.FixtureRequest) -> None:
        if "aio" not in FLAVOURS:
            pytest.skip("TENURE_TEST_FLAVOURS leaves out aio")
        reason = SYNC_ONLY.get(request.function.__name__)
        if reason:
            pytest.skip(reason)

    @pytest.fixture
    def open_store(self) -> Callable[..., tenure.Store]:
        def opened(url: str, **options: object) -> tenure.Store:
            store: tenure.Store = SyncStore.open(url, **options)  # type: ignore[assignment]
            return store

        return opened


class TestMemoryAio(AioFlavour, TestMemory):
    pass


class TestSQLiteAio(AioFlavour, TestSQLite):
    pass


class TestPostgresAio(AioFlavour, TestPostgres):
    pass


class TestZooKeeperAio(AioFlavour, TestZooKeeper):
    pass


class TestEtcdAio(AioFlavour, TestEtcd):
    pass


def test_every_backend_has_a_suite() -> None:
    assert sorted(cls.backend for cls in HarnessSuite.__subclasses__()) == sorted(ALL_BACKENDS)
