"""The stores under test, each with its floor and its peers, started for one benchmark run."""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import floors
from benchmarks.network import Direct, Network

Route = Network | Direct  # where clients reach a server: through delay relays, or straight
DIRECT = Direct()


@dataclass
class Subject:
    name: str
    url: str
    options: dict[str, Any] = field(default_factory=dict)
    processes: bool = True  # can several processes share it?
    floor: Callable[[int], float] | None = None  # seconds for n claim+complete pairs of bare round trips
    peers: list[tuple[str, Callable[[int], float]]] = field(default_factory=list)  # seconds for n cycles
    # The same comparisons with several clients at once: seconds for n cycles over ``clients`` threads.
    floor_clients: Callable[[int, int], float] | None = None
    query_target: float | None = None  # seconds summary() and a page() may take at the largest size
    peers_clients: list[tuple[str, Callable[[int, int], float]]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # peers not measured here, and why


@contextlib.contextmanager
def memory(net: Route = DIRECT) -> Iterator[Subject]:
    yield Subject("memory", "memory://bench", processes=False)


@contextlib.contextmanager
def sqlite(net: Route = DIRECT) -> Iterator[Subject]:
    with tempfile.TemporaryDirectory(prefix="tenure-bench-") as tmp:
        yield Subject("sqlite", f"sqlite:///{tmp}/bench.db",
                      floor=lambda n: floors.sqlite_floor(f"{tmp}/floor.db", n))


@contextlib.contextmanager
def zookeeper(net: Route = DIRECT) -> Iterator[Subject]:
    """A private standalone server started like the tests start theirs (fsync on)."""
    from benchmarks import zk_peers
    from devservers.zookeeper import running

    # ZooKeeper keeps every znode in memory: 100,000 jobs are about 300,000 znodes (record,
    # generation, index entry), more than the tests' 128 MB heap holds; 1 GB is zkEnv.sh's default.
    with tempfile.TemporaryDirectory(prefix="tenure-bench-zk-") as tmp, \
            running(Path(tmp) / "zk", heap="1g") as server:
        hosts = net.route(server.hosts)
        yield Subject("zk", f"zk://{hosts}/bench-{uuid.uuid4().hex[:8]}",
                      floor=lambda n: zk_peers.floor(hosts, n),
                      peers=[("bare multis with tenure's operations", lambda n: zk_peers.same_operations(hosts, n)),
                             ("kazoo Lock", lambda n: zk_peers.kazoo_lock(hosts, n)),
                             ("kazoo NonBlockingLease", lambda n: zk_peers.kazoo_lease(hosts, n))])


@contextlib.contextmanager
def etcd(net: Route = DIRECT) -> Iterator[Subject]:
    """A private single-node etcd started like the tests start theirs (fsync on)."""
    from benchmarks import etcd_peers
    from devservers.etcd import EtcdCluster

    with tempfile.TemporaryDirectory(prefix="tenure-bench-etcd-") as tmp:
        cluster = EtcdCluster(Path(tmp), size=1)
        cluster.start()
        peers: list[etcd_peers.LockPeer] = []
        try:
            endpoint = net.route(cluster.endpoints)
            peers = etcd_peers.lock_peers(endpoint)  # each in its own process and virtualenv
            yield Subject("etcd", f"etcd://{endpoint}/bench-{uuid.uuid4().hex[:8]}",
                          floor=lambda n: etcd_peers.floor(endpoint, n),
                          peers=[(peer.label, peer.cycles) for peer in peers])
        finally:
            for peer in peers:
                peer.close()
            cluster.close()


@contextlib.contextmanager
def postgres(net: Route = DIRECT) -> Iterator[Subject]:
    """A private PostgreSQL started like the fault tests start theirs (fsync on, defaults)."""
    from benchmarks import pg_peers
    from devservers.postgres import running

    with running() as server:
        address = net.route(f"127.0.0.1:{server.port}")
        host, _, port = address.rpartition(":")
        conninfo = f"host={host} port={port} user=postgres dbname=postgres"
        tooz_url = f"postgresql://postgres@{address}/postgres"
        peers: list[tuple[str, Callable[[int], float]]] = []
        peers_clients: list[tuple[str, Callable[[int, int], float]]] = []
        if pg_peers.tooz_installed():
            peers.append(("tooz PostgreSQL lock", lambda n: pg_peers.tooz_lock(tooz_url, n)))
            peers_clients.append(("tooz PostgreSQL lock", lambda n, c: pg_peers.tooz_lock(tooz_url, n, c)))
        missing = [] if peers else ["tooz PostgreSQL lock: tooz or psycopg2 is not installed "
                                    "(pip install --group bench)"]
        yield Subject("postgres", f"postgresql://postgres@{address}/postgres?schema=bench_{uuid.uuid4().hex[:8]}",
                      options={"pool_size": 16},
                      floor=lambda n: pg_peers.floor(conninfo, n),
                      peers=peers,
                      floor_clients=lambda n, c: pg_peers.floor(conninfo, n, c),
                      peers_clients=peers_clients, missing=missing,
                      query_target=0.25)  # issue 16


SUBJECTS: dict[str, Callable[[Route], contextlib.AbstractContextManager[Subject]]] = {
    "memory": memory,
    "sqlite": sqlite,
    "etcd": etcd,
    "zk": zookeeper,
    "postgres": postgres,
}


@contextlib.contextmanager
def bare(name: str) -> Iterator[Subject]:
    """The store alone on a private server, reached directly: etcd's without the peers the
    comparisons install (their virtualenvs) and with the auto-compaction operators are told to
    run it with (``servers.AS_OPERATED``), the others as ``SUBJECTS`` starts them."""
    if name != "etcd":
        with SUBJECTS[name](DIRECT) as subject:
            yield subject
        return
    from benchmarks.servers import AS_OPERATED, private_etcd

    with private_etcd("tenure-bench-etcd-", AS_OPERATED) as cluster:
        yield Subject("etcd", f"etcd://{cluster.endpoints}/bench-{uuid.uuid4().hex[:8]}")
