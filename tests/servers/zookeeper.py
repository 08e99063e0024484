"""The ZooKeeper harness for tests and its fixtures: the shared standalone server
(``zk_server``), private servers, an ensemble, a TLS server; ``expire_session``."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tenure
from devservers.control import ServerProcess
from devservers.versions import ZOOKEEPER, chosen
from devservers.zookeeper import Ensemble, ZooKeeperServer, cannot_start, running
from tenure.backends.zookeeper import layout as zl
from tenure.core.records import JobRecord
from tenure.testing.kit import Tampering
from tests.harness import ServerHarness, undecodable_name


class ZooKeeperHarness(ServerHarness):
    name = scheme = "zk"
    ttl = 10.0
    short_ttl = 0.3

    def __init__(self, servers: ZooKeeperServer | Ensemble, query: str = "", owned: bool = False) -> None:
        super().__init__(query)
        self.ensemble = servers if isinstance(servers, Ensemble) else None
        self.servers = servers.servers if isinstance(servers, Ensemble) else [servers]
        self.owned = owned  # started and closed by the harness (the fault suite's)

    def nodes(self) -> list[ServerProcess]:
        return list(self.servers)

    def leader(self) -> ServerProcess:
        return self.servers[0] if self.ensemble is None else self.ensemble.leader()

    def endpoints(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", s.port) for s in self.servers]

    def start(self) -> None:
        if not self.owned:
            return
        if self.ensemble is not None:
            self.ensemble.start()
        else:
            self.servers[0].start(60)

    def close(self) -> None:
        super().close()
        if self.owned:
            for s in self.servers:
                s.kill()

    def corrupt(self, store: tenure.Store, job_id: str) -> None:
        backend = store.backend
        backend.client.set(backend.layout.job(job_id), b"\x00not json")  # type: ignore[attr-defined]

    def plant(self, store: tenure.Store, job_id: str, tampering: Tampering) -> bool:
        if tampering is not Tampering.UNDECODABLE_ID:
            return super().plant(store, job_id, tampering)
        backend: Any = store.backend  # a job znode only: no index entry names it
        record = JobRecord(job_id, tenure.JobState.PENDING, submitted_at=store.now())
        backend.client.create(f"{backend.layout.jobs}/{undecodable_name(job_id)}", zl.dump_record(record, 0))
        return True

    def set_token(self, store: tenure.Store, job_id: str, token: int) -> bool:
        backend: Any = store.backend
        path = backend.layout.job(job_id)
        record = json.loads(backend.client.get(path)[0])
        backend.client.set(path, json.dumps({**record, "token": token}).encode())
        return True


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    jar = chosen(ZOOKEEPER) / "zookeeper.jar"
    if shutil.which("java") is None or not jar.exists():
        cannot_start(f"java or {jar} missing; run scripts/setup.sh (scripts/servers.sh for another version)")
    with running(tmp_path_factory.mktemp("zk")) as server:
        yield server


@pytest.fixture
def zk_harness(zk_server: ZooKeeperServer) -> ZooKeeperHarness:
    return ZooKeeperHarness(zk_server)


@pytest.fixture
def zk_private(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A standalone server of the test's own, for tests that pause, kill or restart it."""
    with running(tmp_path / "zk") as server:
        yield server


@pytest.fixture
def zk_ensemble(tmp_path: Path) -> Iterator[Ensemble]:
    ensemble = Ensemble(tmp_path)
    try:
        ensemble.start()
        yield ensemble
    finally:
        ensemble.close()


def expire_session(store: tenure.Store) -> None:
    """Make the server expire the store's session, as kazoo's test harness does: a second
    client takes the session over by id and password, then closes it."""
    from kazoo.client import KazooClient

    client = store.backend.client  # type: ignore[attr-defined]
    config = store.backend.config  # type: ignore[attr-defined]
    thief = KazooClient(hosts=config.hosts, client_id=client.client_id, timeout=config.session_timeout)
    thief.start(timeout=10)
    thief.stop()
    thief.close()


@pytest.fixture
def zk_tls(tmp_path: Path) -> Iterator[tuple[ZooKeeperServer, Path]]:
    """A standalone server with a TLS port; yields it and its certificate."""
    server = ZooKeeperServer(tmp_path / "zk")
    server.enable_tls(tmp_path)
    try:
        server.start()
        yield server, tmp_path / "cert.pem"
    finally:
        server.kill()
