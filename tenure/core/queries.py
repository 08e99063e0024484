"""Operator queries over job statuses already in hand: counts by state and one page.

``Backend``'s defaults run them over ``jobs()``; the dashboard's shared snapshot runs them
over the jobs its watch keeps. One implementation, so both count and order alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from tenure.core.records import JobPage, JobState, JobStatus, Summary
from tenure.core.transitions import state_at


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
                   rejections_last_hour=rejections_last_hour, scheduled=counts[JobState.SCHEDULED],
                   parked=counts[JobState.PARKED])


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
