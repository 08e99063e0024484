"""Operators' queries on etcd from the indexes, not from a listing of every job.

Every job is in exactly one of three places, kept so by the transactions that change it
(``etcd_layout``): a ``queue/`` key (pending), a ``held/`` key (leased, live or expired), or
neither (completed). A ``lease/`` key lives beside the held key while etcd keeps the lease:
a held key without one is an expired lease, by etcd's own clock. So one read-only
transaction, at one revision, counts them all: etcd counts ``job/`` and ``queue/`` itself
(``count_only``: no key crosses the wire) and sends the held and lease keys, whose number is
that of the leases, not of the jobs. Nothing is written to keep these counts, so no crash
between round trips can leave them wrong and no store needs an upgrade: the indexes are as
old as the etcd backend's first release.

A record damaged behind tenure's back is counted where its index puts it; only a listing
(``jobs()``, or a ``page()`` that asks for corrupt records) reads every record and finds it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from tenure.backends import etcd_client as ec
from tenure.backends.etcd_client import KV, Connection
from tenure.backends.etcd_layout import Keys, record
from tenure.core import transitions
from tenure.core.backend import fold
from tenure.core.errors import CorruptRecord
from tenure.core.records import JobPage, JobState, JobStatus, Summary

HELD_STATES = frozenset({JobState.LEASED, JobState.EXPIRED})
_JOBS_PER_TXN = 40  # 3 reads each: within etcd's default of 128 operations per transaction


@dataclass(frozen=True)
class Held:
    """A held job as the indexes show it: its owner, and its lease's end if etcd keeps it."""

    job_id: str
    owner: str | None
    lease: KV | None  # None: etcd ended the lease (or an operator did): expired


@dataclass(frozen=True)
class Counts:
    revision: int
    jobs: int
    pending: int
    held: list[Held]


def counts(conn: Connection, k: Keys) -> Counts:
    """The indexes at one revision (one round trip)."""
    res = conn.txn([], [ec.get(*k.span("job"), count_only=True),
                                 ec.get(*k.span("queue"), count_only=True),
                                 ec.get(*k.span("held")), ec.get(*k.span("lease"))], [], retry=True)
    jobs, pending = res.counts[0], res.counts[1]
    held_kvs, lease_kvs = res.ranges[2], res.ranges[3]
    leases = {kv.key[len(k.section("lease")):]: kv for kv in lease_kvs}
    held = []
    for kv in held_kvs:
        try:
            job_id = k.job_id(kv.key, "held")
        except CorruptRecord:
            continue  # not a key tenure made: listed as corrupt by jobs(), never counted here
        held.append(Held(job_id, _owner(kv.value), leases.get(kv.key[len(k.section("held")):])))
    return Counts(res.revision, jobs, pending, held)


def _owner(value: bytes) -> str | None:
    try:
        owner = json.loads(value).get("owner")
    except (ValueError, AttributeError):
        return None
    return owner if isinstance(owner, str) else None


def _lease_end(kv: KV, now: float) -> float:
    """When a live lease ends, as ``etcd_layout.record`` judges it: never before ``now``."""
    try:
        expires_at = json.loads(kv.value).get("expires_at")
    except (ValueError, AttributeError):
        expires_at = None
    if isinstance(expires_at, bool) or not isinstance(expires_at, (int, float)):
        return now + 1e-3
    return max(float(expires_at), now + 1e-3)


def summary(conn: Connection, keys: Keys, now: float, soon: float, rejections_last_hour: int) -> Summary:
    c = counts(conn, keys)
    live = [h for h in c.held if h.lease is not None]
    expiring = sum(1 for h in live if h.lease is not None and _lease_end(h.lease, now) <= now + soon)
    held = len(c.held)
    return Summary(now=now, pending=c.pending, leased=len(live), expiring_soon=expiring,
                   expired=held - len(live), completed=max(0, c.jobs - c.pending - held),
                   rejections_last_hour=rejections_last_hour)


def _snapshots(conn: Connection, k: Keys, job_ids: list[str], revision: int
               ) -> Iterator[tuple[str, list[KV | None]]]:
    """The job, lease and end keys of each job, read at ``revision``."""
    for start in range(0, len(job_ids), _JOBS_PER_TXN):
        batch = job_ids[start:start + _JOBS_PER_TXN]
        reads = [ec.get(key, revision=revision) for job_id in batch
                 for key in (k.job(job_id), k.lease(job_id), k.end(job_id))]
        ranges = conn.txn([], reads, [], retry=True).ranges
        for i, job_id in enumerate(batch):
            yield job_id, [r[0] if r else None for r in ranges[3 * i:3 * i + 3]]


def _expired_until(job_id: str, parts: list[KV | None], now: float) -> float | None:
    """When an expired lease ended, as the listing shows it (None: not an expired lease now)."""
    job, lease, end = parts
    try:
        rec = record(job_id, job, lease, end, now)
    except CorruptRecord:
        return None
    return rec.lease_until if rec is not None and rec.state is JobState.LEASED else None


def page(conn: Connection, keys: Keys, now: float, states: frozenset[JobState], job: str | None,
         owner: str | None, order: str, offset: int, limit: int) -> JobPage:
    """A page of leased and/or expired jobs (``states`` within ``HELD_STATES``)."""
    c = counts(conn, keys)
    chosen = [h for h in c.held
              if (JobState.LEASED if h.lease is not None else JobState.EXPIRED) in states
              and (job is None or fold(job) in fold(h.job_id))
              and (owner is None or fold(owner) in fold(h.owner or ""))]
    if order == "expiry":
        ended = [h.job_id for h in chosen if h.lease is None]
        until = {job_id: _expired_until(job_id, parts, now)
                 for job_id, parts in _snapshots(conn, keys, ended, c.revision)}
        chosen.sort(key=lambda h: (_lease_end(h.lease, now) if h.lease is not None
                                   else until.get(h.job_id) or now, h.job_id))
    else:
        chosen.sort(key=lambda h: h.job_id)
    wanted = chosen[offset:offset + limit]
    found: list[JobStatus] = []
    for job_id, (jv, lv, ev) in _snapshots(conn, keys, [h.job_id for h in wanted], c.revision):
        try:
            rec = record(job_id, jv, lv, ev, now)
        except CorruptRecord:
            continue  # counted by its index, shown as corrupt by a listing
        if rec is not None:
            found.append(transitions.status(rec, now))
    return JobPage(found, len(chosen), offset, limit)

