"""The claimable-jobs index on ZooKeeper: which znodes a state change adds or removes, and
the candidates ``claim_next`` reads from it.

The index is written inside the multi of the change it follows (see ``layout``),
so it costs no round trip of its own; it is read only to *propose* jobs, each claimed with the
usual read and version-checked multi. An entry that is stale (its record moved on) or missing
can therefore cost a wasted read or hide a job from ``claim_next``, never give a wrong claim.

Index entries the multi expects but does not find (or finds already there) make it fail like
any lost race; the failing operation names the entry, which the next attempt leaves out as
long as the job's record is still the version it read (``Known``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError
from kazoo.protocol.serialization import Create, Delete
from kazoo.protocol.states import ZnodeStat

from tenure.backends.zookeeper import layout as zl
from tenure.backends.zookeeper.config import mapped_errors
from tenure.backends.zookeeper.multiread import read_many
from tenure.backends.zookeeper.session import Session
from tenure.core import transitions
from tenure.core.errors import CorruptRecord
from tenure.core.records import JobRecord, JobState


@dataclass
class Known:
    """Index entries whose presence a failed multi revealed, for one job record version."""

    version: int | None = None
    present: dict[str, bool] = field(default_factory=dict)

    def at(self, version: int) -> Known:
        if version != self.version:  # the record moved on: what we learned may not hold
            self.version, self.present = version, {}
        return self


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
    def __init__(self, session: Session, enabled: bool, drop_stale: Callable[[str, int | None], None]) -> None:
        """``drop_stale(entry, version)``: delete an index entry that no longer describes its
        job, provided the job znode is still at ``version`` (the backend's multi)."""
        self._b = session
        self._drop_stale = drop_stale
        self.enabled = enabled
        self.layout = session.layout
        self.filling: str | None = None  # the bucket this client puts new entries in
        self._looked = False  # for a bucket to fill, once per client
        self._lock = threading.Lock()
        self._front: list[str] = []  # claim_next's buckets, oldest first, possibly stale

    # -- writing: step 1 ---------------------------------------------------------------------
    def probe(self) -> tuple[str | None, Any]:
        """Pipelined with step 1 of a change that may queue a job: the bucket being filled."""
        if not self.enabled:
            return None, None
        if not self._looked:  # once per client: join the newest bucket rather than open one
            self._looked = True
            with mapped_errors("reading the pending index"):
                names = [n for n in self._b.client.get_children(self.layout.pending)
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

    # -- writing: the multi --------------------------------------------------------------------
    def change(self, old: JobRecord | None, old_slot: str | None, new: JobRecord,
               placer: Placer | None, known: Known | None) -> tuple[str | None, list[tuple[str, str]]]:
        """The index updates of ``old`` -> ``new``, as (``"create"`` or ``"delete"``, path) for
        the multi after the record's write, and the pending slot the new record names."""
        ops: list[tuple[str, str]] = []
        if not self.enabled:
            return None, ops
        present = {} if known is None else known.present
        leased = self.layout.leased_entry(new.job_id)
        was_leased = old is not None and old.state is JobState.LEASED
        if new.state is JobState.LEASED and not was_leased and present.get(leased) is not True:
            ops.append(("create", leased))
        if was_leased and new.state is not JobState.LEASED and present.get(leased) is not False:
            ops.append(("delete", leased))
        was_queued = old is not None and old.state is JobState.PENDING and old_slot is not None
        if new.state is JobState.PENDING and was_queued:
            return old_slot, ops
        if was_queued:
            assert old_slot is not None
            path = self.layout.queued(old_slot)
            if present.get(path) is not False:
                ops.append(("delete", path))
        if new.state is not JobState.PENDING:
            return None, ops
        assert placer is not None, "a change that queues a job probes the bucket in step 1"
        fresh = len(placer.new_buckets)
        slot = placer.place(new.job_id)
        ops.extend(("create", f"{self.layout.pending}/{bucket}") for bucket in placer.new_buckets[fresh:])
        ops.append(("create", self.layout.queued(slot)))
        return slot, ops

    def learn(self, operations: list[Any], results: list[Any], known: Known | None) -> None:
        """After a failed multi: remember an index entry that was (or was not) where expected."""
        if known is None:
            return
        for op, result in zip(operations, results, strict=False):
            path = getattr(op, "path", "")
            if not self._is_entry(path):
                continue
            if isinstance(op, Create) and isinstance(result, NodeExistsError):
                known.present[path] = True
            elif isinstance(op, Delete) and isinstance(result, NoNodeError):
                known.present[path] = False

    def _is_entry(self, path: str) -> bool:
        if path.startswith(self.layout.leased + "/"):
            return True
        return path.startswith(self.layout.pending + "/") and \
            path.count("/") == self.layout.pending.count("/") + 2

    def stale(self, data: bytes | None, rec: JobRecord | None, entry: str) -> bool:
        """Whether ``entry`` no longer describes the record ``data``/``rec`` (None: no job)."""
        if entry.startswith(self.layout.leased + "/"):
            return rec is not None and rec.state is not JobState.LEASED
        slot = entry[len(self.layout.pending) + 1:]
        return rec is None or rec.state is not JobState.PENDING or zl.queued_slot(data) != slot

    # -- reading: claim_next's candidates ------------------------------------------------------
    def candidates(self) -> Iterator[tuple[str, str]]:
        """(job id, index entry) to try: expired leases first (earliest expiry first), then
        pending jobs oldest first. Each is a proposal; the caller claims it with a fresh read."""
        b, client = self._b, self._b.client
        with self._lock:
            front = self._front[:2]
        with mapped_errors("reading the index"):
            clock = client.set_async(b.clock_path, b"")
            leased = client.get_children_async(self.layout.leased)
            early = {n: client.get_children_async(f"{self.layout.pending}/{n}") for n in front}
            try:
                now = b.stamp(b.wait(clock))
            except NoNodeError:
                now = b.now()
            expired = self._expired(b.wait(leased), now)
        yield from expired
        yield from self._queued(now, early)

    def _expired(self, names: list[str], now: float) -> list[tuple[str, str]]:
        found: list[tuple[float, str, str]] = []
        prefix = len(self.layout.jobs) + 1
        paths = [f"{self.layout.jobs}/{n}" for n in names]
        with mapped_errors("reading leased jobs"):
            for path, data, version in read_many(self._b.client, paths, self._b.config.timeout):
                name = path[prefix:]
                entry = f"{self.layout.leased}/{name}"
                try:
                    job_id = zl.decode(name)
                    rec = zl.load_record(data, path, job_id)
                except (CorruptRecord, ValueError):
                    continue  # not a job tenure can claim: never proposed
                if rec.state is not JobState.LEASED:
                    self._drop_stale(entry, version)
                elif transitions.is_claimable(rec, now):
                    found.append((rec.lease_until or 0.0, job_id, entry))
        # An entry without a job znode (deleted by hand) is skipped: see Backend.drop_stale.
        return [(job_id, entry) for _, job_id, entry in sorted(found)]

    def _queued(self, now: float, early: dict[str, Any]) -> Iterator[tuple[str, str]]:
        seen: set[str] = set()
        relisted = False
        while True:
            with self._lock:
                later = [n for n in self._front if n not in seen]
            if not later:
                if relisted:
                    return
                relisted = True  # the cached buckets are used up: list them again, once per call
                with mapped_errors("reading the pending index"):
                    names = sorted(n for n in self._b.client.get_children(self.layout.pending)
                                   if zl.bucket_opened(n) is not None)
                with self._lock:
                    self._front = names
                later = [n for n in names if n not in seen]
                if not later:
                    return
            bucket = later[0]
            seen.add(bucket)
            path = f"{self.layout.pending}/{bucket}"
            with mapped_errors("reading the pending index"):
                try:
                    result = early.pop(bucket, None)
                    children = self._b.wait(result) if result is not None else self._b.client.get_children(path)
                except NoNodeError:
                    children = None
            if not children:
                self._forget(bucket, path, now, gone=children is None)
                continue
            for name in sorted(children):
                with contextlib.suppress(ValueError):  # not an entry tenure made: never proposed
                    yield zl.entry_job(name), f"{path}/{name}"

    def _forget(self, bucket: str, path: str, now: float, *, gone: bool) -> None:
        """An empty bucket: delete it once nobody fills it any more (older than BUCKET_SPAN)."""
        opened = zl.bucket_opened(bucket) or 0.0
        if not gone and opened >= now - 2 * zl.BUCKET_SPAN:
            return  # a submitter may still add to it; keep it listed
        with self._lock:
            self._front = [n for n in self._front if n != bucket]
        if not gone:
            with mapped_errors("tidying the pending index"), \
                    contextlib.suppress(NoNodeError, NotEmptyError):
                self._b.client.delete(path)
