"""Reading many jobs from etcd: a paged listing at one revision, and a live watch.

A listing reads the job keys a page at a time and, for the same span of ids, the lease and
outcome keys, all at the revision of the first page, so every status is consistent with
the others. ``watch`` lists once, then follows an etcd watch on the whole prefix from that
revision and re-reads only the jobs whose keys changed.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import queue
import threading
from collections.abc import Callable, Iterable, Iterator

from tenure.backends.etcd import client as ec
from tenure.backends.etcd.client import KV, Connection, Pending, TxnResult, WatchStream
from tenure.backends.etcd.layout import Keys, listed_pending, read_rejection, record
from tenure.core import transitions
from tenure.core.clock import boot_clock
from tenure.core.codec import corrupt_status
from tenure.core.errors import BackendUnavailable, CorruptRecord
from tenure.core.records import Change, JobStatus

PAGE = 2000  # jobs per page: one transaction reading their job, lease and end keys
_IN_FLIGHT = 3  # pages asked for ahead of the one being decoded
_JOB_SECTIONS = ("job", "lease", "end")


def _by_suffix(kvs: list[KV], start: bytes) -> dict[bytes, KV]:
    return {kv.key[len(start):]: kv for kv in kvs}


def scan(conn: Connection, keys: Keys, now: float, pages: tuple[int, list[bytes]]) -> Iterator[JobStatus]:
    """Every job's status at ``now`` (CORRUPT for one tenure cannot read), by key order.

    ``pages``: the revision to read at and the job key names that cut the listing into pages
    (``EtcdIndex.listing_pages``). etcd 3.4 walks a whole range even to answer a limited read
    of it, so pages read with a limit would cost the rest of the section each; instead each
    page reads exactly its span of the three sections, all at that one revision.
    """
    starts = {name: keys.span(name) for name in _JOB_SECTIONS}
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
    jobs, leases, ends = (_by_suffix(kvs, starts[name][0]) for name, kvs in zip(_JOB_SECTIONS, ranges, strict=True))
    # Without lease or outcome keys the job keys are all there is, already in key order.
    suffixes = sorted(set(jobs).union(leases, ends)) if leases or ends else list(jobs)
    for suffix in suffixes:
        job, lease, end = jobs.get(suffix), leases.get(suffix), ends.get(suffix)
        if lease is None and end is None and job is not None:  # most jobs: pending (or parked)
            fast = listed_pending(job, suffix, now)
            if fast is not None:
                yield fast
                continue
        name, kv = next((n, kv) for n, kv in zip(_JOB_SECTIONS, (job, lease, end), strict=True) if kv is not None)
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


class QueueCursor:
    """Reads the oldest ``queue/`` keys without making etcd walk the whole queue.

    etcd 3.4 walks every key of a range to answer it, even with a limit of one (its index has
    no limited walk before 3.5): at 100,000 queued jobs a read of the 32 oldest took 220 ms.
    So reads are bounded in the key space: from the oldest key this process saw (the floor) to
    ``WINDOW_US`` of submission time after it, widening 16-fold while nothing is found, up to
    the whole queue. Keys never sort below the floor unless a submitter's clock is behind
    ours; a read of the whole queue every ``RESYNC`` seconds finds those.
    """

    WINDOW_US = 250_000
    RESYNC = 10.0
    PAGE = 32

    def __init__(self, keys: Keys) -> None:
        self.start, self.end = keys.span("queue")
        self._lock = threading.Lock()
        self._floor: bytes | None = None
        self._resync_at = 0.0

    def window(self, after: bytes | None = None, widen: int = 0) -> tuple[bytes, bytes]:
        """The span to read next: from ``after`` (or the floor), ``16 ** widen`` windows wide."""
        with self._lock:
            floor = None if boot_clock() >= self._resync_at else self._floor
        low = after or floor
        if low is None:
            return self.start, self.end
        try:
            micros = int(low[len(self.start):len(self.start) + 20])
        except ValueError:  # not tenure's key: read on from it to the end
            return low, self.end
        width = self.WINDOW_US * 16 ** widen
        return low, self.end if width > 10 ** 16 else self.start + b"%020d" % (micros + width)

    def read(self, span: tuple[bytes, bytes], kvs: list[KV], after: bytes | None) -> None:
        """Note what a read of ``span`` (from ``window``) found."""
        if after is not None or (not kvs and span[1] != self.end):
            return  # reading on, or a window to widen: the floor stays
        with self._lock:
            self._floor = kvs[0].key if kvs else None
            if span[0] == self.start:
                self._resync_at = boot_clock() + self.RESYNC

    def oldest(self, after: bytes | None = None,
               first: tuple[tuple[bytes, bytes], list[KV]] | None = None) -> ec.Io[list[KV]]:
        """The oldest keys from the floor (or after ``after``); ``first``: a window already
        read (in claim_next's transaction), to widen from if it was empty. Its reads are
        yielded (``client.Io``): claim_next runs it in either flavour."""
        widen = 0
        while True:
            if first is not None:
                span, kvs = first
                first = None
            else:
                span = self.window(after, widen)
                kvs, _, _ = yield ec.call("range", *span, limit=self.PAGE)
            self.read(span, kvs, after)
            if kvs or span[0] == self.start or (span[1] == self.end and after is not None):
                return kvs
            # Nothing from the floor on: widen, and past the end look below the floor too.
            widen = 0 if span[1] == self.end else widen + 1


Lister = Callable[[], Iterable[JobStatus]]  # the backend's jobs()
Getter = Callable[[str], JobStatus | None]  # the backend's get()


def watch(keys: Keys, conn: Connection, jobs: Lister, get: Getter, stop: threading.Event,
          interval: float) -> Iterator[Change]:
    """Every job once, then each change and each new rejection, until ``stop`` is set."""
    seen: dict[str, JobStatus] = {}
    root_end = keys.root[:-1] + bytes([keys.root[-1] + 1])
    while not stop.is_set():
        _, revision, _ = conn.range(keys.retention)
        # Anything that changes during the listing is replayed by the watch and deduplicated.
        current = {s.job_id: s for s in jobs()}
        for job_id in seen.keys() - current.keys():
            yield Change(removed=job_id)
        for job_id, status in current.items():
            if seen.get(job_id) != status:
                yield Change(job=status)
        seen = current
        stream = conn.watch(keys.root, root_end, revision + 1)
        try:
            yield from _follow(keys, get, stream, seen, stop, interval)
        except BackendUnavailable:
            stop.wait(interval)  # the cluster is moving; list again and resume
        finally:
            stream.cancel()


def _follow(keys: Keys, get: Getter, stream: WatchStream, seen: dict[str, JobStatus],
            stop: threading.Event, interval: float) -> Iterator[Change]:
    batches: queue.Queue[list[object] | BaseException] = queue.Queue()

    def pump() -> None:
        try:
            for batch in stream.events():
                batches.put(list(batch))
        except BaseException as exc:  # handed to the consumer, which raises it
            batches.put(exc)

    threading.Thread(target=pump, name="tenure-etcd-watch", daemon=True).start()
    # A delay key's deletion (its etcd lease ran out) makes its job claimable: reported even
    # where the status reads the same (a listing may have judged it by its claimable_at).
    sections = {name: keys.section(name) for name in (*_JOB_SECTIONS, "delay", "rejection")}
    while not stop.is_set():
        try:
            batch = batches.get(timeout=interval)
        except queue.Empty:
            continue
        if isinstance(batch, BaseException):
            raise batch
        changed: dict[str, bool] = {}  # job id: whether a delay of it ended
        for event in batch:
            kv = event.kv  # type: ignore[attr-defined]
            for name, start in sections.items():
                if not kv.key.startswith(start):
                    continue
                if name == "rejection":
                    if not event.deleted:  # type: ignore[attr-defined]
                        try:
                            rejection, complete = read_rejection(kv)
                        except CorruptRecord:
                            break
                        if complete:  # a stub's reason follows in a moment, with the full record
                            yield Change(rejection=rejection)
                else:
                    with contextlib.suppress(CorruptRecord):  # listed as corrupt, not followed
                        job_id = keys.job_id(kv.key, name)
                        ended = name == "delay" and event.deleted  # type: ignore[attr-defined]
                        changed[job_id] = changed.get(job_id, False) or ended
                break
        for job_id, delay_ended in changed.items():
            status = get(job_id)
            if status is None:
                if seen.pop(job_id, None) is not None:
                    yield Change(removed=job_id)
            elif delay_ended or seen.get(job_id) != status:
                seen[job_id] = status
                yield Change(job=status)
