"""Listing every job on etcd: a paged read at one revision.

A listing reads the job keys a page at a time and, for the same span of ids, the lease and
outcome keys, all at the revision of the first page, so every status is consistent with
the others.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterator

from tenure.backends.etcd import client as ec
from tenure.backends.etcd.client import KV, Connection, Pending, TxnResult
from tenure.backends.etcd.layout import Keys, listed_pending, record
from tenure.core import transitions
from tenure.core.codec import corrupt_status
from tenure.core.errors import CorruptRecord
from tenure.core.records import JobStatus

PAGE = 2000  # jobs per page: one transaction reading their job, lease and end keys
_IN_FLIGHT = 3  # pages asked for ahead of the one being decoded
JOB_SECTIONS = ("job", "lease", "end")


def _by_suffix(kvs: list[KV], start: bytes) -> dict[bytes, KV]:
    return {kv.key[len(start):]: kv for kv in kvs}


def scan(conn: Connection, keys: Keys, now: float, pages: tuple[int, list[bytes]]) -> Iterator[JobStatus]:
    """Every job's status at ``now`` (CORRUPT for one tenure cannot read), by key order.

    ``pages``: the revision to read at and the job key names that cut the listing into pages
    (``EtcdIndex.listing_pages``). etcd 3.4 walks a whole range even to answer a limited read
    of it, so pages read with a limit would cost the rest of the section each; instead each
    page reads exactly its span of the three sections, all at that one revision.
    """
    starts = {name: keys.span(name) for name in JOB_SECTIONS}
    revision, cuts = pages
    bounds: list[bytes | None] = [b"", *cuts, None]
    spans = list(itertools.pairwise(bounds))

    def send(low: bytes | None, high: bytes | None) -> Pending[TxnResult]:
        assert low is not None
        reads = [ec.get(start + low, start + high if high is not None else end, revision=revision)
                 for start, end in starts.values()]
        return conn.txn_started([], reads, [])  # the three spans, one round trip

    # Pages in flight while one is decoded: etcd and the network work while Python decodes.
    sent = collections.deque(send(*span) for span in spans[:_IN_FLIGHT])
    for i in range(len(spans)):
        ranges = sent.popleft().result().ranges
        if i + _IN_FLIGHT < len(spans):
            sent.append(send(*spans[i + _IN_FLIGHT]))
        yield from _statuses(keys, starts, ranges, now)


def _statuses(keys: Keys, starts: dict[str, tuple[bytes, bytes]], ranges: list[list[KV]],
              now: float) -> Iterator[JobStatus]:
    jobs, leases, ends = (_by_suffix(kvs, starts[name][0]) for name, kvs in zip(JOB_SECTIONS, ranges, strict=True))
    # Without lease or outcome keys the job keys are all there is, already in key order.
    suffixes = sorted(set(jobs).union(leases, ends)) if leases or ends else list(jobs)
    for suffix in suffixes:
        job, lease, end = jobs.get(suffix), leases.get(suffix), ends.get(suffix)
        if lease is None and end is None and job is not None:  # most jobs: pending (or parked)
            fast = listed_pending(job, suffix, now)
            if fast is not None:
                yield fast
                continue
        name, kv = next((n, kv) for n, kv in zip(JOB_SECTIONS, (job, lease, end), strict=True) if kv is not None)
        key = kv.key.decode(errors="replace")
        try:
            job_id = keys.job_id(kv.key, name)
        except CorruptRecord as exc:
            yield corrupt_status(key, key, exc)
            continue
        try:
            rec = record(job_id, job, lease, end, now)
        except CorruptRecord as exc:
            yield corrupt_status(job_id, exc.key, exc)
            continue
        if rec is not None:
            yield transitions.status(rec, now)
