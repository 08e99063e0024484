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
- ``EndedEarly``: a lease the store ended, perhaps before its holder must have stopped (etcd
  can: etcd-io/etcd#15247, a paused leader revoking leases the new one renewed), with how long
  by this process's watch its holder may still act (``left``). Its holder, while its safe
  deadline runs (``clock.deadline_runs``: its TTL cannot have run out), finds it live, and its
  commit restores it (a line on the ``tenure.early_end`` logger each time: the fault runs count
  them); anyone else finds it ended early (``JobRecord.ended_early``), running ``left`` more
  (``transitions.refuse_claim``: ``NotYetClaimable`` until then; claim_next passes it over),
  then expired; a holder whose deadline passed finds it as stored (expired: refused).

etcd meets neither of the first two: its tokens are revisions of the whole store (a key deleted
by hand leaves no per-job generation to go on from, and the next revision is higher anyway)
and its lease times come from its own TTLs; it reports ``EndedEarly``. ZooKeeper ends no lease
(it judges expiry by its leader's clock) and never reports it.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from tenure.core.clock import Clock, deadline_runs
from tenure.core.records import JobRecord, JobState, Lease, Op

# A line per lease a store ended early that its holder restored: the fault runs count them.
early_end_log = logging.getLogger("tenure.early_end")


@dataclass(frozen=True)
class Vanished:
    """No record for ``job_id``, but the store kept its generation."""

    job_id: str
    generation: int


@dataclass(frozen=True)
class OtherClock:
    """``record`` as stored, its times stamped by an earlier clock than the step's."""

    record: JobRecord


@dataclass(frozen=True)
class EndedEarly:
    """``record`` as stored (a lease whose end the store shows passed), which the store ended,
    perhaps before its holder must have stopped; ``left``: seconds its holder may still act by
    this process's watch (etcd: one TTL from when this process first saw it gone), 0 or less
    once it may not."""

    record: JobRecord
    left: float


Loaded = JobRecord | Vanished | OtherClock | EndedEarly | None  # what a store's read reports of one job
# The operation a re-stamp (``restamped``) is saved as: a renewal's write (the lease's end moves
# on, its holder and token stay), with no history event, since nobody renewed it.
RESTAMP = Op.RENEW


def seen(loaded: Loaded, op: Op, now: float) -> JobRecord | None:
    """The record a step that will ``op`` the job decides on at ``now``, when the step holds no
    lease of it (a holder's step asks ``ended_early`` of an ``EndedEarly``)."""
    if isinstance(loaded, EndedEarly):
        return ended_early(loaded, now, None, None)
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


def ended_early(loaded: EndedEarly, now: float, lease: Lease | None, injected: Clock | None) -> JobRecord:
    """The record a step decides on at ``now`` of a lease the store ended: ``lease``, the step's
    own (renew, complete, release, fail) or None; ``injected``, the clock its deadline is on if a
    caller gave one to ``connect`` (``Transaction.injected``; None: the machine's own, whose
    deadlines vouch). No defaults: a holder's step that left ``injected`` out would trust a test
    clock's deadline."""
    rec = loaded.record
    if lease is not None:
        if rec.token == lease.token and rec.owner == lease.owner and deadline_runs(lease.deadline, injected):
            # Its TTL cannot have run out while its deadline runs: live, and the commit restores it.
            early_end_log.info("the store ended the lease of %r (token %d) early; restoring it", rec.job_id,
                               lease.token)
            return dataclasses.replace(rec, lease_until=max(rec.lease_until or 0.0, now + 1e-3))
        return rec
    if loaded.left > 0:
        return dataclasses.replace(rec, lease_until=now + loaded.left, ended_early=True)
    return rec


def restamped(loaded: Loaded, op: Op, now: float) -> JobRecord | None:
    """The write a step that will ``op`` the job carries in its commit whatever it decides
    (None: none): a claim re-stamps a lease an earlier clock stamped."""
    if op is Op.CLAIM and isinstance(loaded, OtherClock) and loaded.record.state is JobState.LEASED:
        return seen(loaded, op, now)
    return None
