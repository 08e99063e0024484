"""Change feeds by polling, for backends without a native watch (memory, SQLite)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from tenure.core.records import Change, JobStatus, Rejection

if TYPE_CHECKING:
    from tenure.core.backend import Backend


def poll(backend: Backend, stop: threading.Event, interval: float) -> Iterator[Change]:
    """Yield every job as it is first seen, then each change and each new rejection."""
    seen: dict[str, JobStatus] = {}
    seen_rejections: set[Rejection] = set()
    since: float | None = None
    while not stop.is_set():
        current = {job.job_id: job for job in backend.jobs()}
        for job_id, job in current.items():
            if seen.get(job_id) != job:
                yield Change(job=job)
        for job_id in seen.keys() - current.keys():
            yield Change(removed=job_id)
        seen = current
        fresh = [r for r in backend.rejections(since, None) if r not in seen_rejections]
        for rejection in fresh:
            yield Change(rejection=rejection)
        if fresh:
            # Keep only the records at the newest instant to tell repeats from new ones.
            since = max(r.at for r in fresh)
            seen_rejections = {r for r in seen_rejections | set(fresh) if r.at >= since}
        elif since is None:
            since = backend.now()
        stop.wait(interval)
