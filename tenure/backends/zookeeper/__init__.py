"""The ``zk://`` backend; ``ZooKeeperBackend`` is the class the registry loads. Its modules are
listed in docs/backends/zookeeper.md, "Code"."""

from tenure.backends.zookeeper.backend import ZooKeeperBackend

__all__ = ["ZooKeeperBackend"]
