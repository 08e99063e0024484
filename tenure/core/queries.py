"""Operator queries over job statuses already in hand: counts by state and one page.

``Backend``'s defaults run them over ``jobs()``; the dashboard's shared snapshot runs them
over the jobs its watch keeps. One implementation, so both count and order alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from tenure.core.records import JobPage, JobState, JobStatus, Rejection, Summary


def state_at(job: JobStatus, now: float) -> JobState:
    """The job's state judged at ``now`` rather than when it was read."""
    if job.state in (JobState.LEASED, JobState.EXPIRED) and job.expires_at is not None:
        return JobState.EXPIRED if job.expires_at <= now else JobState.LEASED
    return job.state


def fold(text: str) -> str:
    """ASCII-only lower case: what SQLite's lower() does, so every backend filters alike."""
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def summarize(jobs: Iterable[JobStatus], now: float, soon: float, rejections_last_hour: int) -> Summary:
    """Jobs counted by state at ``now``; leases ending within ``soon`` seconds counted apart."""
    counts: Counter[JobState] = Counter()
    expiring = 0
    for job in jobs:
        state = state_at(job, now)
        counts[state] += 1
        if state is JobState.LEASED and job.expires_at is not None and job.expires_at <= now + soon:
            expiring += 1
    return Summary(now=now, pending=counts[JobState.PENDING], leased=counts[JobState.LEASED],
                   expiring_soon=expiring, expired=counts[JobState.EXPIRED],
                   completed=counts[JobState.COMPLETED], corrupt=counts[JobState.CORRUPT],
                   rejections_last_hour=rejections_last_hour)


def select_page(jobs: Iterable[JobStatus], now: float, states: frozenset[JobState] | None, job: str | None,
                owner: str | None, order: str, offset: int, limit: int) -> JobPage:
    """Jobs matching every filter given, ordered, one page of them (see ``Store.page``)."""
    found = [j for j in jobs
             if (states is None or state_at(j, now) in states)
             and (job is None or fold(job) in fold(j.job_id))
             and (owner is None or fold(owner) in fold(j.owner or ""))]
    if order == "expiry":
        found.sort(key=lambda j: (j.expires_at is None, j.expires_at or 0.0, j.job_id))
    else:
        found.sort(key=lambda j: j.job_id)
    return JobPage(found[offset:offset + limit], len(found), offset, limit)


def of_job(rejections: Iterable[Rejection], job_id: str, limit: int | None) -> list[Rejection]:
    """The rejections of one job, oldest first; with ``limit``, the most recent ``limit``."""
    return newest([r for r in rejections if r.job_id == job_id], limit)


def newest(items: list[Any], limit: int | None) -> list[Any]:
    """The last ``limit`` items (all of them for None), keeping their order."""
    if limit is None:
        return items
    return items[len(items) - limit:] if limit else []
