"""Session fixtures that start real servers; each backend's module adds its own here."""

from __future__ import annotations

from tests.servers.etcd import etcd_auth, etcd_harness, etcd_private, etcd_server  # noqa: F401 - fixtures
from tests.servers.postgres import postgres_harness, postgres_private, postgres_session_harness  # noqa: F401
from tests.servers.zookeeper import zk_ensemble, zk_harness, zk_private, zk_server, zk_tls  # noqa: F401
