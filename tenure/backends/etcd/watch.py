"""A live watch of an etcd store: ``watch`` lists once, then follows an etcd watch on the whole
prefix from that revision and re-reads only the jobs whose keys changed.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator

from tenure.backends.etcd.client import Connection, WatchStream
from tenure.backends.etcd.layout import Keys, read_rejection
from tenure.backends.etcd.listing import JOB_SECTIONS
from tenure.core.errors import BackendUnavailable, CorruptRecord
from tenure.core.records import Change, JobStatus

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
    sections = {name: keys.section(name) for name in (*JOB_SECTIONS, "delay", "rejection")}
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
