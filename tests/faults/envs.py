"""Where a fault run's store lives: the backend's harness (``tests/harness.py``) on servers of
its own, started for the run and closed after it.

A server that cannot start raises, and the caller decides whether that is a skip or, in CI, a
failure. The URL options are the fault suite's: short timeouts (a worker cut off gives up
within its lease), an audit and history long enough to check a whole run, and a retry
backoff short enough that a job failed without ``retry_in`` comes back within the run.
"""

from __future__ import annotations

from pathlib import Path

from tenure.core.lifecycle import Lifecycle
from tests.harness import Harness, SQLiteHarness

LIFECYCLE = Lifecycle(retry_base=0.05, retry_max=0.4)  # the checker must know the backoff
LIFE = f"&retry_base={LIFECYCLE.retry_base}&retry_max={LIFECYCLE.retry_max}"


def make(backend: str, workdir: Path) -> Harness:
    """``sqlite``, ``etcd``, ``etcd3`` (3-node cluster), ``zk``, ``zk3`` (3-node ensemble), ``postgres``."""
    workdir.mkdir(parents=True, exist_ok=True)
    harness = _make(backend, workdir)
    harness.workdir = workdir  # the runs are kept here
    return harness


def _make(backend: str, workdir: Path) -> Harness:
    size = 3 if backend.endswith("3") else 1
    if backend == "sqlite":
        # timeout: a worker stopped while it holds SQLite's write lock blocks the others this
        # long, then they see BackendUnavailable (unknown outcomes), as docs/protocol.md says.
        return SQLiteHarness(workdir, f"?timeout=1.5&retention=100000000{LIFE}")
    if backend == "postgres":
        from devservers.postgres import PostgresServer
        from tests.servers.postgres import PostgresHarness

        server = PostgresServer()  # its own directory in /tmp: the postgres user must reach it
        return PostgresHarness(server.url, f"&timeout=1&pool_size=4&retention=100000000{LIFE}", server=server)
    if backend.startswith("etcd"):
        from devservers.etcd import EtcdCluster
        from tests.servers.etcd import EtcdHarness

        # A short election timeout, so a paused leader is replaced well within a lease's TTL.
        timing = ("--heartbeat-interval", "25", "--election-timeout", "250") if size > 1 else ()
        return EtcdHarness(EtcdCluster(workdir / "etcd", size, extra=timing), f"?timeout=2{LIFE}", owned=True)
    if backend.startswith("zk"):
        from devservers.zookeeper import Ensemble, ZooKeeperServer
        from tests.servers.zookeeper import ZooKeeperHarness

        servers = Ensemble(workdir / "zk", size) if size > 1 else ZooKeeperServer(workdir / "zk")
        return ZooKeeperHarness(servers, f"?timeout=2&session_timeout=4&retention=1000000{LIFE}", owned=True)
    raise ValueError(f"unknown backend {backend!r}")
