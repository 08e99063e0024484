"""``build_indexes``: the ``queue/`` and ``held/`` keys of a store written before they existed
(development versions before 2026-12-02; docs/backends/etcd.md, "Key layout").

Each job gets the index key this version would have written with it (a pending job's queue
key named by ``index_key``), in a transaction that compares the job's keys with what was
read and requires the index key to be absent: safe beside writers of this version, and a
second run adds nothing. Writers of the older versions must be stopped first.
"""

from __future__ import annotations

import itertools
from typing import Any

from tenure.backends.etcd import client as ec
from tenure.backends.etcd.client import KV, Connection
from tenure.backends.etcd.layout import Keys, held_value, index_key, parse, read_job, record
from tenure.core.errors import CorruptRecord
from tenure.core.records import JobState

PAGE = 500  # jobs read per transaction
_BATCH = 20  # additions per transaction: 4 compares and 1 put each, within etcd's 128 operations
_SECTIONS = ("job", "lease", "end", "held")


def _lease_ttl(lease: KV | None) -> float:
    if lease is None:
        return 0.0
    ttl = parse(lease.value).get("ttl")  # record() checked the lease value already
    return float(ttl) if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) else 0.0


def _addition(keys: Keys, job: KV, lease: KV | None, end: KV | None, held: KV | None,
              queued: set[bytes], now: float) -> tuple[list[Any], Any] | None:
    """The compares and the put that index one job, or None if it needs nothing."""
    try:
        job_id = keys.job_id(job.key, "job")
        decoded = read_job(job, job_id)
        rec = record(job_id, job, lease, end, now, value=decoded)
    except CorruptRecord:
        return None  # listed as corrupt; never indexed
    if rec is None:
        return None
    if rec.state is JobState.PENDING:
        found = index_key(keys, job_id, decoded, end)
        if found is None or found in queued:
            return None
        key, value = found, b""
    elif rec.state is JobState.LEASED and rec.owner is not None:
        if held is not None:
            return None
        key, value = keys.held(job_id), held_value(rec.owner, max(rec.ttl or 0.0, _lease_ttl(lease)))
    else:
        return None
    compares = [ec.compare(keys.job(job_id), "mod", "==", job.mod_revision),
                ec.compare(keys.lease(job_id), "create", "==", lease.create_revision if lease else 0),
                ec.compare(keys.end(job_id), "mod", "==", end.mod_revision if end else 0),
                ec.compare(key, "create", "==", 0)]
    return compares, ec.put(key, value)


def build_indexes(conn: Connection, keys: Keys, now: float) -> int:
    """Add the missing ``queue/`` and ``held/`` keys; returns how many were added."""
    spans = {name: keys.span(name) for name in _SECTIONS}
    names, revision, _ = conn.range(*spans["job"], keys_only=True)
    queued = {kv.key for section in ("queue", "sched")
              for kv in conn.range(*keys.span(section), keys_only=True, revision=revision)[0]}
    start = len(keys.section("job"))
    cuts: list[bytes | None] = [b"", *(kv.key[start:] for kv in names[PAGE::PAGE]), None]
    added = 0
    for low, high in itertools.pairwise(cuts):
        assert low is not None
        reads = [ec.get(s + low, s + high if high is not None else e, revision=revision) for s, e in spans.values()]
        ranges = conn.txn([], reads, [], retry=True).ranges
        found = [{kv.key[len(spans[name][0]):]: kv for kv in kvs} for name, kvs in zip(_SECTIONS, ranges, strict=True)]
        jobs, leases, ends, helds = found
        wanted = [a for suffix, job in jobs.items()
                  if (a := _addition(keys, job, leases.get(suffix), ends.get(suffix), helds.get(suffix),
                                     queued, now)) is not None]
        for i in range(0, len(wanted), _BATCH):
            added += _commit(conn, wanted[i:i + _BATCH])
    return added


def _commit(conn: Connection, additions: list[tuple[list[Any], Any]]) -> int:
    """All of them in one transaction, or, if any job changed since it was read, one by one
    (a job that changed is left to the writer that changed it)."""
    compares = [c for cs, _ in additions for c in cs]
    if conn.txn(compares, [put for _, put in additions], []).succeeded:
        return len(additions)
    if len(additions) == 1:
        return 0
    return sum(int(conn.txn(cs, [put], []).succeeded) for cs, put in additions)
