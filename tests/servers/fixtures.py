"""Session fixtures that start real servers; each backend's module adds its own here."""

from __future__ import annotations

import pytest

from tests.harness import Harness
from tests.servers.etcd import etcd_harness, etcd_server  # noqa: F401 - fixtures


@pytest.fixture
def zk_harness() -> Harness:
    pytest.skip("the ZooKeeper backend has not landed yet")
