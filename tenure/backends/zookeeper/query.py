"""Operators' queries on ZooKeeper from the claimable index, not from a listing of every job
(docs/backends/zookeeper.md, "Counts and pages for operators").

Each job znode is in one place of the index (a ``pending/`` or ``scheduled/`` bucket,
``leased/``, ``last/``, ``parked/``, or none: completed), so counts are znodes' child counts,
read with the held records in ONE read-only multi (one moment of the server's state) and
checked against the directories' ``cversion``. A scheduled bucket is wholly due once its
``BUCKET_SPAN`` has passed and wholly scheduled before it opens; only the few in between have
their entries' names read. Nothing is written to keep the counts. Job ids in order are
``jobs/``'s children, kept while its ``cversion`` is unchanged. A store without the index
lists every job instead.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import ZnodeStat

from tenure.backends.zookeeper import layout as zl
from tenure.backends.zookeeper.calls import Client
from tenure.backends.zookeeper.errors import mapped_errors
from tenure.backends.zookeeper.multiread import read_many, read_together
from tenure.core import codec, transitions
from tenure.core.records import JobRecord, JobState, JobStatus, Summary
from tenure.views.paging import HELD_STATES, Held

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
                               d.get("renewed_at"), d.get("completed_at"), now,
                               **{name: d.get(name) for name in codec.LIFE_FIELDS})
    return fast if fast is not None and zl.encode(fast.job_id) == name else None


def status(layout: zl.Layout, name: str, data: bytes, now: float) -> JobStatus:
    """The status at ``now`` of the job in znode ``name`` (the listing's fast way first)."""
    fast = listed(name, data, now)
    if fast is not None:
        return fast
    item = zl.decoded(layout.jobs, name, data)
    return transitions.status(item, now) if isinstance(item, JobRecord) else item


def listing(client: Client, layout: zl.Layout, names: list[str], now: float, timeout: float,
            what: str = "listing jobs") -> Iterator[JobStatus]:
    """The statuses at ``now`` of the job znodes ``names`` that exist, in order, streamed."""
    start = len(layout.jobs) + 1
    with mapped_errors(what):
        for path, data, _ in read_many(client, [f"{layout.jobs}/{n}" for n in names], timeout):
            yield status(layout, path[start:], data, now)


def _straddles(bucket: str, now: float) -> bool:
    """Whether a scheduled bucket holds entries both due and not at ``now`` (``index.fits``)."""
    opened = zl.bucket_opened(bucket) or 0.0
    return zl.millis(opened) <= zl.millis(now) < zl.millis(opened + zl.BUCKET_SPAN)


def _scheduled(buckets: list[str], stats: list[ZnodeStat | None], names: dict[str, list[str]],
               now: float) -> tuple[int, int]:
    """(due, not yet) of the entries of scheduled ``buckets`` at ``now``, from their stats
    (None: gone) and, for those that straddle it, their entries' ``names``."""
    due = scheduled = 0
    for bucket, stat in zip(buckets, stats, strict=True):
        if stat is None:
            continue
        if bucket in names:
            ready = sum(1 for n in names[bucket] if (zl.entry_millis(n) or 0) <= zl.millis(now))
        else:
            ready = stat.numChildren if (zl.bucket_opened(bucket) or 0.0) <= now else 0
        due, scheduled = due + ready, scheduled + stat.numChildren - ready
    return due, scheduled


class ZooKeeperIndex:
    """``tenure.views.paging.IndexedJobs`` on ZooKeeper's claimable index."""

    def __init__(self, client: Client, layout: zl.Layout, timeout: float) -> None:
        self._client = client
        self._layout = layout
        self._timeout = timeout
        self._lock = threading.Lock()
        self._names: tuple[int, list[str]] = (-1, [])  # (cversion of jobs/, sorted ids)

    def _held_statuses(self, names: list[str], now: float) -> list[JobStatus]:
        """Those of ``names`` (leased/ and last/ entries) with a lease end: held, or parked by it."""
        return [s for s in listing(self._client, self._layout, names, now, self._timeout, "reading leased jobs")
                if s.state in HELD_STATES or (s.state is JobState.PARKED and s.expires_at is not None)]

    def counts(self, now: float, soon: float = 0.0) -> Summary | None:
        """The index's counts at one moment of the server's state (None: the index's znodes
        are gone, deleted by hand)."""
        layout, client = self._layout, self._client
        dirs = (layout.pending, layout.scheduled, layout.leased, layout.last)
        for attempt in range(ROUNDS):
            with mapped_errors("counting jobs"):
                listings = [client.get_children_async(d, include_data=True) for d in dirs]
                try:
                    (buckets, pending_stat), (later, later_stat), (held, leased_stat), (last, last_stat) = (
                        r.get(timeout=self._timeout) for r in listings)
                except NoNodeError:
                    return None
            buckets = [b for b in buckets if zl.bucket_opened(b) is not None]
            later = [b for b in later if zl.bucket_opened(b) is not None]
            straddling = [b for b in later if _straddles(b, now)]
            with mapped_errors("counting jobs"):  # those few by name: which entries are due
                named = [client.get_children_async(f"{layout.scheduled}/{b}", include_data=True) for b in straddling]
                entries = {b: r.get(timeout=self._timeout) for b, r in zip(straddling, named, strict=True)}
            held_names = held + last
            together = held_names[:TOGETHER]
            paths = [layout.jobs, *dirs, layout.parked, *(f"{layout.pending}/{b}" for b in buckets),
                     *(f"{layout.scheduled}/{b}" for b in later), *(f"{layout.jobs}/{n}" for n in together)]
            with mapped_errors("counting jobs"):
                answers = read_together(client, paths, self._timeout)
            top, answers = answers[:6], answers[6:]
            if any(a is None for a in top):
                return None
            jobs, pending_dir, later_dir, leased_dir, last_dir, parked_dir = (a for a in top if a is not None)
            bucket_stats = [a[1] if a is not None else None for a in answers[:len(buckets)]]
            later_stats = [a[1] if a is not None else None for a in answers[len(buckets):len(buckets) + len(later)]]
            records = answers[len(buckets) + len(later):]
            moved = any(d[1].cversion != listed.cversion for d, listed in (
                (pending_dir, pending_stat), (later_dir, later_stat), (leased_dir, leased_stat), (last_dir, last_stat)))
            moved = moved or any(stat is not None and stat.cversion != entries[b][1].cversion
                                 for b, stat in zip(later, later_stats, strict=True) if b in entries)
            if attempt < ROUNDS - 1 and moved:
                continue  # a bucket, an entry or a lease came or went between the names and the multi
            pending = sum(stat.numChildren for stat in bucket_stats if stat is not None)
            due, scheduled = _scheduled(later, later_stats, {b: names for b, (names, _) in entries.items()}, now)
            statuses = [status(layout, name, a[0], now) for name, a in zip(together, records, strict=True)
                        if a is not None]
            statuses += list(listing(client, layout, held_names[TOGETHER:], now, self._timeout,
                                     "reading leased jobs"))  # too many for one request
            expired = sum(1 for s in statuses if s.state is JobState.EXPIRED)
            spent = sum(1 for s in statuses if s.state is JobState.PARKED)  # their last lease ran out
            indexed_held = leased_dir[1].numChildren + last_dir[1].numChildren
            parked = parked_dir[1].numChildren
            return Summary(now=now, pending=pending + due, leased=indexed_held - expired - spent,  # unreadable: live
                           expiring_soon=sum(1 for s in statuses if s.state is JobState.LEASED
                                             and s.expires_at is not None and s.expires_at <= now + soon),
                           expired=expired, scheduled=scheduled, parked=parked + spent,
                           completed=max(0, jobs[1].numChildren - pending - due - scheduled - indexed_held - parked))
        raise AssertionError("unreachable: the last round returns")

    def held(self, now: float, expiry: bool) -> list[Held]:
        with mapped_errors("listing leased jobs"):
            both = [self._client.get_children_async(d) for d in (self._layout.leased, self._layout.last)]
            names = [n for r in both for n in r.get(timeout=self._timeout)]
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
