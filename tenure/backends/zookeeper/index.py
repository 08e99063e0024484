"""The claimable-jobs index on ZooKeeper: which znodes a state change adds or removes, and
the candidates ``claim_next`` reads from it.

The index is written inside the multi of the change it follows (see ``layout``), so it costs
no round trip of its own; it is read only to *propose* jobs, each claimed in a multi that
checks the record's version as any claim does. An entry that is stale (its record moved on)
or missing can therefore cost a wasted read or hide a job from ``claim_next``, never give a
wrong claim. An entry a multi expects to delete but does not find, or means to create and
finds, is left out of the multi, which is sent again (``redundant``): the record was as read.

Where a record belongs is ``home``, from ``transitions.candidate_at``: a job claimable now
is queued in ``pending/``; one claimable from a time (``claimable_at``) in ``scheduled/``,
in a bucket opened at most ``BUCKET_SPAN`` before that time, so ``claim_next`` passes over
a bucket opened after the store's now and over entries named after it without reading
their records; a lease is in ``leased/`` if its end makes the job claimable, in ``last/``
if it is the job's last attempt (its end parks the job); a parked job is in ``parked/``,
which no claim reads. Ordinary pending entries are never skipped by the time in their
names (a new leader's clock may be behind the one that named them); scheduled ones are
judged on the current leader's clock, as their records are.
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
from tenure.backends.zookeeper.calls import Answer, ZkIo
from tenure.backends.zookeeper.errors import mapped_errors
from tenure.backends.zookeeper.multiread import reading_many
from tenure.backends.zookeeper.session import Session
from tenure.core import order, transitions
from tenure.core.records import JobRecord, JobState, Op

PENDING_READS = 8  # pending entries whose records one request reads
BESIDE = 2  # buckets of the other kind (pending, scheduled) whose entries one bucket's are merged with
Take = Callable[[str, bytes, int], bool]  # claim_next's judge of a proposed (job id, record, version)
QUEUED = ("pending", "scheduled")  # directories of buckets of entries
ONE_EACH = ("leased", "last", "parked")  # directories of one entry per job


def home(rec: JobRecord) -> str | None:
    """The index directory ``rec`` belongs in (None: none, a completed job)."""
    at = transitions.candidate_at(rec)
    if rec.state is JobState.PENDING:
        return "pending" if at is None else "scheduled"
    if rec.state is JobState.LEASED:
        return "leased" if at is not None else "last"
    return "parked" if rec.state is JobState.PARKED else None


def fits(bucket: str, at: float) -> bool:
    """Whether a scheduled entry for ``at`` may go in ``bucket``: opened at most
    ``BUCKET_SPAN`` before it (what the counts and ``claim_next`` rely on)."""
    opened = zl.bucket_opened(bucket)
    return opened is not None and zl.millis(opened) <= zl.millis(at) < zl.millis(opened + zl.BUCKET_SPAN)


@dataclass
class Placer:
    """Where the entries of one multi go: pending ones in the bucket this client fills, while
    it is young and not full, else a new one created in the same multi; scheduled ones in a
    bucket of this client's that ``fits`` their time and is not full, else a new one."""

    index: Index
    now: float
    bucket: str | None
    fill: int
    new_buckets: list[str] = field(default_factory=list)
    placed: int = 0
    later: dict[str, int] = field(default_factory=dict)  # this client's scheduled buckets: entries put

    def copy(self) -> Placer:
        return Placer(self.index, self.now, self.bucket, self.fill, list(self.new_buckets), self.placed,
                      dict(self.later))

    def place(self, job_id: str, at: float | None) -> tuple[str, str | None]:
        """The slot for ``job_id``'s entry (``at``: its ``claimable_at``), and the bucket's
        path when the multi must create it."""
        self.placed += 1
        if at is not None:
            return self._later(job_id, at)
        made = None
        if self.bucket is None or self.fill >= zl.BUCKET_SIZE:
            self.bucket, self.fill = zl.new_bucket(self.now, len(self.new_buckets)), 0
            self.new_buckets.append(self.bucket)
            self.index.filling = made = self.bucket
        self.fill += 1
        return (f"pending/{self.bucket}/{zl.entry(job_id, self.now, self.placed)}",
                None if made is None else f"{self.index.layout.pending}/{made}")

    def _later(self, job_id: str, at: float) -> tuple[str, str | None]:
        bucket = next((b for b, n in sorted(self.later.items()) if n < zl.BUCKET_SIZE and fits(b, at)), None)
        made = None
        if bucket is None:
            bucket = made = zl.new_bucket(at, len(self.new_buckets))
            self.new_buckets.append(bucket)
        self.later[bucket] = self.later.get(bucket, 0) + 1
        return (f"scheduled/{bucket}/{zl.entry(job_id, at, self.placed)}",
                None if made is None else f"{self.index.layout.scheduled}/{made}")


class Index:
    def __init__(self, session: Session, enabled: bool) -> None:
        self._session = session
        self.enabled = enabled
        self.layout = session.layout
        self.filling: str | None = None  # the bucket this client puts new entries in
        self._looked = False  # for a bucket to fill, once per client
        self._lock = threading.Lock()
        self._front: list[str] = []  # claim_next's buckets, oldest first, possibly stale
        self._later: dict[str, int] = {}  # this client's scheduled buckets (committed): entries put
        self._listed_later: list[str] = []  # scheduled/'s buckets as claim_next last listed them
        self._leased = zl.KnownRecords()  # the leased jobs' records claim_next read, decoded

    # -- writing ---------------------------------------------------------------------------------
    def probe(self) -> ZkIo[tuple[str | None, Answer[ZnodeStat | None] | None]]:
        """Pipelined with the read of a change that may queue a job: the bucket being filled,
        and the request that reads it (its answer is for ``placer``)."""
        if not self.enabled:
            return None, None
        if not self._looked:  # once per client: join the newest bucket rather than open one
            self._looked = True
            with mapped_errors("reading the pending index"):
                names = [n for n in (yield self._session.client.get_children_async(self.layout.pending))
                         if zl.bucket_opened(n) is not None]
            if names and self.filling is None:
                self.filling = max(names)
        name = self.filling
        return name, None if name is None else self._session.client.exists_async(f"{self.layout.pending}/{name}")

    def placer(self, now: float, name: str | None, stat: ZnodeStat | None) -> Placer:
        with self._lock:  # scheduled buckets nobody fills any more are forgotten
            self._later = {b: n for b, n in self._later.items()
                           if (zl.bucket_opened(b) or 0.0) + zl.BUCKET_SPAN > now}
            later = dict(self._later)
        opened = None if name is None else zl.bucket_opened(name)
        if stat is None or opened is None or opened < now - zl.BUCKET_SPAN or opened > now:
            return Placer(self, now, None, 0, later=later)
        return Placer(self, now, name, stat.numChildren, later=later)

    def committed(self, placer: Placer) -> None:
        """A multi that placed entries committed: its scheduled buckets exist."""
        with self._lock:
            for bucket, count in placer.later.items():
                self._later[bucket] = max(count, self._later.get(bucket, 0))

    def change(self, op: Op, old: JobRecord | None, old_slot: str | None, new: JobRecord,
               placer: Placer | None) -> tuple[str | None, list[tuple[str, str]]]:
        """The index updates of ``old`` -> ``new`` by ``op``, as (``"create"`` or ``"delete"``,
        path) for the multi after the record's write, and the slot of the entry the new record
        names. Where each entry goes is the records' (``home``): the same operation moves a job
        from different places (a claim from pending, scheduled or an expired lease)."""
        ops: list[tuple[str, str]] = []
        if not self.enabled or op is Op.RENEW:  # a lease's end moved: its entry (leased, last) stays
            return None, ops
        before, after = (None if old is None else home(old)), home(new)
        if before in ONE_EACH and before != after:
            ops.append(("delete", self.layout.entry_in(before, new.job_id)))
        if after in ONE_EACH and before != after:
            ops.append(("create", self.layout.entry_in(after, new.job_id)))
        if before in QUEUED and old_slot is not None:
            assert old is not None
            if after == before and old_slot.startswith(f"{after}/") and new.claimable_at == old.claimable_at:
                return old_slot, ops  # queued as it was, at the same place
            ops.append(("delete", self.layout.slot_path(old_slot)))
        if after not in QUEUED:
            return None, ops
        assert placer is not None, "a change that queues a job probes the bucket when it reads"
        slot, bucket = placer.place(new.job_id, new.claimable_at)
        if bucket is not None:
            ops.append(("create", bucket))
        ops.append(("create", self.layout.slot_path(slot)))
        return slot, ops

    def redundant(self, op: Any, error: Exception) -> bool:
        """Whether a multi failed only because an index entry was already as the op would
        leave it (deleted or created by hand, or by a tidy-up): leave it out and send again."""
        path = getattr(op, "path", "")
        depth = path.count("/") - self.layout.root.count("/")
        inside = path.startswith(self.layout.root + "/")
        directory = path[len(self.layout.root) + 1:].partition("/")[0] if inside else ""
        is_entry = (directory in ONE_EACH and depth == 2) or (directory in QUEUED and depth == 3)
        return is_entry and ((isinstance(op, Create) and isinstance(error, NodeExistsError))
                             or (isinstance(op, Delete) and isinstance(error, NoNodeError)))

    def tidy(self, entry: str, job: str | None, version: int) -> None:
        """Delete an index entry that no longer describes its job, provided the job znode
        ``job`` is still at ``version`` (None: there is no job znode). Sent, not waited for:
        tidying only, a failure changes nothing."""
        tx = self._session.client.transaction()
        if job is not None:
            tx.check(job, version)
        tx.delete(entry)
        with contextlib.suppress(Exception):
            tx.commit_async()

    # -- reading: claim_next's candidates ------------------------------------------------------
    def claimable(self, at: Callable[[float, int], None], take: Take, n: int = 1) -> ZkIo[list[str]]:
        """The first ``n`` jobs ``take`` accepts, of (job id, record, version) proposed in order:
        expired leases first (earliest expiry first), then queued jobs by when they became
        claimable (pending and due scheduled buckets in the order of their names), records
        read after the store's time, which ``at`` gets first (with its epoch). Each is a
        proposal; the claim's multi checks the version."""
        b, client = self._session, self._session.client
        guess = b.estimated_now()  # only chooses what to read early; the store's time decides
        with self._lock:
            front = self._front[:2]
            opened = [n for n in self._listed_later if (zl.bucket_opened(n) or guess + 1) <= guess][:2]
        with mapped_errors("reading the index"):
            clock = client.set_async(b.clock_path, b"")
            leased = client.get_children_async(self.layout.leased)
            scheduled = client.get_children_async(self.layout.scheduled)
            early = {("pending", n): client.get_children_async(f"{self.layout.pending}/{n}") for n in front}
            early.update({("scheduled", n): client.get_children_async(f"{self.layout.scheduled}/{n}")
                          for n in opened})
            try:
                stat = yield clock
                now, epoch = b.stamp(stat), stat.mzxid >> 32
            except NoNodeError:
                now, epoch = yield from b.stamping()
            names = yield leased
            try:
                listed = sorted(n for n in (yield scheduled) if zl.bucket_opened(n) is not None)
            except NoNodeError:  # deleted by hand: nothing scheduled is proposed
                listed = []
        with self._lock:
            self._listed_later = listed
        due = [n for n in listed if (zl.bucket_opened(n) or now + 1) <= now]
        at(now, epoch)
        for name in due[:2]:  # those not read early: sent with the leased jobs' records
            if ("scheduled", name) not in early:
                early[("scheduled", name)] = client.get_children_async(f"{self.layout.scheduled}/{name}")
        taken: list[str] = []
        for job_id, data, version in (yield from self._expired(names, now)):
            if take(job_id, data, version):
                taken.append(job_id)
                if len(taken) == n:
                    return taken
        return taken + (yield from self._queued(now, early, due, take, n - len(taken)))

    def _expired(self, names: list[str], now: float) -> ZkIo[list[tuple[str, bytes, int]]]:
        found: dict[str, tuple[bytes, int]] = {}
        ends: list[order.Expired] = []
        with mapped_errors("reading leased jobs"):
            read = yield from reading_many(self._session.client, [f"{self.layout.jobs}/{n}" for n in names])
            # Never proposes what it cannot read.
            for job_id, rec, data, version in zl.readable(self.layout.jobs, read, self._leased):
                if home(rec) != "leased":
                    self.tidy(self.layout.leased_entry(job_id), self.layout.job(job_id), version)
                elif transitions.is_claimable(rec, now):
                    found[job_id] = data, version
                    ends.append(order.Expired(rec.lease_until or 0.0, job_id))
            self._leased.settle()
        # An entry without a job znode (deleted by hand) is skipped, never tidied here.
        return [(job_id, *found[job_id]) for job_id in order.job_ids(order.ordered(sorted(ends)))]

    def _queued(self, now: float, early: dict[tuple[str, str], Answer[list[str]]], due: list[str], take: Take,
                n: int) -> ZkIo[list[str]]:
        """Queued entries by when they became claimable: the oldest bucket (by name, of the
        cached pending buckets and the due scheduled ones), with up to BESIDE of the other
        kind opened before its newest entry (their entries interleave with its own), merged
        by name; the pending buckets listed again once the cached ones are used up (once per
        call). Pending buckets of different clients are taken one after the other, as before
        scheduled jobs: FIFO to within BUCKET_SPAN between them."""
        seen: set[tuple[str, str]] = set()
        relisted = False
        taken: list[str] = []
        while len(taken) < n:
            with self._lock:
                later = [("pending", n) for n in self._front if ("pending", n) not in seen]
            if not later and not relisted:
                relisted = True
                with mapped_errors("reading the pending index"):
                    names = sorted(n for n in (yield self._session.client.get_children_async(self.layout.pending))
                                   if zl.bucket_opened(n) is not None)
                with self._lock:
                    self._front = names
                later = [("pending", n) for n in names if ("pending", n) not in seen]
            later = sorted(later + [("scheduled", n) for n in due if ("scheduled", n) not in seen],
                           key=lambda found: found[1])  # names sort by when opened
            if not later:
                break
            seen.add(later[0])
            entries = yield from self._entries([later[0]], now, early)
            newest = max((zl.entry_millis(name) or 0 for _, name in entries), default=-1)
            beside = [b for b in later[1:] if b[0] != later[0][0]
                      and zl.millis(zl.bucket_opened(b[1]) or 0.0) <= newest][:BESIDE]
            seen.update(beside)
            entries += yield from self._entries(beside, now, early)
            taken += yield from self._take_first(sorted(entries, key=lambda found: found[1]), take, n - len(taken))
        return taken

    def _entries(self, buckets: list[tuple[str, str]], now: float,
                 early: dict[tuple[str, str], Answer[list[str]]]) -> ZkIo[list[tuple[str, str]]]:
        """(bucket's path below the root, entry name) of the entries of ``buckets`` that are
        due (all of a pending bucket's), read together; an empty bucket is ``_forget``-ten."""
        client = self._session.client
        sent = []
        for kind, bucket in buckets:  # all sent before any is waited for
            result = early.pop((kind, bucket), None)
            sent.append((kind, bucket, result if result is not None
                         else client.get_children_async(f"{self.layout.root}/{kind}/{bucket}")))
        found: list[tuple[str, str]] = []
        for kind, bucket, result in sent:
            with mapped_errors("reading the pending index"):
                try:
                    children = yield result
                except NoNodeError:
                    children = None
            if not children:
                yield from self._forget(kind, bucket, f"{self.layout.root}/{kind}/{bucket}", now,
                                        gone=children is None)
            elif kind == "scheduled":  # not due yet: not proposed, their records not read
                found += [(f"{kind}/{bucket}", n) for n in children if (zl.entry_millis(n) or 0) <= zl.millis(now)]
            else:
                found += [(f"{kind}/{bucket}", n) for n in children]
        return found

    def _take_first(self, found: list[tuple[str, str]], take: Take, n: int) -> ZkIo[list[str]]:
        """The first ``n`` of the entries ``found`` whose jobs ``take`` accepts, in claim_next's
        order (``order.ordered``: by name, which sorts by time, then by place in its multi),
        each claimer starting a few places in at random (``spread``)."""
        queued = sorted(order.Queued((zl.entry_millis(name) or 0) / 1000, name, job_id, f"{where}/{name}")
                        for where, name in found for _, job_id in zl.named([name], zl.entry_job))
        entries = [(entry.job_id, entry.found) for entry in order.queue_order(queued, spread=True)]
        taken: list[str] = []
        start = 0
        while start < len(entries) and len(taken) < n:
            chunk = entries[start:start + max(PENDING_READS, n - len(taken))]  # a batch reads as many at once
            start += len(chunk)
            paths = [self.layout.job(job_id) for job_id, _ in chunk]
            with mapped_errors("reading pending jobs"):
                read = {p: (d, v) for p, d, v in (yield from reading_many(self._session.client, paths))}
            for (job_id, slot), path in zip(chunk, paths, strict=True):
                data, version = read.get(path, (None, -1))
                entry = self.layout.slot_path(slot)
                if data is None:
                    self.tidy(entry, None, -1)
                elif zl.entry_slot(data) != slot:
                    self.tidy(entry, path, version)  # claimed, completed or queued elsewhere
                elif len(taken) < n and take(job_id, data, version):
                    taken.append(job_id)
        return taken

    def _forget(self, kind: str, bucket: str, path: str, now: float, *, gone: bool) -> ZkIo[None]:
        """An empty bucket: delete it once nobody fills it any more (opened more than
        BUCKET_SPAN before the last time anyone may put an entry in it)."""
        opened = zl.bucket_opened(bucket) or 0.0
        if not gone and opened >= now - 2 * zl.BUCKET_SPAN:
            return  # a submitter may still add to it; keep it listed
        if kind == "pending":
            with self._lock:
                self._front = [n for n in self._front if n != bucket]
        if not gone:
            with mapped_errors("tidying the pending index"), \
                    contextlib.suppress(NoNodeError, NotEmptyError):
                yield self._session.client.delete_async(path)
