"""The claimable-jobs index on ZooKeeper: which znodes a state change adds or removes, and
the candidates ``claim_next`` reads from it.

The index is written inside the multi of the change it follows (see ``layout``), so it costs
no round trip of its own; it is read only to *propose* jobs, each claimed in a multi that
checks the record's version as any claim does. An entry that is stale (its record moved on)
or missing can therefore cost a wasted read or hide a job from ``claim_next``, never give a
wrong claim. An entry a multi expects to delete but does not find, or means to create and
finds, is left out of the multi, which is sent again (``redundant``): the record was as read.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError
from kazoo.protocol.serialization import Create, Delete
from kazoo.protocol.states import ZnodeStat

from tenure.backends.zookeeper import layout as zl
from tenure.backends.zookeeper.calls import Io
from tenure.backends.zookeeper.config import mapped_errors
from tenure.backends.zookeeper.multiread import reading_many
from tenure.backends.zookeeper.session import Session
from tenure.core import contention, transitions
from tenure.core.records import JobRecord, JobState

PENDING_READS = 8  # pending entries whose records one request reads
Take = Callable[[str, bytes, int], Io[bool]]  # claim_next's judge of a proposed (job id, record, version)


@dataclass
class Placer:
    """Where the pending entries of one multi go: the bucket this client fills, while it is
    young and not full, else a new one created in the same multi."""

    index: Index
    now: float
    bucket: str | None
    fill: int
    new_buckets: list[str] = field(default_factory=list)
    placed: int = 0

    def place(self, job_id: str) -> str:
        if self.bucket is None or self.fill >= zl.BUCKET_SIZE:
            self.bucket, self.fill = zl.new_bucket(self.now, len(self.new_buckets)), 0
            self.new_buckets.append(self.bucket)
            self.index.filling = self.bucket
        self.fill += 1
        self.placed += 1
        return f"{self.bucket}/{zl.entry(job_id, self.now, self.placed)}"


class Index:
    def __init__(self, session: Session, enabled: bool) -> None:
        self._b = session
        self.enabled = enabled
        self.layout = session.layout
        self.filling: str | None = None  # the bucket this client puts new entries in
        self._looked = False  # for a bucket to fill, once per client
        self._lock = threading.Lock()
        self._front: list[str] = []  # claim_next's buckets, oldest first, possibly stale

    # -- writing ---------------------------------------------------------------------------------
    def probe(self) -> Io[tuple[str | None, Any]]:
        """Pipelined with the read of a change that may queue a job: the bucket being filled,
        and the request that reads it (its answer is for ``placer``)."""
        if not self.enabled:
            return None, None
        if not self._looked:  # once per client: join the newest bucket rather than open one
            self._looked = True
            with mapped_errors("reading the pending index"):
                names = [n for n in (yield self._b.client.get_children_async(self.layout.pending))
                         if zl.bucket_opened(n) is not None]
            if names and self.filling is None:
                self.filling = max(names)
        name = self.filling
        return name, None if name is None else self._b.client.exists_async(f"{self.layout.pending}/{name}")

    def placer(self, now: float, name: str | None, stat: ZnodeStat | None) -> Placer:
        opened = None if name is None else zl.bucket_opened(name)
        if stat is None or opened is None or opened < now - zl.BUCKET_SPAN:
            return Placer(self, now, None, 0)
        return Placer(self, now, name, stat.numChildren)

    def change(self, old: JobRecord | None, old_slot: str | None, new: JobRecord,
               placer: Placer | None) -> tuple[str | None, list[tuple[str, str]]]:
        """The index updates of ``old`` -> ``new``, as (``"create"`` or ``"delete"``, path) for
        the multi after the record's write, and the pending slot the new record names."""
        ops: list[tuple[str, str]] = []
        if not self.enabled:
            return None, ops
        leased = self.layout.leased_entry(new.job_id)
        was_leased = old is not None and old.state is JobState.LEASED
        if new.state is JobState.LEASED and not was_leased:
            ops.append(("create", leased))
        if was_leased and new.state is not JobState.LEASED:
            ops.append(("delete", leased))
        was_queued = old is not None and old.state is JobState.PENDING and old_slot is not None
        if new.state is JobState.PENDING and was_queued:
            return old_slot, ops
        if was_queued:
            assert old_slot is not None
            ops.append(("delete", self.layout.queued(old_slot)))
        if new.state is not JobState.PENDING:
            return None, ops
        assert placer is not None, "a change that queues a job probes the bucket when it reads"
        fresh = len(placer.new_buckets)
        slot = placer.place(new.job_id)
        ops.extend(("create", f"{self.layout.pending}/{bucket}") for bucket in placer.new_buckets[fresh:])
        ops.append(("create", self.layout.queued(slot)))
        return slot, ops

    def redundant(self, op: Any, error: Exception) -> bool:
        """Whether a multi failed only because an index entry was already as the op would
        leave it (deleted or created by hand, or by a tidy-up): leave it out and send again."""
        path = getattr(op, "path", "")
        is_entry = path.startswith(self.layout.leased + "/") or (
            path.startswith(self.layout.pending + "/") and path.count("/") == self.layout.pending.count("/") + 2)
        return is_entry and ((isinstance(op, Create) and isinstance(error, NodeExistsError))
                             or (isinstance(op, Delete) and isinstance(error, NoNodeError)))

    def tidy(self, entry: str, job: str | None, version: int) -> None:
        """Delete an index entry that no longer describes its job, provided the job znode
        ``job`` is still at ``version`` (None: there is no job znode). Sent, not waited for:
        tidying only, a failure changes nothing."""
        tx = self._b.client.transaction()
        if job is not None:
            tx.check(job, version)
        tx.delete(entry)
        with contextlib.suppress(Exception):
            tx.commit_async()

    # -- reading: claim_next's candidates ------------------------------------------------------
    def claimable(self, at: Callable[[float, int], None], take: Take) -> Io[str | None]:
        """The first job ``take`` accepts, of (job id, record, version) proposed in order:
        expired leases first (earliest expiry first), then pending jobs oldest first, records
        read after the store's time, which ``at`` gets first (with its epoch). Each is a
        proposal; the claim's multi checks the version."""
        b, client = self._b, self._b.client
        with self._lock:
            front = self._front[:2]
        with mapped_errors("reading the index"):
            clock = client.set_async(b.clock_path, b"")
            leased = client.get_children_async(self.layout.leased)
            early = {n: client.get_children_async(f"{self.layout.pending}/{n}") for n in front}
            try:
                stat = yield clock
                now, epoch = b.stamp(stat), stat.mzxid >> 32
            except NoNodeError:
                now, epoch = yield from b.stamping()
            names = yield leased
        at(now, epoch)
        for job_id, data, version in (yield from self._expired(names, now)):
            if (yield from take(job_id, data, version)):
                return job_id
        return (yield from self._queued(now, early, take))

    def _expired(self, names: list[str], now: float) -> Io[list[tuple[str, bytes, int]]]:
        found: list[tuple[float, str, bytes, int]] = []
        with mapped_errors("reading leased jobs"):
            read = yield from reading_many(self._b.client, [f"{self.layout.jobs}/{n}" for n in names])
            for job_id, rec, data, version in zl.readable(self.layout.jobs, read):  # never proposes the rest
                if rec.state is not JobState.LEASED:
                    self.tidy(self.layout.leased_entry(job_id), self.layout.job(job_id), version)
                elif transitions.is_claimable(rec, now):
                    found.append((rec.lease_until or 0.0, job_id, data, version))
        # An entry without a job znode (deleted by hand) is skipped, never tidied here.
        return [(job_id, data, version) for _, job_id, data, version in sorted(found)]

    def _queued(self, now: float, early: dict[str, Any], take: Take) -> Io[str | None]:
        """Each bucket's entries, oldest first: the cached list of buckets, then the buckets
        listed again once it is used up (once per call)."""
        seen: set[str] = set()
        relisted = False
        while True:
            with self._lock:
                later = [n for n in self._front if n not in seen]
            if not later:
                if relisted:
                    return None
                relisted = True
                with mapped_errors("reading the pending index"):
                    names = sorted(n for n in (yield self._b.client.get_children_async(self.layout.pending))
                                   if zl.bucket_opened(n) is not None)
                with self._lock:
                    self._front = names
                later = [n for n in names if n not in seen]
                if not later:
                    return None
            bucket = later[0]
            seen.add(bucket)
            path = f"{self.layout.pending}/{bucket}"
            with mapped_errors("reading the pending index"):
                try:
                    result = early.pop(bucket, None)
                    children = yield (result if result is not None else self._b.client.get_children_async(path))
                except NoNodeError:
                    children = None
            if not children:
                yield from self._forget(bucket, path, now, gone=children is None)
                continue
            taken = yield from self._bucket(bucket, children, take)
            if taken is not None:
                return taken

    def _bucket(self, bucket: str, names: list[str], take: Take) -> Io[str | None]:
        entries = contention.spread([(job_id, f"{self.layout.pending}/{bucket}/{name}")
                                     for name, job_id in zl.named(sorted(names), zl.entry_job)])
        for start in range(0, len(entries), PENDING_READS):
            chunk = entries[start:start + PENDING_READS]
            paths = [self.layout.job(job_id) for job_id, _ in chunk]
            with mapped_errors("reading pending jobs"):
                read = {p: (d, v) for p, d, v in (yield from reading_many(self._b.client, paths))}
            for (job_id, entry), path in zip(chunk, paths, strict=True):
                data, version = read.get(path, (None, -1))
                if data is None:
                    self.tidy(entry, None, -1)
                elif zl.queued_slot(data) != entry[len(self.layout.pending) + 1:]:
                    self.tidy(entry, path, version)  # claimed, completed or queued elsewhere
                elif (yield from take(job_id, data, version)):
                    return job_id
        return None

    def _forget(self, bucket: str, path: str, now: float, *, gone: bool) -> Io[None]:
        """An empty bucket: delete it once nobody fills it any more (older than BUCKET_SPAN)."""
        opened = zl.bucket_opened(bucket) or 0.0
        if not gone and opened >= now - 2 * zl.BUCKET_SPAN:
            return  # a submitter may still add to it; keep it listed
        with self._lock:
            self._front = [n for n in self._front if n != bucket]
        if not gone:
            with mapped_errors("tidying the pending index"), \
                    contextlib.suppress(NoNodeError, NotEmptyError):
                yield self._b.client.delete_async(path)
