"""Reading many jobs from etcd: a paged listing at one revision, and a live watch.

A listing reads the job keys a page at a time and, for the same span of ids, the lease and
outcome keys, all at the revision of the first page, so every status is consistent with
the others. ``watch`` lists once, then follows an etcd watch on the whole prefix from that
revision and re-reads only the jobs whose keys changed.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from tenure.backends.etcd_client import KV, Connection, WatchStream
from tenure.backends.etcd_layout import Keys, read_rejection, record
from tenure.core.errors import BackendUnavailable, CorruptRecord
from tenure.core.records import Change, JobStatus
from tenure.core.transitions import JobRecord

if TYPE_CHECKING:
    from tenure.backends.etcd import EtcdBackend

PAGE = 2000  # jobs per page: 3 ranges each (job, lease, end keys), well under gRPC's 4 MB
_JOB_SECTIONS = ("job", "lease", "end")


def _by_suffix(kvs: list[KV], start: bytes) -> dict[bytes, KV]:
    return {kv.key[len(start):]: kv for kv in kvs}


def scan(conn: Connection, keys: Keys, now: float
         ) -> Iterator[tuple[str, str, JobRecord | CorruptRecord | None]]:
    """``(job id, key, record or the reason it is corrupt)`` for every job, by key order."""
    starts = {name: keys.span(name) for name in _JOB_SECTIONS}
    job_start, job_end = starts["job"]
    low = b""
    revision = 0
    while True:
        jobs, revision, more = conn.range(job_start + low, job_end, revision=revision, limit=PAGE)
        high = jobs[-1].key[len(job_start):] + b"\0" if more and jobs else None
        found = {"job": _by_suffix(jobs, job_start)}
        for name in ("lease", "end"):
            start, end = starts[name]
            kvs, _, _ = conn.range(start + low, start + high if high else end, revision=revision)
            found[name] = _by_suffix(kvs, start)
        for suffix in sorted(set().union(*found.values())):
            parts = [found[name].get(suffix) for name in _JOB_SECTIONS]
            name, kv = next((n, kv) for n, kv in zip(_JOB_SECTIONS, parts, strict=True) if kv is not None)
            key = kv.key.decode(errors="replace")
            try:
                job_id = keys.job_id(kv.key, name)
            except CorruptRecord as exc:
                yield key, key, exc
                continue
            try:
                yield job_id, key, record(job_id, parts[0], parts[1], parts[2], now)
            except CorruptRecord as exc:
                yield job_id, exc.key, exc
        if high is None:
            return
        low = high


def watch(backend: EtcdBackend, conn: Connection, stop: threading.Event, interval: float) -> Iterator[Change]:
    """Every job once, then each change and each new rejection, until ``stop`` is set."""
    keys = backend.keys
    seen: dict[str, JobStatus] = {}
    root_end = keys.root[:-1] + bytes([keys.root[-1] + 1])
    while not stop.is_set():
        _, revision, _ = conn.range(keys.retention)
        # Anything that changes during the listing is replayed by the watch and deduplicated.
        current = {s.job_id: s for s in backend.jobs()}
        for job_id in seen.keys() - current.keys():
            yield Change(removed=job_id)
        for job_id, status in current.items():
            if seen.get(job_id) != status:
                yield Change(job=status)
        seen = current
        stream = conn.watch(keys.root, root_end, revision + 1)
        try:
            yield from _follow(backend, stream, seen, stop, interval)
        except BackendUnavailable:
            stop.wait(interval)  # the cluster is moving; list again and resume
        finally:
            stream.cancel()


def _follow(backend: EtcdBackend, stream: WatchStream, seen: dict[str, JobStatus],
            stop: threading.Event, interval: float) -> Iterator[Change]:
    keys = backend.keys
    batches: queue.Queue[list[object] | BaseException] = queue.Queue()

    def pump() -> None:
        try:
            for batch in stream.events():
                batches.put(list(batch))
        except BaseException as exc:  # handed to the consumer, which raises it
            batches.put(exc)

    threading.Thread(target=pump, name="tenure-etcd-watch", daemon=True).start()
    sections = {name: keys.section(name) for name in (*_JOB_SECTIONS, "rejection")}
    while not stop.is_set():
        try:
            batch = batches.get(timeout=interval)
        except queue.Empty:
            continue
        if isinstance(batch, BaseException):
            raise batch
        changed: dict[str, None] = {}
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
                        changed[keys.job_id(kv.key, name)] = None
                break
        for job_id in changed:
            status = backend.get(job_id)
            if status is None:
                if seen.pop(job_id, None) is not None:
                    yield Change(removed=job_id)
            elif seen.get(job_id) != status:
                seen[job_id] = status
                yield Change(job=status)
