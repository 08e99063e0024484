"""Private servers for one benchmark, started like the tests start theirs (fsync on)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from devservers.etcd import EtcdCluster
    from devservers.zookeeper import ZooKeeperServer


@contextlib.contextmanager
def private_etcd(prefix: str) -> Iterator[EtcdCluster]:
    """A single-node etcd in a temporary directory, stopped and removed when the block ends."""
    from devservers.etcd import EtcdCluster

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        cluster = EtcdCluster(Path(tmp), size=1)
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.close()


@contextlib.contextmanager
def private_zookeeper(prefix: str) -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper in a temporary directory, killed and removed when the block ends."""
    from devservers.zookeeper import running

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp, running(Path(tmp) / "zk") as server:
        yield server
