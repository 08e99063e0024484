"""Operators' queries on etcd from the indexes, not from a listing of every job
(docs/backends/etcd.md, "Counts and pages for operators").

Each job is in one place: a ``queue/`` key (pending), a ``sched/`` key (scheduled; pending
once its time, in the key, is not later than now), a ``held/`` key (leased; expired when no
``lease/`` key lives beside it, by etcd's own clock, or parked when a ``last/`` key does: its
last attempt ran out), a ``last/`` key alone (parked) or none (completed). So one read-only
transaction at one revision counts them all (``count_only`` for ``job/``, ``queue/`` and each
side of ``sched/``'s cut at now); nothing is written to keep the counts. Job ids in order are
the ``job/`` keys' names, kept while etcd's count of them is unchanged (tenure never deletes a
job), topped up with the keys created since (``created_after``).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from tenure.backends.etcd import client as ec
from tenure.backends.etcd.client import KV, Connection, Pending, TxnResult
from tenure.backends.etcd.layout import Keys, parse, record
from tenure.core import transitions
from tenure.core.codec import corrupt_status
from tenure.core.errors import CorruptRecord
from tenure.core.records import JobState, JobStatus, Summary
from tenure.views.paging import Held

_JOBS_PER_TXN = 40  # 3 reads each: within etcd's default of 128 operations per transaction
_IN_FLIGHT = 25  # transactions of reads sent at once: a page of up to 1,000 jobs


@dataclass(frozen=True)
class _Counts:
    revision: int
    jobs: int
    pending: int
    scheduled: int
    held: list[tuple[str, str | None, KV | None, bool]]  # job id, owner, lease key (None: ended), last attempt
    parked: int  # jobs parked by a fail (a last/ key, not held)

    @property
    def ended(self) -> list[tuple[str, bool]]:
        """The held jobs whose lease ended: (job id, whether that parked it)."""
        return [(job_id, last) for job_id, _, lease, last in self.held if lease is None]


def _owner(value: bytes) -> str | None:
    owner = parse(value).get("owner")
    return owner if isinstance(owner, str) else None


def _lease_end(kv: KV, now: float) -> float:
    """When a live lease ends, as ``etcd.layout.record`` judges it: never before ``now``."""
    expires_at = parse(kv.value).get("expires_at")
    if isinstance(expires_at, bool) or not isinstance(expires_at, (int, float)):
        return now + 1e-3
    return max(float(expires_at), now + 1e-3)


class EtcdIndex:
    """``tenure.views.paging.IndexedJobs`` on etcd."""

    def __init__(self, conn: Connection, keys: Keys) -> None:
        self._conn = conn
        self._keys = keys
        self._lock = threading.Lock()
        # (revision read at, count of job keys, ids, names): see _job_names
        self._names: tuple[int, int, list[str], list[bytes]] = (0, -1, [], [])

    def _read(self, now: float, counted: bool) -> _Counts:
        """The indexes at one revision, one round trip; ``counted``: with etcd's counts of the
        job, queue and sched keys (each a walk of its whole range on etcd 3.4), the scheduled
        ones on either side of the cut at ``now``."""
        k = self._keys
        reads = [ec.get(*k.span("held")), ec.get(*k.span("lease")), ec.get(*k.span("last"), keys_only=True)]
        if counted:
            start, end = k.span("sched")
            cut = k.sched_cut(now)
            reads += [ec.get(*k.span("job"), count_only=True), ec.get(*k.span("queue"), count_only=True),
                      ec.get(start, cut, count_only=True), ec.get(cut, end, count_only=True)]
        res = self._conn.txn([], reads, [], retry=True)
        leases = {kv.key[len(k.section("lease")):]: kv for kv in res.ranges[1]}
        last = {kv.key[len(k.section("last")):] for kv in res.ranges[2]}
        held = []
        for kv in res.ranges[0]:
            suffix = kv.key[len(k.section("held")):]
            try:
                job_id = k.job_id(kv.key, "held")
            except CorruptRecord:
                continue  # not a key tenure made: listed as corrupt by jobs(), never counted here
            held.append((job_id, _owner(kv.value), leases.get(suffix), suffix in last))
            last.discard(suffix)
        jobs, queued, due, scheduled = res.counts[3:7] if counted else (0, 0, 0, 0)
        return _Counts(res.revision, jobs, queued + due, scheduled, held, len(last))

    def counts(self, now: float, soon: float = 0.0) -> Summary:
        c = self._read(now, counted=True)
        live = [lease for _, _, lease, _ in c.held if lease is not None]
        ran_out = sum(1 for _, last in c.ended if last)  # the last attempt's lease ended: parked
        return Summary(now=now, pending=c.pending, leased=len(live),
                       expiring_soon=sum(1 for kv in live if _lease_end(kv, now) <= now + soon),
                       expired=len(c.ended) - ran_out, scheduled=c.scheduled, parked=c.parked + ran_out,
                       completed=max(0, c.jobs - c.pending - c.scheduled - len(c.held) - c.parked))

    def held(self, now: float, expiry: bool) -> list[Held]:
        c = self._read(now, counted=False)
        ended = [job_id for job_id, _ in c.ended]
        until: dict[str, float | None] = {}
        if expiry:  # an expired lease's end is in its job or end key: read the few there are
            for job_id, (job, lease, end) in self._snapshots(ended, c.revision):
                try:
                    rec = record(job_id, job, lease, end, now)
                except CorruptRecord:
                    rec = None
                until[job_id] = rec.lease_until if rec is not None else None
        return [Held(job_id, owner, JobState.LEASED, _lease_end(lease, now)) if lease is not None
                else Held(job_id, owner, JobState.PARKED if last else JobState.EXPIRED, until.get(job_id))
                for job_id, owner, lease, last in c.held]

    def job_ids(self, total: int | None = None) -> list[str]:
        if total is None:
            total = self._count_jobs()[1]
        return self._job_names(total)[0]

    def _count_jobs(self) -> tuple[int, int]:
        """(revision, number of job keys): a walk inside etcd, but no key crosses the wire."""
        res = self._conn.txn([], [ec.get(*self._keys.span("job"), count_only=True)], [], retry=True)
        return res.revision, res.counts[0]

    def _job_names(self, total: int) -> tuple[list[str], list[bytes]]:
        """Every job id sorted, and every job key's name (after ``job/``) in key order: the
        cached ones while there are ``total`` job keys (tenure never deletes one); else the
        cached ones with the keys created since they were read, when those account for the
        new count (one walk inside etcd, only the new keys sent); else all read again."""
        with self._lock:
            revision, count, ids, names = self._names
        if total == count:
            return ids, names
        span, start = self._keys.span("job"), len(self._keys.section("job"))
        if count >= 0:
            res = self._conn.txn([], [ec.get(*span, keys_only=True, created_after=revision),
                                      ec.get(*span, count_only=True)], [], retry=True)
            if count + len(res.ranges[0]) == res.counts[1]:
                ids, names = self._merged(ids, names, res.ranges[0], start)
                with self._lock:
                    self._names = (res.revision, res.counts[1], ids, names)
                return ids, names
        kvs, revision, _ = self._conn.range(*span, keys_only=True)
        ids, names = self._merged([], [], kvs, start)
        with self._lock:
            self._names = (revision, len(kvs), ids, names)
        return ids, names

    def _merged(self, ids: list[str], names: list[bytes], kvs: list[KV], start: int) -> tuple[list[str], list[bytes]]:
        added = []
        for kv in kvs:
            try:
                added.append(self._keys.job_id(kv.key, "job"))
            except CorruptRecord:
                continue  # a key tenure did not make: only a listing shows it
        # Sorting sorted runs is a merge (Timsort), about linear in the names.
        return sorted(ids + added), sorted(names + [kv.key[start:] for kv in kvs])

    def listing_pages(self, size: int) -> tuple[int, list[bytes]]:
        """A revision to list at, and the names that cut the job keys into pages of about
        ``size``: from the cached names when their count is still etcd's, which spares etcd
        sending every key. Any cut is correct (each page reads its whole span)."""
        revision, total = self._count_jobs()
        names = self._job_names(total)[1]
        return revision, names[size::size]

    def statuses(self, job_ids: list[str], now: float) -> list[JobStatus]:
        out = []
        for job_id, (job, lease, end) in self._snapshots(job_ids, 0):
            try:
                rec = record(job_id, job, lease, end, now)
            except CorruptRecord as exc:
                out.append(corrupt_status(job_id, exc.key, exc))
                continue
            if rec is not None:
                out.append(transitions.status(rec, now))
        return out

    def _snapshots(self, job_ids: list[str], revision: int) -> Iterator[tuple[str, list[KV | None]]]:
        """The job, lease and end keys of each job, at ``revision`` (0: the latest), with up to
        ``_IN_FLIGHT`` transactions of reads sent ahead of the one being read."""
        k = self._keys
        sent: collections.deque[tuple[list[str], Pending[TxnResult]]] = collections.deque()

        def answered() -> Iterator[tuple[str, list[KV | None]]]:
            batch, answer = sent.popleft()
            ranges = answer.result().ranges
            for i, job_id in enumerate(batch):
                yield job_id, [r[0] if r else None for r in ranges[3 * i:3 * i + 3]]

        for start in range(0, len(job_ids), _JOBS_PER_TXN):
            batch = job_ids[start:start + _JOBS_PER_TXN]
            reads = [ec.get(key, revision=revision) for job_id in batch
                     for key in (k.job(job_id), k.lease(job_id), k.end(job_id))]
            sent.append((batch, self._conn.txn_started([], reads, [])))
            if len(sent) >= _IN_FLIGHT:
                yield from answered()
        while sent:
            yield from answered()
