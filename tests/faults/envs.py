"""Where a run's store lives: a SQLite file, or real etcd / ZooKeeper servers behind proxies.

An environment knows the faults that apply to it, gives each worker a URL (through that
worker's own proxies on server backends, so one worker can be cut off alone) and can undo
every fault (``heal``) before the final state is read. Server processes are the control
classes of ``tests/servers/``; a server that cannot start raises, and the caller decides
whether that is a skip or, in CI, a failure.
"""

from __future__ import annotations

import contextlib
import random
import time
import uuid
from pathlib import Path
from typing import Any

from tests.faults import catalog
from tests.faults.proxy import Proxy

WORKER_FAULTS = catalog.names(catalog.WORKER)


class Env:
    name = ""
    ttl = 1.0
    faults: tuple[str, ...] = WORKER_FAULTS
    url = ""  # of the current store, as an operator would reach it

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.proxies: dict[str, list[Proxy]] = {}

    def start(self) -> None:
        """Start servers (once per environment)."""

    def new_store(self) -> str:
        """A fresh, empty store for one run; returns the URL an operator would use."""
        raise NotImplementedError

    def worker_url(self, worker: str) -> str:
        return self.url

    def server_fault(self, fault: str, rng: random.Random, seconds: float) -> str:
        raise NotImplementedError(fault)

    def net_fault(self, worker: str, mode: str, delay: float = 0.0) -> None:
        for p in self.proxies.get(worker, []):
            p.set(mode, delay)

    def heal(self) -> None:
        for ps in self.proxies.values():
            for p in ps:
                p.set("pass")

    def close(self) -> None:
        for ps in self.proxies.values():
            for p in ps:
                p.close()
        self.proxies.clear()


class SQLiteEnv(Env):
    """A store file shared by the worker processes; its faults are the workers' own."""

    name = "sqlite"
    ttl = 1.0

    def new_store(self) -> str:
        # timeout: a worker stopped while it holds SQLite's write lock blocks the others this
        # long, then they see BackendUnavailable (unknown outcomes), as docs/protocol.md says.
        self.url = f"sqlite:///{self.workdir / (uuid.uuid4().hex[:12] + '.db')}?timeout=1.5&retention=100000000"
        return self.url


class ServerEnv(Env):
    """Servers with one proxy per worker per server, so network faults hit one worker."""

    scheme = ""
    cluster_faults = catalog.names(catalog.CLUSTER)
    # How long a leader is paused or kept dead, in TTLs: from a pause too short to notice to
    # one that outlasts every lease the leader knew of.
    leader_fault_ttls = (0.5, 1.5)

    def __init__(self, workdir: Path, size: int = 1) -> None:
        super().__init__(workdir)
        self.size = size
        self.prefix = ""
        scopes = (catalog.WORKER, catalog.NETWORK, catalog.SERVER, *((catalog.CLUSTER,) if size > 1 else ()))
        self.faults = catalog.names(*scopes)
        self._paused: list[Any] = []
        self._killed: list[Any] = []

    def endpoints(self) -> list[tuple[str, int]]:
        raise NotImplementedError

    def query(self) -> str:
        return ""

    def new_store(self) -> str:
        self.prefix = f"f{uuid.uuid4().hex[:10]}"
        hosts = ",".join(f"{h}:{p}" for h, p in self.endpoints())
        self.url = f"{self.scheme}://{hosts}/{self.prefix}{self.query()}"
        return self.url

    def worker_url(self, worker: str) -> str:
        if worker not in self.proxies:
            self.proxies[worker] = [Proxy(ep) for ep in self.endpoints()]
        hosts = ",".join(p.address for p in self.proxies[worker])
        return f"{self.scheme}://{hosts}/{self.prefix}{self.query()}"

    # Each server class names these differently; subclasses map them.
    def nodes(self) -> list[Any]:
        raise NotImplementedError

    def leader(self) -> Any:
        raise NotImplementedError

    def kill(self, node: Any) -> None:
        raise NotImplementedError

    def restart(self, node: Any) -> None:
        raise NotImplementedError

    def pause(self, node: Any) -> None:
        raise NotImplementedError

    def resume(self, node: Any) -> None:
        raise NotImplementedError

    def server_fault(self, fault: str, rng: random.Random, seconds: float) -> str:
        node = rng.choice(self.nodes()) if fault == "server-kill" else self.leader()
        if fault == "leader-pause":
            self.pause(node)
            self._paused.append(node)
            time.sleep(seconds)
            self.resume(node)
            self._paused.remove(node)
            return "paused"
        self.kill(node)
        self._killed.append(node)
        time.sleep(seconds)
        self.restart(node)
        self._killed.remove(node)
        return "killed"

    def heal(self) -> None:
        super().heal()
        for node in list(self._paused):
            with contextlib.suppress(OSError):
                self.resume(node)
            self._paused.remove(node)
        for node in list(self._killed):
            self.restart(node)
            self._killed.remove(node)


class EtcdEnv(ServerEnv):
    name = "etcd"
    scheme = "etcd"
    ttl = 2.0  # etcd's own minimum lease

    def start(self) -> None:
        from tests.servers.etcd import EtcdCluster

        # A short election timeout, so a paused leader is replaced well within a lease's TTL.
        timing = ("--heartbeat-interval", "25", "--election-timeout", "250") if self.size > 1 else ()
        self.cluster = EtcdCluster(self.workdir / "etcd", self.size, extra=timing)
        for node in self.cluster.nodes:
            node.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.cluster.start()

    def query(self) -> str:
        return "?timeout=2"

    def endpoints(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", n.client_port) for n in self.cluster.nodes]

    def nodes(self) -> list[Any]:
        return list(self.cluster.nodes)

    def leader(self) -> Any:
        return self.cluster.leader()

    def kill(self, node: Any) -> None:
        node.kill9()

    def restart(self, node: Any) -> None:
        node.start()
        self.cluster.wait_healthy(60, nodes=[node])

    def pause(self, node: Any) -> None:
        node.stop()

    def resume(self, node: Any) -> None:
        node.cont()

    def close(self) -> None:
        super().close()
        if hasattr(self, "cluster"):
            self.cluster.close()


class ZooKeeperEnv(ServerEnv):
    name = "zk"
    scheme = "zk"
    ttl = 2.0

    def start(self) -> None:
        from tests.servers.zookeeper import Ensemble, ZooKeeperServer

        if self.size > 1:
            self.ensemble = Ensemble(self.workdir / "zk", self.size)
            self.ensemble.start()
            self.servers = list(self.ensemble.servers)
        else:
            server = ZooKeeperServer(self.workdir / "zk")
            server.start()
            server.wait_serving(60)
            self.servers = [server]

    def query(self) -> str:
        return "?timeout=2&session_timeout=4&retention=1000000"

    def endpoints(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", s.port) for s in self.servers]

    def nodes(self) -> list[Any]:
        return list(self.servers)

    def leader(self) -> Any:
        if self.size == 1:
            return self.servers[0]
        return self.ensemble.leader()

    def kill(self, node: Any) -> None:
        node.kill()

    def restart(self, node: Any) -> None:
        node.start()
        node.wait_serving(60)

    def pause(self, node: Any) -> None:
        node.pause()

    def resume(self, node: Any) -> None:
        node.resume()

    def close(self) -> None:
        super().close()
        for s in getattr(self, "servers", []):
            s.kill()


class PostgresEnv(ServerEnv):
    """A private PostgreSQL (tests/servers/postgres.py): killed with SIGKILL, paused with SIGSTOP.

    One server, so its "leader" is the primary itself; each run gets its own schema.
    """

    name = "postgres"
    scheme = "postgresql"
    ttl = 2.0

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.faults = (*self.faults, catalog.BY_NAME["leader-pause"].name)

    def start(self) -> None:
        from tests.servers.postgres import PostgresServer

        self.server = PostgresServer()  # its own directory in /tmp: the postgres user must reach it
        self.server.start(60)

    def new_store(self) -> str:
        self.prefix = f"f{uuid.uuid4().hex[:10]}"
        self.url = f"postgresql://postgres@127.0.0.1:{self.server.port}/postgres{self.query()}"
        return self.url

    def worker_url(self, worker: str) -> str:
        if worker not in self.proxies:
            self.proxies[worker] = [Proxy(ep) for ep in self.endpoints()]
        hosts = ",".join(p.address for p in self.proxies[worker])
        return f"postgresql://postgres@{hosts}/postgres{self.query()}"

    def query(self) -> str:
        return f"?schema={self.prefix}&timeout=1&pool_size=4&retention=100000000"

    def endpoints(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", self.server.port)]

    def nodes(self) -> list[Any]:
        return [self.server]

    def leader(self) -> Any:
        return self.server

    def kill(self, node: Any) -> None:
        node.kill()

    def restart(self, node: Any) -> None:
        node.start(60)

    def pause(self, node: Any) -> None:
        node.pause()

    def resume(self, node: Any) -> None:
        node.resume()

    def close(self) -> None:
        super().close()
        if hasattr(self, "server"):
            self.server.close()


def make(backend: str, workdir: Path) -> Env:
    """``sqlite``, ``etcd``, ``etcd3`` (3-node cluster), ``zk``, ``zk3`` (3-node ensemble), ``postgres``."""
    workdir.mkdir(parents=True, exist_ok=True)
    if backend == "sqlite":
        return SQLiteEnv(workdir)
    if backend == "postgres":
        return PostgresEnv(workdir)
    size = 3 if backend.endswith("3") else 1
    if backend.startswith("etcd"):
        return EtcdEnv(workdir, size)
    if backend.startswith("zk"):
        return ZooKeeperEnv(workdir, size)
    raise ValueError(f"unknown backend {backend!r}")
