"""The ``etcd://`` backend: ``backend`` (the protocol on etcd), ``layout`` (keys and values),
``client`` (the gRPC connection), ``scan`` (listing and watching), ``api`` (generated code).

``tenure.backends.etcd.EtcdBackend`` is the class the registry loads for ``etcd://``.
"""

from tenure.backends.etcd.backend import EtcdBackend

__all__ = ["EtcdBackend"]
