"""Session fixtures that start real servers; each backend's module adds its own here."""

from __future__ import annotations

import pytest

from tests.harness import Harness


@pytest.fixture
def etcd_harness() -> Harness:
    pytest.skip("the etcd backend has not landed yet")


@pytest.fixture
def zk_harness() -> Harness:
    pytest.skip("the ZooKeeper backend has not landed yet")
