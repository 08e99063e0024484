"""Reading the audit (rejections and history) the same way on every backend: which records
a ``since``/``limit`` query returns, and what becomes of a record tenure cannot read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from tenure.core.errors import CorruptRecord
from tenure.core.records import HistoryEvent, Rejection

log = logging.getLogger("tenure.audit")
T = TypeVar("T", Rejection, HistoryEvent)
Raw = TypeVar("Raw")


def select(newest_first: Iterable[T], since: float | None, limit: int | None,
           keep: Callable[[T], bool] | None = None) -> list[T]:
    """The records at or after ``since`` (store time) that ``keep`` accepts, oldest first;
    with ``limit``, the most recent ``limit`` of them. Reads no further than it must."""
    if limit == 0:
        return []
    found: list[T] = []
    for item in newest_first:
        if (since is None or item.at >= since) and (keep is None or keep(item)):
            found.append(item)
            if limit is not None and len(found) >= limit:
                break
    found.reverse()
    return found


def readable(raw: Iterable[Raw], read: Callable[[Raw], T]) -> Iterator[T]:
    """``read`` of each stored record; one tenure cannot read (``CorruptRecord``) is logged and
    skipped, so one bad record never hides the rest of the audit."""
    for item in raw:
        try:
            yield read(item)
        except CorruptRecord as exc:
            log.warning("skipping an audit record tenure cannot read: %s", exc)


def of_job(audit: list[Rejection], job_id: str, since: float | None, limit: int | None) -> list[Rejection]:
    """``job_id``'s rejections out of a whole audit read oldest first: what a store without an
    index on the audit's job answers (both flavours' default ``job_rejections``)."""
    return select(reversed(audit), since, limit, keep=lambda r: r.job_id == job_id)
