"""Operations added to a kazoo multi (``client.transaction()``) without kazoo's checks of each.

kazoo's ``TransactionRequest.create``, ``set_data``, ``check`` and ``delete`` type-check each
argument, normalise each path against a chroot (tenure's client has none: the root is in
every path ``Layout`` builds) and log each operation: in multis of thousands (a batch of
renewals, a trim of the audit) about a sixth of the client's CPU. These append the same
requests to the multi's ``operations``, which kazoo sends as they are.
"""

from __future__ import annotations

from kazoo.protocol.serialization import CheckVersion, Create, Delete, SetData
from kazoo.security import OPEN_ACL_UNSAFE

from tenure.backends.zookeeper.calls import Multi

_SEQUENCE = 2  # ZooKeeper's create flag for a sequential znode


def create(tx: Multi, path: str, data: bytes, *, sequence: bool = False) -> None:
    """As ``tx.create``, with the client's default ACL."""
    tx.operations.append(Create(path, data, tx.client.default_acl or OPEN_ACL_UNSAFE, _SEQUENCE if sequence else 0))


def set_data(tx: Multi, path: str, data: bytes, version: int) -> None:
    tx.operations.append(SetData(path, data, version))


def check(tx: Multi, path: str, version: int) -> None:
    tx.operations.append(CheckVersion(path, version))


def delete(tx: Multi, path: str) -> None:
    tx.operations.append(Delete(path, -1))
