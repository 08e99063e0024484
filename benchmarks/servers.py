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


# What docs/backends/etcd.md ("Space") tells operators to run etcd with: a compaction every
# hour of what is older than an hour. etcd's periodic compactor first compacts an hour after
# it starts, so a run shorter than that is never compacted, as a user's etcd is not in its first
# hour; after it, a user's etcd keeps one to two hours of deleted keys, which a range still walks.
AS_OPERATED = ("--auto-compaction-mode=periodic", "--auto-compaction-retention=1h")


@contextlib.contextmanager
def private_etcd(prefix: str, flags: tuple[str, ...] = ()) -> Iterator[EtcdCluster]:
    """A single-node etcd in a temporary directory, stopped and removed when the block ends;
    ``flags``: more of etcd's flags (``AS_OPERATED``)."""
    from devservers.etcd import EtcdCluster

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        cluster = EtcdCluster(Path(tmp), size=1, extra=flags)
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
