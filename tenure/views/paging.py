"""``page()`` for stores that index their jobs instead of listing them (etcd, ZooKeeper).

Such a store offers four reads (``IndexedJobs``): how many jobs are in each state, its leased
and expired jobs (few: one per held lease), every job id in order (names only, no records)
and the statuses of some jobs. A page is then cut from those without reading every record:

- leased and expired jobs only: the held jobs, filtered and sorted, then the page's records;
- any other filter by state: held jobs by expiry first (``order="expiry"``), then the rest by
  id; the rest need their records read only when the filter keeps some of the states of jobs
  not held (pending, scheduled, parked, completed) but not all, and then only up to the page
  (from the first id on);
- ``None`` (the caller lists every job instead) for what no index answers: corrupt records,
  and the owner of jobs that are not held (it is in their records only).
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Protocol

from tenure.core.queries import fold
from tenure.core.records import JobPage, JobState, JobStatus, Summary

HELD_STATES = frozenset({JobState.LEASED, JobState.EXPIRED})
_NOT_HELD = frozenset({JobState.PENDING, JobState.COMPLETED, JobState.SCHEDULED, JobState.PARKED})
_CHUNK = 100  # fewest records read at a time while walking ids for a filter the index cannot answer


@dataclass(frozen=True)
class Held:
    """A job with a lease end as an index shows it, enough to filter and order it: leased,
    expired, or parked when its last allowed lease ran out."""

    job_id: str
    owner: str | None
    state: JobState  # LEASED, EXPIRED or PARKED at the query's ``now``
    expires_at: float | None


class IndexedJobs(Protocol):
    def counts(self, now: float) -> Summary | None:
        """Jobs by state at ``now`` (``rejections_last_hour`` left 0); None: no index to count."""

    def held(self, now: float, expiry: bool) -> list[Held]:
        """Every leased or expired job, and every job parked by its last lease's end (a store
        may leave those out if it has none); ``expiry``: with ``expires_at`` (else it may be None)."""

    def job_ids(self, total: int | None = None) -> list[str]:
        """Every job id, sorted; ``total``: how many jobs ``counts()`` just found, which a
        store may check a cached list against instead of counting again."""

    def statuses(self, job_ids: list[str], now: float) -> list[JobStatus]:
        """The jobs' statuses at ``now``, in the order given; jobs gone since are left out."""


def _expiry_key(h: Held) -> tuple[bool, float, str]:
    return (h.expires_at is None, h.expires_at or 0.0, h.job_id)


def page(src: IndexedJobs, now: float, states: frozenset[JobState] | None, job: str | None,
         owner: str | None, order: str, offset: int, limit: int) -> JobPage | None:
    """``Store.page`` from the indexes, or None where only a listing can answer."""
    if states is not None and JobState.CORRUPT in states:
        return None
    held_only = states is not None and states <= HELD_STATES
    if owner is not None and not held_only:
        return None
    rest = _NOT_HELD if states is None else states & _NOT_HELD
    need_reads = bool(rest) and rest != _NOT_HELD  # some of the states of jobs not held, not all
    if need_reads and job is not None:
        return None
    all_held = src.held(now, expiry=order == "expiry")
    held = [h for h in all_held if (states is None or h.state in states)
            and (job is None or fold(job) in fold(h.job_id))
            and (owner is None or fold(owner) in fold(h.owner or ""))]
    held.sort(key=_expiry_key if order == "expiry" else lambda h: h.job_id)
    if held_only:
        wanted = [h.job_id for h in held[offset:offset + limit]]
        return JobPage(src.statuses(wanted, now), len(held), offset, limit)

    counted = src.counts(now) if need_reads else None
    if need_reads and counted is None:
        return None
    held_ids = {h.job_id for h in all_held}
    names = src.job_ids(counted.total if counted is not None else None)
    if job is not None:
        names = [n for n in names if fold(job) in fold(n)]
    if order == "expiry":  # held first, by expiry (no other job has a lease end), then by id
        head, others = [h.job_id for h in held], Thinned(names, held_ids)
    else:  # by id: the held jobs kept, and every other job
        head, others = [], Thinned(names, held_ids - {h.job_id for h in held})
    if not need_reads:
        wanted = head[offset:offset + limit]
        wanted += others[max(0, offset - len(head)):max(0, offset + limit - len(head))]
        return JobPage(src.statuses(wanted, now), len(head) + len(others), offset, limit)
    assert counted is not None
    # A job parked by its last lease's end is held (it has one) and counted as parked.
    total = len(held) + sum(_count(counted, state) for state in rest) - sum(1 for h in held if h.state in rest)
    found = _walk(src, now, head, others, states or frozenset(), offset + limit, max(offset + limit, _CHUNK))
    return JobPage(found[offset:offset + limit], total, offset, limit)


def _count(counted: Summary, state: JobState) -> int:
    """How many jobs not held ``counted`` found in ``state``."""
    return {JobState.PENDING: counted.pending, JobState.COMPLETED: counted.completed,
            JobState.SCHEDULED: counted.scheduled, JobState.PARKED: counted.parked}[state]


class Thinned:
    """The sorted ``names`` without the few of ``gone`` among them, sliced without copying the
    rest: a page of 100,000 ids then costs as much as one of 1,000 (the held jobs left out of
    a page are at most one per lease)."""

    def __init__(self, names: list[str], gone: Collection[str]) -> None:
        self._names = names
        self._gaps = sorted(i for g in gone if (i := bisect.bisect_left(names, g)) < len(names) and names[i] == g)
        self._gap_set = frozenset(self._gaps)

    def __len__(self) -> int:
        return len(self._names) - len(self._gaps)

    def __getitem__(self, part: slice) -> list[str]:
        start, stop, step = part.indices(len(self))
        assert step == 1, "a page is a run of ids"
        # The index in ``names`` of the start-th name kept: start plus the gaps up to it (the
        # least such fixed point, reached from below).
        before = 0
        while (seen := bisect.bisect_right(self._gaps, start + before)) != before:
            before = seen
        at = start + before
        found: list[str] = []
        while len(found) < stop - start:
            if at not in self._gap_set:
                found.append(self._names[at])
            at += 1
        return found


def _walk(src: IndexedJobs, now: float, head: list[str], others: Thinned, states: frozenset[JobState],
          enough: int, size: int) -> list[JobStatus]:
    """Statuses in the order of ``head`` then ``others`` whose state is in ``states``, read in
    chunks of ``size`` until ``enough`` are found."""
    found: list[JobStatus] = []
    for chunk in _chunks(size, head, others):
        found += [s for s in src.statuses(chunk, now) if s.state in states]
        if len(found) >= enough:
            break
    return found


def _chunks(size: int, *sequences: list[str] | Thinned) -> Iterator[list[str]]:
    for seq in sequences:
        for start in range(0, len(seq), size):
            yield seq[start:start + size]
