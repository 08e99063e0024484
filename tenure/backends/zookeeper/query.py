"""Operators' queries on ZooKeeper from the claimable index, not from a listing of every job
(docs/backends/zookeeper.md, "Counts and pages for operators").

Each job znode is in one place of the index (a ``pending/`` bucket, ``leased/``, or neither:
completed), so counts are znodes' child counts, read with the leased records in ONE read-only
multi (one moment of the server's state) and checked against the directories' ``cversion``.
Nothing is written to keep them. Job ids in order are ``jobs/``'s children, kept while its
``cversion`` is unchanged. A store without the index lists every job instead.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from kazoo.client import KazooClient

from tenure.backends.zookeeper import layout as zl
from tenure.backends.zookeeper.config import mapped_errors
from tenure.backends.zookeeper.multiread import read_many, read_together
from tenure.core import codec, transitions
from tenure.core.paging import HELD_STATES, Held
from tenure.core.records import JobRecord, JobState, JobStatus, Summary

ROUNDS = 5  # multis tried before the counts settle for names that moved meanwhile
TOGETHER = 2000  # leased records read inside the counting multi (about 700 KB); more are read after it


def listed(name: str, data: bytes, now: float) -> JobStatus | None:
    """For listings: the status at ``now`` of the record in job znode ``name`` the quick way
    (``codec.listed_status``), the name checked by encoding the id the record names; None for
    anything else (a result to decode, anything wrong), which ``status`` reads the general way."""
    try:
        d = codec.json_value(data)
    except ValueError:
        return None
    if type(d) is not dict or d.get("tenure") != zl.FORMAT or d.get("result") is not None:
        return None
    fast = codec.listed_status(d.get("job_id"), d.get("state"), d.get("owner"), d.get("token"), d.get("runs"),
                               d.get("lease_until"), d.get("ttl"), d.get("submitted_at"), d.get("claimed_at"),
                               d.get("renewed_at"), d.get("completed_at"), now)
    return fast if fast is not None and zl.encode(fast.job_id) == name else None


def status(layout: zl.Layout, name: str, data: bytes, now: float) -> JobStatus:
    """The status at ``now`` of the job in znode ``name`` (the listing's fast way first)."""
    fast = listed(name, data, now)
    if fast is not None:
        return fast
    item = zl.decoded(layout.jobs, name, data)
    return transitions.status(item, now) if isinstance(item, JobRecord) else item


def listing(client: KazooClient, layout: zl.Layout, names: list[str], now: float, timeout: float,
            what: str = "listing jobs") -> Iterator[JobStatus]:
    """The statuses at ``now`` of the job znodes ``names`` that exist, in order, streamed."""
    start = len(layout.jobs) + 1
    with mapped_errors(what):
        for path, data, _ in read_many(client, [f"{layout.jobs}/{n}" for n in names], timeout):
            yield status(layout, path[start:], data, now)


class ZooKeeperIndex:
    """``tenure.core.paging.IndexedJobs`` on ZooKeeper's claimable index."""

    def __init__(self, client: KazooClient, layout: zl.Layout, timeout: float) -> None:
        self._client = client
        self._layout = layout
        self._timeout = timeout
        self._lock = threading.Lock()
        self._names: tuple[int, list[str]] = (-1, [])  # (cversion of jobs/, sorted ids)

    def _held_statuses(self, names: list[str], now: float) -> list[JobStatus]:
        return [s for s in listing(self._client, self._layout, names, now, self._timeout, "reading leased jobs")
                if s.state in HELD_STATES]

    def counts(self, now: float, soon: float = 0.0) -> Summary | None:
        """The index's counts at one moment of the server's state (None: the index's znodes
        are gone, deleted by hand)."""
        layout, client = self._layout, self._client
        for attempt in range(ROUNDS):
            with mapped_errors("counting jobs"):
                pending_names = client.get_children_async(layout.pending, include_data=True)
                leased_names = client.get_children_async(layout.leased, include_data=True)
                buckets, pending_stat = pending_names.get(timeout=self._timeout)
                held, leased_stat = leased_names.get(timeout=self._timeout)
            buckets = [b for b in buckets if zl.bucket_opened(b) is not None]
            together = held[:TOGETHER]
            paths = [layout.jobs, layout.pending, layout.leased, *(f"{layout.pending}/{b}" for b in buckets),
                     *(f"{layout.jobs}/{n}" for n in together)]
            with mapped_errors("counting jobs"):
                answers = read_together(client, paths, self._timeout)
            jobs, pending_dir, leased_dir = answers[:3]
            if jobs is None or pending_dir is None or leased_dir is None:
                return None
            if attempt < ROUNDS - 1 and (pending_dir[1].cversion != pending_stat.cversion
                                         or leased_dir[1].cversion != leased_stat.cversion):
                continue  # a bucket or a lease came or went between the names and the multi
            pending = sum(a[1].numChildren for a in answers[3:3 + len(buckets)] if a is not None)
            leases = [s for name, a in zip(together, answers[3 + len(buckets):], strict=True)
                      if a is not None and (s := status(layout, name, a[0], now)).state in HELD_STATES]
            leases += self._held_statuses(held[TOGETHER:], now)  # too many for one request
            expired = sum(1 for s in leases if s.state is JobState.EXPIRED)
            held_count = leased_dir[1].numChildren
            return Summary(now=now, pending=pending, leased=held_count - expired,  # unreadable: live
                           expiring_soon=sum(1 for s in leases if s.state is JobState.LEASED
                                             and s.expires_at is not None and s.expires_at <= now + soon),
                           expired=expired, completed=max(0, jobs[1].numChildren - pending - held_count))
        raise AssertionError("unreachable: the last round returns")

    def held(self, now: float, expiry: bool) -> list[Held]:
        with mapped_errors("listing leased jobs"):
            names = self._client.get_children(self._layout.leased)
        return [Held(s.job_id, s.owner, s.state, s.expires_at) for s in self._held_statuses(names, now)]

    def job_ids(self, total: int | None = None) -> list[str]:
        with mapped_errors("listing jobs"):
            stat = self._client.exists(self._layout.jobs)
        with self._lock:
            cversion, names = self._names
        if stat is not None and stat.cversion == cversion:
            return names
        with mapped_errors("listing jobs"):
            children, stat = self._client.get_children(self._layout.jobs, include_data=True)
        ids = sorted(job_id for _, job_id in zl.named(children))
        with self._lock:
            self._names = (stat.cversion, ids)
        return ids

    def statuses(self, job_ids: list[str], now: float) -> list[JobStatus]:
        return list(listing(self._client, self._layout, [zl.encode(j) for j in job_ids], now, self._timeout,
                            "reading jobs"))
