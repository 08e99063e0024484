"""Stores seeded with the seed document's example, for the dashboard's tests.

``seed_example`` needs a store whose clock the test moves (``ManualClock``): memory shares
that clock with the app through the store's name; a SQLite file is seeded with a manual
clock set 90 s before the machine's store clock, so the app, on the real clock, sees the
same history ending "now". ``seed_on_server`` is for stores whose clock is a server's.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

import tenure

JOB = "invoice-42"  # the seed's example: A's generation, its expiry, B's, A's rejected completion
A, B = "worker-a", "worker-b"


@dataclass
class Seeded:
    url: str
    backend: str
    store: tenure.Store  # open on the seeded store, with the seeding clock

    def writer(self) -> tenure.Store:
        """A store on the same data that writes on the app's clock (the real one for files)."""
        return tenure.connect(self.url) if self.backend == "sqlite" else self.store


def seed_example(store: tenure.Store, clock: tenure.ManualClock) -> None:
    """At t0 A claims JOB (gen 1, 20 s) and renews at t0+5; it expires at t0+25; B claims
    (gen 2, 600 s) at t0+26; A's completion is rejected at t0+30 and a ledger refuses A's
    write. report-9 expires unclaimed, email-3 completes, pending-1 waits, soon-5 ends at
    t0+105. Ends with the clock at t0+90."""
    a = store.claim(JOB, owner=A, ttl=20)
    clock.advance(5)
    a = store.renew(a)
    clock.advance(5)
    store.claim("report-9", owner="worker-c", ttl=30)
    store.complete(store.claim("email-3", owner="worker-d", ttl=30), "sent")
    store.submit("pending-1")
    clock.advance(16)
    store.claim(JOB, owner=B, ttl=600)
    clock.advance(4)
    with pytest.raises(tenure.StaleLease):
        store.complete(a)
    store.report_rejection(JOB, A, a.token, resource="ledger/42", highest=a.token + 1)
    clock.advance(55)
    store.claim("soon-5", owner="worker-e", ttl=20)
    clock.advance(5)


def seeded(backend: str, directory: Path) -> Seeded:
    if backend == "memory":
        clock = tenure.ManualClock()
        url = f"memory://dash-{uuid.uuid4().hex}"
    else:
        url = f"sqlite:///{directory / 'dash.db'}"
        with tenure.connect(url) as probe:
            clock = tenure.ManualClock(start=probe.now() - 90.0)
    store = tenure.connect(url, clock=clock)
    seed_example(store, clock)
    return Seeded(url, backend, store)


def seed_on_server(store: tenure.Store, ttl: float) -> None:
    """The same story where the server's clock rules: A's lease is ended by an operator
    instead of by waiting for it to run out. (Hook for etcd and ZooKeeper.)"""
    a = store.claim(JOB, owner=A, ttl=ttl)
    store.force_expire(JOB)
    store.claim(JOB, owner=B, ttl=ttl * 60)
    with pytest.raises(tenure.StaleLease):
        store.complete(a)
    store.submit("pending-1")
