"""claim_next's order, written once: what a store's claimable index keeps, how its streams merge,
and how far a store may depart from the rule (its ``Characteristics.claim_order``).

The rule (docs/protocol.md, "claim_next"):

1. Expired leases first (their work is overdue), soonest end first; leases that ended at the
   same store time by job id (``Expired``).
2. Then pending jobs in the order they became claimable (``Queued``): a job submitted,
   released or requeued without a delay from that write; a delayed or failed one from its
   ``claimable_at``; jobs that became claimable at the same store time in the order of the
   writes that queued them (the jobs of one write in the order given).
3. Never a completed, parked or corrupt job, a scheduled one whose time has not come, nor one
   ``transitions.is_next`` refuses (no token left). ``transitions.candidate_at`` says which
   records an index keeps and from when.

A store reads its index as plain keys, each stream already in its order (a heap walked, an
index range read, a listing sorted), and ``ordered`` merges them. PostgreSQL keeps the same
rule in its one SQL statement (``backends/postgres/sql.py``); the conformance suite
(``tenure/testing/suite_order.py``) runs the same cases on every store against this module.

Where a store departs from the rule, it says so in ``Tolerance`` and nowhere else, and the
suite checks exactly that:

- ``spread``: an optimistic store (etcd, ZooKeeper) starts each call at one of the first
  ``contention.SPREAD`` queued jobs at random, the places passed over taken last, so that
  concurrent callers do not all race for one job (``ordered(..., spread=True)``). Expired
  leases are not spread.
- ``expired_by_claim``: etcd sees that a lease ended (its key is gone), not when, unless it
  reads every held job's value; it takes expired leases in the order of their claims (the
  revision of the held key, which only a claim or a renewal with another TTL writes; the
  revision is the token, ``tokens_ordered_across_jobs``), leases claimed in one write by key.
- Not declared, as one client cannot see it: between clients, ZooKeeper queues pending jobs
  in buckets each client fills for ``BUCKET_SPAN`` (10 s), so a job can be passed by one
  queued up to 10 s later through another client, and orders separate writes in one
  millisecond by entry name; etcd orders its queue by the queuing client's clock (a client
  whose clock is behind queues that much earlier), and separate writes in one µs by key.
- Not declared, as no caller can tell it from a lease that ended a moment later: etcd's
  claim_next, on an attempt after a lost race, takes the leases from its attempt before when
  read under ``claimable.LEASED_REUSED_FOR`` (0.5 s) ago, so a lease that ended in between
  (etcd deleted its key, or ``force_expire`` did) waits for the next call, as one that ends
  just after any read does.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from tenure.core import contention


class Expired(NamedTuple):
    """An expired lease as an index keeps it: sorts by its end, then by job id."""

    until: float
    job_id: str


class Queued(NamedTuple):
    """A pending job as a queue keeps it: sorts by when it became claimable, then by ``place``,
    the order of queueing at one time (a counter, a rowid, a sequence, or a name that sorts
    as one; all entries of one merge carry places of one kind). ``found``: where the store
    found the entry, for its own use (ZooKeeper: the entry's slot), compared last."""

    at: float
    place: int | str
    job_id: str
    found: str = ""


@dataclass(frozen=True)
class Tolerance:
    """How a store's claim_next may depart from its rule (expired leases first, soonest end
    first, then pending jobs in the order they became claimable: ``Transaction.next_claimables``),
    declared as ``Characteristics.claim_order``; the conformance suite checks exactly what is
    declared. ``EXACT`` (the default) departs in nothing.

    - ``spread``: claimers start at one of the first 4 queued jobs at random, the places passed
      over taken last, so concurrent callers do not all race for one job (an optimistic store;
      ``ordered(..., spread=True)`` does it; ``OPTIMISTIC`` declares it). Expired leases are not
      spread.
    - ``expired_by_claim``: expired leases are taken in the order of their claims, not of their
      ends, for a store that sees a lease ended but not when (etcd)."""

    spread: bool = False
    expired_by_claim: bool = False


EXACT = Tolerance()
OPTIMISTIC = Tolerance(spread=True)


Candidate = TypeVar("Candidate", Expired, Queued)


def ordered(expired: Iterable[Expired], *queues: Iterable[Queued], spread: bool = False,
            rand: Callable[[int], int] = random.randrange) -> Iterator[Expired | Queued]:
    """claim_next's candidates, best first: ``expired`` (in order) first, then the ``queues``
    (each in order) merged, an entry met twice in a row (pushed again unchanged) given once;
    with ``spread``, the queued part starts at one of its first ``contention.SPREAD`` places.
    Lazy: a store reads only as far as its claims go."""
    yield from _distinct(expired)
    yield from queue_order(*queues, spread=spread, rand=rand)


def queue_order(*queues: Iterable[Queued], spread: bool = False,
                rand: Callable[[int], int] = random.randrange) -> Iterator[Queued]:
    """``ordered``'s queued part alone, for a store that reads it after the expired leases."""
    queued = _distinct(heapq.merge(*queues))
    return spread_start(queued, rand) if spread else queued


def job_ids(candidates: Iterable[Expired | Queued]) -> Iterator[str]:
    return (candidate.job_id for candidate in candidates)


def _distinct(entries: Iterable[Candidate]) -> Iterator[Candidate]:
    last = None
    for entry in entries:
        if entry != last:
            last = entry
            yield entry


def spread_start(queued: Iterable[Candidate], rand: Callable[[int], int] = random.randrange) -> Iterator[Candidate]:
    """``queued`` (oldest first) from one of its first ``contention.SPREAD`` places on, the
    places passed over last: concurrent claimers that all tried the oldest job first would win
    one race a round between them; started a few places apart, several win."""
    it = iter(queued)
    head = list(itertools.islice(it, contention.SPREAD))
    shift = rand(len(head)) if head else 0
    yield from head[shift:]
    yield from it
    yield from head[:shift]
