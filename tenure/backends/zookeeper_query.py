"""Operators' queries on ZooKeeper from the claimable index, not from a listing of every job.

Every job znode is in exactly one place of the index (``zookeeper_layout``), kept so by the
multis that change it: an entry in a ``pending/`` bucket (pending), a ``leased/`` entry
(leased, live or expired), or neither (completed). ZooKeeper keeps each znode's number of
children in its stat, so the counts are stats, not listings: ``jobs/``, ``leased/`` and each
pending bucket, read with the records of the leased jobs (their expiry decides live or
expired, by the store's clock) in ONE read-only multi, which the server answers with no write
applied in between. The names read before it are checked against the directories' child
versions (``cversion``) in that same answer, so the multi read exactly the buckets and leases
there were. Nothing is written to keep these counts: no crash can leave them wrong.

A store made before the index (``Index.enabled`` false) has none of this: its queries list
every job (``Backend.summary``/``page``). A record damaged behind tenure's back is counted
where its index puts it; only a listing finds it corrupt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient

from tenure.backends import zookeeper_layout as zl
from tenure.backends.zookeeper_config import mapped_errors
from tenure.backends.zookeeper_multiread import read_many, read_together
from tenure.core import transitions
from tenure.core.backend import fold
from tenure.core.errors import CorruptRecord
from tenure.core.records import JobPage, JobState, JobStatus, Summary

HELD_STATES = frozenset({JobState.LEASED, JobState.EXPIRED})
ROUNDS = 5  # multis tried before the counts settle for names that moved meanwhile
TOGETHER = 5000  # leased records read inside the counting multi; more are read after it


@dataclass(frozen=True)
class Counts:
    jobs: int
    pending: int
    held: int
    leases: list[JobStatus]  # the leased jobs' statuses at ``now`` (unreadable ones left out)


def _status(layout: zl.Layout, name: str, data: bytes, now: float) -> JobStatus | None:
    """A leased entry's job at ``now``; None if it is no job tenure can read, or not leased."""
    status = zl.load_status(data, name, now)
    if status is None:
        try:
            status = transitions.status(zl.load_record(data, f"{layout.jobs}/{name}", zl.decode(name)), now)
        except (CorruptRecord, ValueError):
            return None
    return status if status.state in HELD_STATES else None


def counts(client: KazooClient, layout: zl.Layout, timeout: float, now: float) -> Counts | None:
    """The index's counts and the leases, at one moment of the server's state (None: the
    index's znodes are gone, deleted by hand)."""
    for attempt in range(ROUNDS):
        with mapped_errors("counting jobs"):
            pending_names = client.get_children_async(layout.pending, include_data=True)
            leased_names = client.get_children_async(layout.leased, include_data=True)
            buckets, pending_stat = pending_names.get(timeout=timeout)
            held, leased_stat = leased_names.get(timeout=timeout)
        buckets = [b for b in buckets if zl.bucket_opened(b) is not None]
        together = held[:TOGETHER]
        paths = [layout.jobs, layout.pending, layout.leased, *(f"{layout.pending}/{b}" for b in buckets),
                 *(f"{layout.jobs}/{n}" for n in together)]
        with mapped_errors("counting jobs"):
            answers = read_together(client, paths, timeout)
        jobs, pending_dir, leased_dir = answers[:3]
        if jobs is None or pending_dir is None or leased_dir is None:
            return None
        settled = (pending_dir[1].cversion == pending_stat.cversion
                   and leased_dir[1].cversion == leased_stat.cversion)
        if not settled and attempt < ROUNDS - 1:
            continue  # a bucket or a lease came or went between the names and the multi
        bucket_answers = answers[3:3 + len(buckets)]
        pending = sum(a[1].numChildren for a in bucket_answers if a is not None)
        leases = [s for name, a in zip(together, answers[3 + len(buckets):], strict=True)
                  if a is not None and (s := _status(layout, name, a[0], now)) is not None]
        if len(held) > TOGETHER:  # too many for one request: the rest are read just after it
            rest = [f"{layout.jobs}/{n}" for n in held[TOGETHER:]]
            start = len(layout.jobs) + 1
            with mapped_errors("reading leased jobs"):
                leases += [s for path, data, _ in read_many(client, rest, timeout)
                           if (s := _status(layout, path[start:], data, now)) is not None]
        return Counts(jobs[1].numChildren, pending, leased_dir[1].numChildren, leases)
    raise AssertionError("unreachable: the last round always returns")


def summary(client: KazooClient, layout: zl.Layout, timeout: float, now: float, soon: float,
            rejections_last_hour: Callable[[], int]) -> Summary | None:
    c = counts(client, layout, timeout, now)
    if c is None:
        return None
    expired = sum(1 for s in c.leases if s.state is JobState.EXPIRED)
    live = c.held - expired  # a leased entry whose record cannot be read counts as live
    expiring = sum(1 for s in c.leases if s.state is JobState.LEASED and s.expires_at is not None
                   and s.expires_at <= now + soon)
    return Summary(now=now, pending=c.pending, leased=live, expiring_soon=expiring, expired=expired,
                   completed=max(0, c.jobs - c.pending - c.held),
                   rejections_last_hour=rejections_last_hour())


def page(client: KazooClient, layout: zl.Layout, timeout: float, now: float, states: frozenset[JobState],
         job: str | None, owner: str | None, order: str, offset: int, limit: int) -> JobPage:
    """A page of leased and/or expired jobs (``states`` within ``HELD_STATES``), read from the
    ``leased/`` entries' records only."""
    with mapped_errors("listing leased jobs"):
        names = client.get_children(layout.leased)
    start = len(layout.jobs) + 1
    with mapped_errors("reading leased jobs"):
        found = [s for path, data, _ in read_many(client, [f"{layout.jobs}/{n}" for n in names], timeout)
                 if (s := _status(layout, path[start:], data, now)) is not None and s.state in states
                 and (job is None or fold(job) in fold(s.job_id))
                 and (owner is None or fold(owner) in fold(s.owner or ""))]
    if order == "expiry":
        found.sort(key=lambda s: (s.expires_at is None, s.expires_at or 0.0, s.job_id))
    else:
        found.sort(key=lambda s: s.job_id)
    return JobPage(found[offset:offset + limit], len(found), offset, limit)
