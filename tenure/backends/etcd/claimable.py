"""claim_next's candidates on etcd, from the indexes (``layout``), in ``tenure.core.order``'s
order within the tolerance etcd declares (``EtcdBackend.characteristics.claim_order``):
expired leases first (their work is overdue) by claim, then pending jobs oldest first.

The ``held/`` keys without a ``lease/`` key are leases etcd ended, but for those with a
``last/`` key (the last attempt: parked, never a candidate, ``transitions.candidate_at``); the
``sched/`` keys up to the store's ``now`` are scheduled jobs whose time came (later ones are
never read); the ``queue/`` keys are pending jobs in the order they became so (read through
``queue_cursor.QueueCursor``). These are proposals: the transaction reads the candidates' keys
(``AHEAD`` in one request) and passes over one that is no longer claimable.

etcd walks every key of a range to answer it, a deleted one too until a compaction, and
``held/`` and ``lease/`` are read whole: every lease ended leaves a deleted key in each, so
their read grows with the jobs done since the last compaction (``LEASED_REUSED_FOR``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from tenure.backends.etcd import client as ec
from tenure.backends.etcd.client import KV, EtcdIo
from tenure.backends.etcd.layout import Keys
from tenure.backends.etcd.leases import EtcdLeases
from tenure.backends.etcd.queue_cursor import QueueCursor
from tenure.core import order
from tenure.core.clock import boot_clock
from tenure.core.errors import CorruptRecord

T = TypeVar("T")


# Candidates claim_next reads the keys of in one request: with 16 claimers after the same few
# oldest jobs, the first one or two proposed are most often claimed by the time their keys are
# read (7.5 reads a claimed job one at a time, 16 workers draining 10,000: docs/performance.md).
# 8 candidates are 40 reads of one key each, within etcd's 128 operations a Txn.
AHEAD = 8


# How long claim_next's attempts after a lost race take the leases from its first attempt's
# read (``Leased``) instead of reading them again. etcd walks every key of a section to answer a
# range of it, deleted ones too until a compaction (an hour of them, as operators run it):
# held/ and lease/ hold a deleted key for every lease ended, so their read grows with every job
# done, 2.4 times a claimed job at 16 claimers (docs/performance.md). A departure from claim_next's
# order, declared as one (``order``, docs/protocol.md): a lease that ended in those 0.5 s (etcd
# deleted its key, or ``force_expire`` did) is not seen by the retry, which may take a pending
# job first; the next claim_next reads the leases afresh.
LEASED_REUSED_FOR = 0.5


@dataclasses.dataclass(frozen=True)
class Leased:
    """A read of the ``held/``, ``lease/`` and ``last/`` sections, and when it was answered (the
    boot clock: the sighting of a lease etcd ended)."""

    held: list[KV]
    live: list[KV]
    last: list[KV]
    seen: float

    def fresh(self) -> bool:
        """Whether an attempt after a lost race may take the leases from it."""
        return boot_clock() - self.seen < LEASED_REUSED_FOR


def first_claimable(k: Keys, leases: EtcdLeases, queue: QueueCursor, take: Callable[[list[str]], EtcdIo[T | None]],
                    now: float, leased: Leased | None = None) -> EtcdIo[tuple[T | None, Leased]]:
    """What ``take`` makes of the first candidate it takes (not None), best first, and the read
    of the leases it was chosen on: one read of the indexes (the leases from ``leased`` if
    given: an attempt after a lost race), then further pages while every one is passed over
    (all taken meanwhile: read on). ``take`` is handed up to ``AHEAD`` candidates at a time, in
    order, and gives back what it makes of the first it takes (it reads their keys in one
    request). Its reads, and ``take``'s, are yielded (``client.EtcdIo``)."""
    first = index(k, queue, now, leased)
    read = answered(first, (yield ec.Txn([], first.reads, [], retry=True)).ranges)
    found = yield from claimables(k, leases, queue, lambda job_ids: _first(take, job_ids), now, 1, read, AHEAD - 1)
    leased = read[0].leased
    assert leased is not None  # ``answered`` sets it
    return (found[0] if found else None), leased


def _first(take: Callable[[list[str]], EtcdIo[T | None]], job_ids: list[str]) -> EtcdIo[list[T]]:
    taken = yield from take(job_ids)
    return [] if taken is None else [taken]


@dataclasses.dataclass(frozen=True)
class Index:
    """A read of the indexes: its ranges (``reads``), the spans of the queue and of the
    scheduled jobs due that it reads, and ``leased``: the leases, if read before (``reads``
    leaves them out), else None."""

    window: tuple[bytes, bytes]
    due: tuple[bytes, bytes]
    reads: list[Any]
    leased: Leased | None = None


def index(k: Keys, queue: QueueCursor, now: float, leased: Leased | None = None) -> Index:
    """The read of the indexes claim_next starts from (a Txn of ranges, or a part of one);
    with ``leased``, the pending jobs only."""
    window = queue.window()
    due = (k.section("sched"), k.sched_cut(now))  # claimable by now: nothing later is read
    pending = [ec.get(*window, keys_only=True, limit=QueueCursor.PAGE),
               ec.get(*due, keys_only=True, limit=QueueCursor.PAGE)]
    if leased is not None:
        return Index(window, due, pending, leased)
    return Index(window, due, [ec.get(*k.span("held"), keys_only=True), ec.get(*k.span("lease"), keys_only=True),
                               ec.get(*k.span("last"), keys_only=True), *pending])


Read = tuple[Index, list[list[KV]]]  # an index read with its leases (``Index.leased``), and its pending pages


def answered(first: Index, ranges: list[list[KV]]) -> Read:
    """``first``'s read with the answer ``ranges``, called as the answer comes: the leases read
    (or those ``first`` carried) are seen now (a sighting of a lease etcd ended starts its
    holder's quarantine, and ``LEASED_REUSED_FOR`` counts from it), then the pending pages."""
    if first.leased is not None:
        queued, scheduled = ranges
        return first, [queued, scheduled]
    held, live, last, queued, scheduled = ranges
    return dataclasses.replace(first, leased=Leased(held, live, last, boot_clock())), [queued, scheduled]


def claimables(k: Keys, leases: EtcdLeases, queue: QueueCursor, take: Callable[[list[str]], EtcdIo[list[T]]],
               now: float, n: int, read: Read | None = None, ahead: int = 0) -> EtcdIo[list[T]]:
    """What ``take`` makes of up to ``n`` different candidates, best first: ``take`` is handed
    the candidates ``n + ahead`` at most at a time (as many as are still wanted, and ``ahead``
    more in case some were taken meanwhile) and gives back those it takes (claim_next_many
    reads a handful's keys in one request), at most as many as are still wanted. One read of
    the indexes (or ``read``, one already made), then further pages while too few were taken."""
    taken: list[T] = []
    offered: set[str] = set()
    chunk: list[str] = []

    def offer(job_id: str) -> EtcdIo[bool]:
        """Whether ``n`` are taken, with ``job_id`` offered (a job read twice is offered once)."""
        if job_id not in offered:
            offered.add(job_id)
            chunk.append(job_id)
            if len(taken) + len(chunk) >= n + ahead:
                yield from flush()
        return len(taken) >= n

    def flush() -> EtcdIo[bool]:
        """Whether ``n`` are taken, with the candidates offered so far handed to ``take``."""
        if chunk:
            taken.extend((yield from take(chunk[:])))
            chunk.clear()
        return len(taken) >= n

    if read is None:
        first = index(k, queue, now)
        read = answered(first, (yield ec.Txn([], first.reads, [], retry=True)).ranges)
    leased = read[0].leased
    assert leased is not None  # ``answered`` sets it
    window, due = read[0].window, read[0].due
    held, live, last, seen = leased.held, leased.live, leased.last, leased.seen
    queued, scheduled = read[1]
    # Job parts of the keys (each section's length taken once: a read holds every lease).
    at_lease, at_last, at_held = len(k.section("lease")), len(k.section("last")), len(k.section("held"))
    passed = {kv.key[at_lease:] for kv in live}
    passed.update(kv.key[at_last:] for kv in last)
    # The oldest claims first: the held key's revision, not the lease's end, which etcd does
    # not say without reading every held job's value (order.Tolerance.expired_by_claim).
    ended = [kv for kv in held if kv.key[at_held:] not in passed]  # sorted after: few, where held are many
    ended.sort(key=_claimed_at)
    for kv in ended:
        try:
            job_id = k.job_id(kv.key, "held")
        except CorruptRecord:  # listed as corrupt by jobs(), skipped here
            continue
        leases.ended(job_id, kv.mod_revision, seen)  # a sighting starts the quarantine
        if not leases.waiting_out(job_id, kv.mod_revision) and (yield from offer(job_id)):
            return taken
    # With ``ahead``, the candidates offered are read before the indexes are read on (for
    # claim_next: a round trip no more than one by one, when the first is claimable).
    if ahead and not queued and (yield from flush()):  # the window was empty: read on for more
        return taken
    queued = yield from queue.oldest(first=(window, queued))
    # Pending jobs and scheduled ones whose time came, a page of each merged by when they
    # became claimable, oldest first.
    while queued or scheduled:
        for job_id in _queued_ids(k, queued, scheduled):
            if (yield from offer(job_id)):
                return taken
        if ahead and (yield from flush()):  # before the next pages
            return taken
        if len(scheduled) == QueueCursor.PAGE:
            scheduled, _, _ = yield ec.Range(scheduled[-1].key + b"\0", due[1], limit=QueueCursor.PAGE)
        else:
            scheduled = []
        queued = (yield from queue.oldest(after=queued[-1].key + b"\0")) if queued else []
    if chunk:
        taken.extend((yield from take(chunk)))
    return taken


def _claimed_at(kv: KV) -> int:
    return kv.mod_revision


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
