"""claim_next's candidates on etcd, from the indexes (``layout``), in ``tenure.core.order``'s
order within the tolerance etcd declares (``EtcdBackend.characteristics.claim_order``):
expired leases first (their work is overdue) by claim, then pending jobs oldest first.

The ``held/`` keys without a ``lease/`` key are leases etcd ended, but for those with a
``last/`` key (the last attempt: parked, never a candidate, ``transitions.candidate_at``); the
``sched/`` keys up to the store's ``now`` are scheduled jobs whose time came (later ones are
never read); the ``queue/`` keys are pending jobs in the order they became so (read through
``scan.QueueCursor``). These are proposals: the transaction reads each candidate's keys and
passes over one that is no longer claimable.
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
from tenure.core import order
from tenure.core.clock import boot_clock
from tenure.core.errors import CorruptRecord

T = TypeVar("T")


def first_claimable(k: Keys, leases: EtcdLeases, queue: QueueCursor,
                    take: Callable[[str], Io[T | None]], now: float) -> Io[T | None]:
    """What ``take`` makes of the first candidate it takes (not None), best first: one read of
    the indexes, then further pages while every one is passed over (all taken meanwhile: read
    on). Its reads, and ``take``'s, are yielded (``client.Io``)."""
    window = queue.window()
    due = (k.section("sched"), k.sched_cut(now))  # claimable by now: nothing later is read
    res = yield ec.call("txn", [], [ec.get(*k.span("held"), keys_only=True), ec.get(*k.span("lease"), keys_only=True),
                                    ec.get(*k.span("last"), keys_only=True),
                                    ec.get(*window, keys_only=True, limit=QueueCursor.PAGE),
                                    ec.get(*due, keys_only=True, limit=QueueCursor.PAGE)], [], retry=True)
    seen = boot_clock()  # after the answer that showed these leases ended
    held, live, last, queued, scheduled = res.ranges
    passed = {kv.key[len(k.section("lease")):] for kv in live} | {kv.key[len(k.section("last")):] for kv in last}
    # The oldest claims first: the held key's revision, not the lease's end, which etcd does
    # not say without reading every held job's value (order.Tolerance.expired_by_claim).
    for kv in sorted(held, key=lambda kv: kv.mod_revision):
        if kv.key[len(k.section("held")):] not in passed:
            try:
                job_id = k.job_id(kv.key, "held")
            except CorruptRecord:  # listed as corrupt by jobs(), skipped here
                continue
            leases.ended(job_id, kv.mod_revision, seen)  # a sighting starts the quarantine
            if not leases.waiting_out(job_id, kv.mod_revision) and (taken := (yield from take(job_id))) is not None:
                return taken
    queued = yield from queue.oldest(first=(window, queued))
    # Pending jobs and scheduled ones whose time came, a page of each merged by when they
    # became claimable, oldest first.
    while queued or scheduled:
        for job_id in _queued_ids(k, queued, scheduled):
            if (taken := (yield from take(job_id))) is not None:
                return taken
        if len(scheduled) == QueueCursor.PAGE:
            scheduled, _, _ = yield ec.call("range", scheduled[-1].key + b"\0", due[1], limit=QueueCursor.PAGE)
        else:
            scheduled = []
        queued = (yield from queue.oldest(after=queued[-1].key + b"\0")) if queued else []
    return None


def _queued_ids(k: Keys, queued: list[KV], scheduled: list[KV]) -> list[str]:
    """The job ids of ``queue/`` and ``sched/`` keys in claim_next's order (``order.queue_order``):
    by name, "<µs>/<id>" (the jobs of one write a µs apart), so by time; spread."""
    found: list[list[order.Queued]] = []
    for name, kvs in (("queue", queued), ("sched", scheduled)):
        entries = []
        for kv in kvs:
            with contextlib.suppress(CorruptRecord, ValueError):  # not tenure's: never claimed through it
                at = kv.key[len(k.section(name)):]
                entries.append(order.Queued(int(at[:20]) / 1e6, at.decode(), k.queued_job_id(kv.key, name)))
        found.append(sorted(entries))
    return [entry.job_id for entry in order.queue_order(*found, spread=True)]
