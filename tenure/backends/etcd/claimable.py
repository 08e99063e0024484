"""claim_next's candidates on etcd, from the indexes (``layout``): expired leases first (their
work is overdue), then pending jobs oldest first.

The ``held/`` keys without a ``lease/`` key are leases etcd ended, but for those with a
``last/`` key (the last attempt: parked, never a candidate, ``transitions.candidate_at``); the
``queue/`` keys are pending jobs by when they became (or become) claimable, read through
``scan.QueueCursor`` up to the store's ``now``: a scheduled job's key is later. These are
proposals: the transaction reads each candidate's keys and passes over one that is no longer
claimable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TypeVar

from tenure.backends.etcd import client as ec
from tenure.backends.etcd.client import KV, Io
from tenure.backends.etcd.layout import Keys
from tenure.backends.etcd.leases import EtcdLeases
from tenure.backends.etcd.scan import QueueCursor
from tenure.core import contention
from tenure.core.clock import boot_clock
from tenure.core.errors import CorruptRecord

T = TypeVar("T")


def first_claimable(k: Keys, leases: EtcdLeases, queue: QueueCursor,
                    take: Callable[[str], Io[T | None]], now: float) -> Io[T | None]:
    """What ``take`` makes of the first candidate it takes (not None), best first: one read of
    the indexes, then further queue pages while every one is passed over (all taken meanwhile:
    read on) up to the first key later than ``now``. Its reads, and ``take``'s, are yielded
    (``client.Io``)."""
    window = queue.window(now)
    res = yield ec.call("txn", [], [ec.get(*k.span("held"), keys_only=True), ec.get(*k.span("lease"), keys_only=True),
                                    ec.get(*k.span("last"), keys_only=True),
                                    ec.get(*window, keys_only=True, limit=QueueCursor.PAGE)], [], retry=True)
    seen = boot_clock()  # after the answer that showed these leases ended
    held, live, last, queued = res.ranges
    passed = {kv.key[len(k.section("lease")):] for kv in live} | {kv.key[len(k.section("last")):] for kv in last}
    for kv in sorted(held, key=lambda kv: kv.mod_revision):  # the oldest claims first
        if kv.key[len(k.section("held")):] not in passed:
            try:
                job_id = k.job_id(kv.key, "held")
            except CorruptRecord:  # listed as corrupt by jobs(), skipped here
                continue
            leases.ended(job_id, kv.mod_revision, seen)  # a sighting starts the quarantine
            if not leases.waiting_out(job_id, kv.mod_revision) and (taken := (yield from take(job_id))) is not None:
                return taken
    queued = yield from queue.oldest(now, first=(window, queued))
    while queued:  # (none scheduled later than now: the cursor reads up to it)
        for job_id in _queued_ids(k, queued):
            if (taken := (yield from take(job_id))) is not None:
                return taken
        queued = yield from queue.oldest(now, after=queued[-1].key + b"\0")
    return None


def _queued_ids(k: Keys, kvs: list[KV]) -> list[str]:
    ids = []
    for kv in kvs:
        with contextlib.suppress(CorruptRecord):  # not tenure's: never claimed through it
            ids.append(k.queued_job_id(kv.key))
    return contention.spread(ids)
