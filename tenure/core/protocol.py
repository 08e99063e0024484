"""Steps of the protocol that backends without ``RecordBackend`` share: ``claim_next``'s walk
over candidates, and ``submit_many``'s batches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TypeVar

from tenure.core.errors import AlreadyClaimed, CorruptRecord, JobCompleted
from tenure.core.records import Lease

log = logging.getLogger("tenure.protocol")
T = TypeVar("T")


def first_claimed(candidates: Iterable[T], claim: Callable[[T], Lease | None]) -> Lease | None:
    """Claim the first candidate that can be claimed, in the order given. Candidates are
    proposals read before the claim; ``claim`` decides each with a fresh read (None: the
    candidate no longer exists). One someone else took, that is completed or that cannot be
    read is passed over."""
    for candidate in candidates:
        try:
            lease = claim(candidate)
        except (AlreadyClaimed, JobCompleted, CorruptRecord) as exc:
            log.debug("claim_next passed over %r: %s", candidate, exc)
            continue
        if lease is not None:
            return lease
    return None


def submit_in_batches(job_ids: list[str], size: int, batch: Callable[[list[str]], bool],
                      one: Callable[[str], None]) -> None:
    """Submit ``job_ids`` (each once, in order) ``size`` at a time with ``batch``, one atomic
    write per batch that reports False when it cannot apply as a whole (a job exists, a race
    was lost); such a batch is submitted again job by job with ``one``. The call as a whole is
    not atomic, as with one ``submit`` per job."""
    unique = list(dict.fromkeys(job_ids))
    for start in range(0, len(unique), size):
        chunk = unique[start:start + size]
        if not batch(chunk):
            for job_id in chunk:
                one(job_id)
