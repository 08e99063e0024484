"""The ``zk://`` backend: ``backend`` (a ``RecordBackend``), ``transaction`` (its optimistic
transaction on ZooKeeper), ``layout`` (znodes and their data), ``config`` (connection options
and error mapping), ``calls`` (its I/O as generators of kazoo results, for sync and asyncio), ``aio``
(the backend tenure.aio opens for ``zk://``), and the helpers ``acl``, ``audit``, ``index``,
``multiread``, ``query``, ``session``, ``watch``.

``tenure.backends.zookeeper.ZooKeeperBackend`` is the class the registry loads for ``zk://``.
"""

from tenure.backends.zookeeper.backend import ZooKeeperBackend

__all__ = ["ZooKeeperBackend"]
