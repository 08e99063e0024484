"""The ``zk://`` backend: ``backend`` (the protocol on ZooKeeper), ``layout`` (znodes and their
data), ``config`` (connection options and error mapping), and the helpers ``acl``, ``audit``,
``held``, ``index``, ``multiread``, ``watch``.

``tenure.backends.zookeeper.ZooKeeperBackend`` is the class the registry loads for ``zk://``.
"""

from tenure.backends.zookeeper.backend import ZooKeeperBackend

__all__ = ["ZooKeeperBackend"]
