"""The ``etcd://`` backend: ``backend`` (the ``RecordBackend``), ``transaction`` (its optimistic
transaction as etcd Txns), ``claimable`` (claim_next's candidates), ``leases`` (etcd's leases),
``layout`` (keys and values), ``client`` (the gRPC connection), ``listing`` (every job, paged),
``watch`` (a live watch), ``queue_cursor`` (the oldest queued jobs), ``claims`` and ``holders``
(batches of claims, renewals and completions, ``nesting`` their Txn limits), ``query`` and
``upgrade`` (the indexes), ``api`` (generated code).

``tenure.backends.etcd.EtcdBackend`` is the class the registry loads for ``etcd://``.
"""

from tenure.backends.etcd.backend import EtcdBackend

__all__ = ["EtcdBackend"]
