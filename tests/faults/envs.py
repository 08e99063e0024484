"""Where a fault run's store lives: the backend's harness (``tests/harness.py``) on servers of
its own, started for the run and closed after it.

A server that cannot start raises, and the caller decides whether that is a skip or, in CI, a
failure. The URL options are the fault suite's: short timeouts (a worker cut off gives up
within its lease), and an audit and history long enough to check a whole run.
"""

from __future__ import annotations

from pathlib import Path

from tests.harness import Harness, SQLiteHarness


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
        return SQLiteHarness(workdir, "?timeout=1.5&retention=100000000")
    if backend == "postgres":
        from tests.servers.postgres import PostgresHarness, PostgresServer

        server = PostgresServer()  # its own directory in /tmp: the postgres user must reach it
        return PostgresHarness(server.url, "&timeout=1&pool_size=4&retention=100000000", server=server)
    if backend.startswith("etcd"):
        from tests.servers.etcd import EtcdCluster, EtcdHarness

        # A short election timeout, so a paused leader is replaced well within a lease's TTL.
        timing = ("--heartbeat-interval", "25", "--election-timeout", "250") if size > 1 else ()
        return EtcdHarness(EtcdCluster(workdir / "etcd", size, extra=timing), "?timeout=2", owned=True)
    if backend.startswith("zk"):
        from tests.servers.zookeeper import Ensemble, ZooKeeperHarness, ZooKeeperServer

        servers = Ensemble(workdir / "zk", size) if size > 1 else ZooKeeperServer(workdir / "zk")
        return ZooKeeperHarness(servers, "?timeout=2&session_timeout=4&retention=1000000", owned=True)
    raise ValueError(f"unknown backend {backend!r}")
