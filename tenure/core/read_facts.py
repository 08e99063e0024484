"""What a store's read may find besides a plain record, and what each finding means to a step:
decided here once, for any store that meets it. A store reports the fact; the step asks this
module for the record it decides on and for any write its commit must carry.

- ``Vanished``: no record, but the store kept the job's generation (the token of its last
  claim): ZooKeeper's job znode deleted by hand, its generation znode left. Tokens go on from
  it: a claim sees a pending job at that generation (and takes the next token); a submit sees
  a completed run one generation on, so the store's generation moves and no holder of a lease
  of the old generation, judged by the generation alone, can act on the new run.
- ``OtherClock``: a record whose times a clock the store no longer keeps time by stamped
  (ZooKeeper: an earlier leader's, which may lag the new one's by any amount). Nothing may
  judge a lease expired by the new clock: it reads as renewed now for its TTL (up to one TTL
  of extra delay before a claim), and a claim that meets it writes that (``restamped``) in its
  commit, so that readers after it judge the lease on this clock.

etcd meets neither: its tokens are revisions of the whole store (a key deleted by hand leaves
no per-job generation to go on from, and the next revision is higher anyway) and its lease
times come from its own TTLs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tenure.core.records import JobRecord, JobState, Op


@dataclass(frozen=True)
class Vanished:
    """No record for ``job_id``, but the store kept its generation."""

    job_id: str
    generation: int


@dataclass(frozen=True)
class OtherClock:
    """``record`` as stored, its times stamped by an earlier clock than the step's."""

    record: JobRecord


Loaded = JobRecord | Vanished | OtherClock | None  # what a store's read reports of one job
# The operation a re-stamp (``restamped``) is saved as: a renewal's write (the lease's end moves
# on, its holder and token stay), with no history event, since nobody renewed it.
RESTAMP = Op.RENEW


def seen(loaded: Loaded, op: Op, now: float) -> JobRecord | None:
    """The record a step that will ``op`` the job decides on at ``now``."""
    if isinstance(loaded, Vanished):
        if not loaded.generation:
            return None  # never claimed: nothing to go on from
        if op is Op.CLAIM:
            return JobRecord(loaded.job_id, JobState.PENDING, token=loaded.generation, submitted_at=now)
        if op is Op.SUBMIT:
            return JobRecord(loaded.job_id, JobState.COMPLETED, token=loaded.generation + 1, runs=0)
        return None
    if isinstance(loaded, OtherClock):
        rec = loaded.record
        if rec.state is not JobState.LEASED:
            return rec  # only a lease's end is judged against the clock that stamped it
        assert rec.ttl is not None
        return dataclasses.replace(rec, lease_until=now + rec.ttl)
    return loaded


def restamped(loaded: Loaded, op: Op, now: float) -> JobRecord | None:
    """The write a step that will ``op`` the job carries in its commit whatever it decides
    (None: none): a claim re-stamps a lease an earlier clock stamped."""
    if op is Op.CLAIM and isinstance(loaded, OtherClock) and loaded.record.state is JobState.LEASED:
        return seen(loaded, op, now)
    return None
