"""``watch()`` from ZooKeeper watches: a child watch on ``jobs/``, on ``rejections/`` and its
segments, and a data watch on every job znode, each re-armed by the read that follows it.

Watch callbacks run on kazoo's event thread and only queue the path; the generator does the
reads. A lease running out (or a scheduled job's time coming) changes no znode, so while idle
the generator re-rates leased and scheduled jobs against the estimated store time and reports
those that turned EXPIRED, PARKED or PENDING.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

from kazoo.exceptions import NoNodeError

from tenure.backends.zookeeper import layout as zl
from tenure.backends.zookeeper.audit import Key, Log
from tenure.backends.zookeeper.errors import mapped_errors
from tenure.backends.zookeeper.multiread import read_many
from tenure.backends.zookeeper.session import Session
from tenure.core import audit
from tenure.core.records import Change, JobRecord, JobState, JobStatus
from tenure.core.transitions import status

_JOBS, _REJECTIONS = "jobs", "rejections"
_BY_TIME = (JobState.LEASED, JobState.SCHEDULED)  # states the store's clock ends with no write


def watch(session: Session, log: Log, stop: threading.Event, interval: float) -> Iterator[Change]:
    """``log``: the audit's rejections."""
    client = session.client
    layout = session.layout
    events: queue.Queue[str] = queue.Queue()
    records: dict[str, JobRecord] = {}  # znode name -> last record seen, to re-rate expiry
    shown: dict[str, JobStatus] = {}

    def on_jobs(_: Any) -> None:
        events.put(_JOBS)

    def on_rejections(_: Any) -> None:
        events.put(_REJECTIONS)

    def on_job(event: Any) -> None:
        # A connection-state event reaches data watches without a path; the server keeps a
        # session's watches across reconnects, so there is nothing to read for it.
        if event.path:
            events.put(event.path.rsplit("/", 1)[1])

    def read_job(name: str) -> Change | None:
        with mapped_errors("watching a job"):
            try:
                data, _ = client.get(f"{layout.jobs}/{name}", watch=on_job)
            except NoNodeError:
                records.pop(name, None)
                gone = shown.pop(name, None)
                return None if gone is None else Change(removed=gone.job_id)
        item = zl.decoded(layout.jobs, name, data or b"")  # a znode made by hand may hold none
        if isinstance(item, JobRecord):
            records[name] = item
            item = status(item, session.estimated_now())
        else:
            records.pop(name, None)
        if shown.get(name) == item:
            return None
        shown[name] = item
        return Change(job=item)

    def new_rejections(last: Key | None) -> tuple[Key | None, list[Change]]:
        """Rejections written after ``last``, in order, across segments (audit)."""
        fresh = log.after(last, on_rejections)
        with mapped_errors("watching rejections"):  # one trimmed meanwhile is passed over
            read = list(read_many(client, [path for _, path in fresh], session.config.timeout))
        found = [Change(rejection=r) for r in audit.readable(read, lambda r: zl.load_rejection(r[1], r[0]))]
        return (fresh[-1][0] if fresh else last), found

    session.now()  # a fresh store time for the first ratings
    with mapped_errors("watching jobs"):
        names = set(client.get_children(layout.jobs, watch=on_jobs))
    for name in sorted(names):
        if change := read_job(name):
            yield change
    existing = log.after(None, on_rejections)  # only rejections from now on: names, not data
    last_rejection = existing[-1][0] if existing else None
    while not stop.is_set():
        try:
            what = events.get(timeout=interval)
        except queue.Empty:
            # Nothing changed: leases may still have run out by the store's clock.
            now = session.estimated_now()
            for name, rec in list(records.items()):
                was = shown.get(name)
                if was is not None and was.state in _BY_TIME and (rated := status(rec, now)).state is not was.state:
                    shown[name] = rated
                    yield Change(job=rated)
            continue
        if what == _JOBS:
            with mapped_errors("watching jobs"):
                current = set(client.get_children(layout.jobs, watch=on_jobs))
            for name in sorted(current - names):
                if change := read_job(name):
                    yield change
            names = current
        elif what == _REJECTIONS:
            last_rejection, found = new_rejections(last_rejection)
            yield from found
        elif change := read_job(what):
            yield change
