"""What the conformance suite needs from each backend, in one small interface.

A harness hands out isolated stores (a new file, prefix or chroot per test) and knows how
to make time pass for a lease and how to plant a corrupt record. Backends with an
injectable store clock let time pass without sleeping; servers need real time.
"""

from __future__ import annotations

import os
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

import tenure


class Harness:
    name = ""
    shared_between_processes = True
    ttl = 5.0  # a TTL for tests where the lease must not expire on its own
    short_ttl = 0.5  # a TTL for tests that wait for expiry in real time

    def url(self) -> str:
        """A URL of a new, empty store."""
        raise NotImplementedError

    def connect(self, url: str | None = None, **options: Any) -> tenure.Store:
        return tenure.connect(url or self.url(), **{**self.default_options(), **options})

    def default_options(self) -> dict[str, Any]:
        """Options every store of this harness is opened with, unless a test says otherwise."""
        return {}

    def expire(self, store: tenure.Store, lease: tenure.Lease) -> None:
        """Return once ``lease`` has expired by the store's clock."""
        wait = lease.expires_at - store.now()
        if wait > 0:
            time.sleep(wait + 0.05)  # real time: the store's clock is a server's
        while store.now() <= lease.expires_at:
            time.sleep(0.01)

    def corrupt(self, store: tenure.Store, job_id: str) -> None:
        """Overwrite the job's record with bytes tenure did not write."""
        raise NotImplementedError


class MemoryHarness(Harness):
    name = "memory"
    shared_between_processes = False

    def __init__(self) -> None:
        self.clock = tenure.ManualClock()

    def url(self) -> str:
        return f"memory://t-{uuid.uuid4().hex}"

    def default_options(self) -> dict[str, Any]:
        return {"clock": self.clock}

    def expire(self, store: tenure.Store, lease: tenure.Lease) -> None:
        if isinstance(store.clock, tenure.ManualClock):
            store.clock.advance(max(0.0, lease.expires_at - store.now()) + 0.001)
        else:
            super().expire(store, lease)

    def corrupt(self, store: tenure.Store, job_id: str) -> None:
        pytest_skip("the memory store holds Python objects; nothing can corrupt them")


class SQLiteHarness(MemoryHarness):
    name = "sqlite"
    shared_between_processes = True

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory

    def url(self) -> str:
        return f"sqlite:///{self.directory / (uuid.uuid4().hex + '.db')}"

    def corrupt(self, store: tenure.Store, job_id: str) -> None:
        path = store.backend.path  # type: ignore[attr-defined]
        with sqlite3.connect(path) as db:
            db.execute("UPDATE tenure_jobs SET state = 'bogus', token = 'x' WHERE job_id = ?", (job_id,))


def pytest_skip(reason: str) -> None:
    import pytest

    pytest.skip(reason)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
