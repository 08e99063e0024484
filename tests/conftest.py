"""Fixtures shared by every test: one harness per backend, chosen by a parameter.

``TENURE_TEST_BACKENDS=memory,sqlite`` limits the run to some backends (all by default).
Server backends add their ``<name>_harness`` fixtures in ``tests/servers/fixtures.py``; in CI
(``CI=true``) a server that cannot start fails the run instead of skipping it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Harness, MemoryHarness, SQLiteHarness

pytest_plugins = ["tests.servers.fixtures"]

ALL_BACKENDS = ("memory", "sqlite", "etcd", "zk", "postgres")
BACKENDS = [b for b in os.environ.get("TENURE_TEST_BACKENDS", ",".join(ALL_BACKENDS)).split(",") if b]


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: without xdist, never called
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` (pyproject's addopts) with each backend's fault cases on one worker."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.scheduling import SuiteUnits

    return SuiteUnits(config, log)


@pytest.fixture
def memory_harness() -> MemoryHarness:
    return MemoryHarness()


@pytest.fixture
def sqlite_harness(tmp_path: Path) -> SQLiteHarness:
    return SQLiteHarness(tmp_path)


@pytest.fixture(params=BACKENDS)
def harness(request: pytest.FixtureRequest) -> Harness:
    h: Harness = request.getfixturevalue(f"{request.param}_harness")
    return h


@pytest.fixture
def store(harness: Harness) -> Iterator[object]:
    s = harness.connect()
    yield s
    s.close()
