"""``Transaction``: one atomic step on a record store, what ``RecordBackend`` and tenure.aio's
``AsyncRecordBackend`` run ``tenure.core.steps`` in (``tenure.core.backend`` re-exports it).

It is the one typed interface a record backend supplies. Its members, by what they are for:

- the store's clock: ``now``, read once inside the step; every decision of the step uses it;
- reads with versions: ``load`` (a job's record for a step that will do a named operation to
  it) and ``preload`` (many jobs the step will load, read at once);
- claimable candidates: ``next_claimables`` (claim_next's jobs, by ``tenure.core.order``'s
  rule) and ``passed_over`` (what finding them read that calls for a write);
- one commit carrying the operation: ``save`` (a record, the ``Op`` that made it and its
  history event) and ``add_rejection`` (a refusal's audit), written together when the step
  ends; an optimistic commit reports ``conflict`` or ``resend``, and ``stored`` gives back a
  saved record as the store wrote it;
- an optional cache of this process's writes (guesses): ``guessed`` and ``follow``;
- the clock holders' deadlines are on: ``injected``, set by a store that reports a lease it
  ended early (``read_facts.EndedEarly``).

Only ``load``, ``save``, ``add_rejection`` and ``next_claimables`` must be written (and ``now``
set); the rest have defaults that serve a store that locks (memory, SQLite), but for
``injected``, which has none: a store that needs it says it.
"""

from __future__ import annotations

import abc

from tenure.core.clock import Clock
from tenure.core.read_facts import Loaded
from tenure.core.records import HistoryEvent, JobRecord, Lease, Op, Rejection


class Transaction(abc.ABC):
    """One atomic step on a record store; ``now`` is read once, inside the step.

    A store that locks (memory, SQLite) commits every step it began. An optimistic store
    (reads that carry versions, one conditional commit) instead sets ``conflict`` when its
    commit found something it read changed: nothing was written, and the core runs the step
    again in a new transaction with fresh reads (``RecordBackend.transaction(fresh=True)``),
    pausing and giving up as ``tenure.core.contention`` says. On a first attempt its ``load``
    may answer from what this process last wrote, setting ``guessed``; the conditional commit
    verifies a guess, and a refusal decided on one is decided again on fresh reads. A step
    whose guess the commit refuted runs again at once (a wrong guess is no collision); only
    conflicts of fresh reads pause.
    """

    # -- the store's clock -------------------------------------------------------------------
    now: float

    # -- reads with versions -----------------------------------------------------------------
    @abc.abstractmethod
    def load(self, job_id: str, op: Op, lease: Lease | None = None) -> Loaded:
        """The job's record for a step that will ``op`` it (``lease``: the caller's, for renew,
        complete, release and fail); None if there is none; CorruptRecord for one that cannot
        be read, never a guess at it. A store that locks ignores ``op`` and ``lease``. An
        optimistic store reads with versions its commit compares, and may answer a first
        attempt with a guess (``guessed``) its commit verifies: ZooKeeper takes a claimed job
        to be new (etcd too with a pooled etcd lease at hand, and a submitted one), ZooKeeper
        answers a holder from the record this process wrote while the lease's safe deadline
        runs (``clock.deadline_runs``), etcd from the lease itself (its commit compares the
        keys the lease implies). A backend outside tenure returns a ``JobRecord`` or None;
        tenure's own stores may also report a fact (no record but a generation, a record an
        earlier clock stamped, a lease the store ended early: ``tenure.core.read_facts``, not
        part of the backend contract), and the step decides what record that is, and what its
        commit writes."""

    def preload(self, job_ids: list[str]) -> None:  # noqa: B027 - nothing to do is the default
        """The step will load all of ``job_ids`` (submit_many, a batch of leases): a store may
        read them at once. This default: nothing (each ``load`` reads)."""

    # -- claimable candidates ----------------------------------------------------------------
    @abc.abstractmethod
    def next_claimables(self, n: int) -> list[str]:
        """Up to ``n`` different jobs ``claim_next`` should take at ``now``, best first, by
        claim_next's rule (written once, in ``tenure.core.order``): an expired lease first
        (soonest end first, then job id), then the pending job that became claimable first (a
        delayed or failed job queues at its ``claimable_at``, a released one from its release;
        at one time, in the order queued); [] if nothing. Never a completed, parked, scheduled
        or corrupt record, nor one ``is_next`` refuses; ``candidate_at`` is what an index of
        candidates keeps. A store reads its index as keys (``Expired``, ``Queued``) and takes
        its candidates from ``ordered``, which also spreads an optimistic store's claimers;
        where it cannot keep the rule it declares how (``Characteristics.claim_order``). (Those
        four are ``tenure.backend``'s.) A store may give one at a time; one whose backend
        declares ``CLAIMS_IN_BATCHES`` gives up to ``n``."""

    def passed_over(self) -> list[Loaded]:
        """What finding claimable jobs (``next_claimables``) read and passed over that calls
        for a write (tenure's ZooKeeper store: a lease an earlier leader's clock stamped, which
        the step's commit re-stamps; ``tenure.core.read_facts``). This default, nothing, is
        right for any store whose ``load`` returns only records: leave it."""
        return []

    # -- one commit, carrying the operation --------------------------------------------------
    @abc.abstractmethod
    def save(self, record: JobRecord, op: Op, event: HistoryEvent | None) -> None:
        """Write ``record``, the change ``op`` made (seen by later ``load``s of this
        transaction), and ``event``, its history entry (None only for a re-stamp, which nobody
        asked for: see ``passed_over``), in the step's commit. A store whose writes differ by
        operation (etcd: a release writes its outcome, a fail rewrites the job) takes them from
        ``op``, never from comparing records. A renewal's event (``replaced`` names its claim)
        replaces the claim's earlier renewal event."""

    @abc.abstractmethod
    def add_rejection(self, rejection: Rejection) -> None:
        """Audit a refusal in the step's commit (a refused step writes no record)."""

    # Set by an optimistic commit: it lost a race, nothing was written (the core runs the step
    # again on fresh reads).
    conflict: bool = False
    # Set by the commit when the step must go again at once, uncounted (``steps.Tries``). With
    # ``conflict``, nothing was written and nothing collided: the store refused a write it found
    # already done (ZooKeeper: an index entry already as the multi would leave it), or one that
    # named what no longer exists (etcd: an etcd lease gone); ``follow`` hands the next
    # transaction this one's reads and what to change, so it sends again without reading.
    # Without ``conflict``, the commit wrote and asks for the step once more on what it wrote
    # (etcd: a renewal that found its key moved by another connection moves it again). The
    # store makes its resends end (ZooKeeper's each leave out more; etcd's go once).
    resend: bool = False

    def stored(self, record: JobRecord) -> JobRecord:
        """After the commit, ``record`` (what a claim or holder step saved) as the store wrote
        it: a store that numbers claims itself (etcd: the commit's revision is the token) or
        estimates a lease's end its own way says so here. This default: as saved."""
        return record

    # -- the clock holders' deadlines are on -------------------------------------------------
    # The clock a caller gave ``connect`` (tests), None for the machine's own: a holder's safe
    # deadline (``Lease.deadline``) vouches that its lease cannot have ended by the store's clock
    # only on the machine's own (``clock.deadline_runs``). The core asks it of a store that
    # reports a lease it ended early (``read_facts.EndedEarly``: its holder finds it live while
    # its deadline runs), and only then. No default: the core cannot know which clock a store
    # was given, and a store that reports that fact must say it (etcd: its ``Parts.clock``).
    injected: Clock | None

    # -- an optional cache of this process's writes ------------------------------------------
    guessed: bool = False  # set by load: answered from what this process wrote, not a fresh read

    def follow(self, previous: Transaction) -> None:  # noqa: B027 - nothing to do is the default
        """Called on a retry's transaction with the attempt before it (its commit conflicted or
        its guess was refuted), before the step runs: a store whose failed commit brought back
        what it now holds (etcd's failure branch, a read ZooKeeper sent behind its multi) may
        answer ``load`` from that; after a ``resend``, from the reads the failed commit vouched for
        (or what the commit wrote). A resend is opened as fresh as the attempt it repeats."""
