"""One step of the protocol on etcd: reads that carry revisions, one Txn that commits them.

``RecordBackend`` decides (judge, apply or audit, history, retries); this transaction turns
its records into etcd keys (``layout``). Its commit is one Txn whose compares are the
revisions read, whose success branch writes, and whose failure branch reads the keys of every
job the step loaded: a lost race (``conflict``) costs no extra read, since those reads answer
the retry's loads (the core hands the retry its predecessor: ``follow``). Guesses the
compares verify (``guessed``), made in ``load``:

- a job not known to exist is new (submit; a claim with a pooled etcd lease at hand), so a
  claim of a new job is one transaction;
- a holder's lease implies its record (renew, complete, release): the job key was written by
  the claim (its mod revision is the token) and the lease key lives with the owner's value. A
  fail needs more than the lease says (the job's attempts and limit): it guesses only when
  this process made the claim and kept what it wrote (``Parts.claimed``), else it reads.

A change's writes depend on its operation, which the step saves with the record (``_plan``):
a fail or requeue rewrites the job value, a release only writes its outcome.

claim_next's candidate (``next_claimables``) is read, never guessed. A claim's token is the
revision of its commit (``stored``). The etcd leases the keys hang on are ``leases``'s.

**Facts for the core** (``core/read_facts``): a lease whose key etcd deleted (by its TTL, or
early: etcd-io/etcd#15247) is reported as such (``EndedEarly``, with what is left of the wait
from this process's first sighting, ``leases.ended``: ``_reported``); the core decides what the
step sees (its holder's live lease while its deadline runs, on the clock ``injected`` names,
which the commit revives; a lease ended early for anyone else), and claim_next's candidates are
judged by the same call.

Requests it waits for, written once as generators (``client.EtcdIo``) for both flavours: a job's
keys (``_reading``), claim_next's candidates (``_finding``: the indexes, then the candidates'
keys, ``claimable.AHEAD`` a request) and the commit (``committing``: the Txn; the grant a
renewal's move waits for, the answers of the grant and keep-alive started beside). Every read
goes through ``answer``: the sync transaction runs the generator there and then
(``Connection.run``); tenure.aio's (``tenure.backends.etcd.aio``) awaits it with the step
suspended (``tenure.aio.bridge``), and awaits the same commit. What one operation's
transactions share (the claim's etcd lease, a renewal batch's shared etcd leases) is its
``Context``, passed in, never thread-local. What to do after a commit that did not stick is
the core's (``steps.Attempts``): a lost race sets ``conflict``; an etcd lease gone
(``_lease_gone``) or a renewal's key found moved sets ``resend``, and the core sends the step
again at once.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, TypeVar

from tenure.backends.etcd import claimable
from tenure.backends.etcd import client as ec
from tenure.backends.etcd.client import KV, AioPending, Connection, EtcdIo, Pending, TxnResult
from tenure.backends.etcd.layout import (
    JobValue,
    Keys,
    end_value,
    event_value,
    held_ttl,
    held_value,
    index_key,
    job_value,
    lease_value,
    on_shared_lease,
    owner_prefix,
    read_job,
    record,
    rejection_value,
)
from tenure.backends.etcd.leases import SLACK, Claiming, ClaimKey, EtcdLease, EtcdLeases, etcd_ttl
from tenure.backends.etcd.queue_cursor import QueueCursor
from tenure.core import codec, read_facts, transitions
from tenure.core.bounded import Bounded
from tenure.core.clock import Clock, boot_clock
from tenure.core.errors import BackendUnavailable, CorruptRecord
from tenure.core.record_transaction import Transaction
from tenure.core.records import HistoryEvent, JobRecord, JobState, Lease, Op, Rejection

EXPIRY_GRACE = 1.0  # etcd checks for expired leases every 500 ms, then deletes through raft
T = TypeVar("T")


SHORTER_OK = 0.05  # seconds a renewal onto a shared etcd lease may end before the lease it leaves


class Read:
    """A job's keys read at one revision (none: guessed absent), and the record they make."""

    def __init__(self, job_id: str, kvs: list[list[KV]] | None, now: float, ops: list[Any] | None = None) -> None:
        first: list[KV | None] = [None] * KEYS_READ  # each key's value (a loop: a comprehension is a call more)
        for i, kv in enumerate(kvs or ()):
            if kv:
                first[i] = kv[0]
        job, lease, end, held, delay = first
        self.job_id = job_id
        self.guessed = kvs is None  # a guess the commit's compares verify, not a read
        self.ops = ops  # the reads that made it (``reads``), if this process sent them: the failure branch's
        self.job, self.lease, self.end, self.held, self.delay = job, lease, end, held, delay
        # The lease's incarnation (the held key's mod revision): what a claim's wait was for.
        self.incarnation = held.mod_revision if held is not None else 0
        self.seen = boot_clock()  # no earlier than etcd's answer (the quarantine's start)
        try:
            self.value = None if job is None else read_job(job, job_id)  # decoded once: the commit indexes by it
            self.record = record(job_id, job, lease, end, now, delay_kept=delay is not None, value=self.value)
        except CorruptRecord as exc:  # keys show the id in base64url: name it
            raise exc.naming(job_id) from exc.__cause__

    def ended_by_etcd(self) -> bool:
        rec = self.record
        return rec is not None and rec.state is JobState.LEASED and self.lease is None and self.end is None

    def compares(self, k: Keys, job_id: str) -> list[Any]:
        """Each key's revision as read (0: absent), as ``ec.compare(key, "mod"/"create", "==", n)``
        builds them (EQUAL is proto3's default, left out)."""
        job, lease, end, held, delay, _ = k.of(job_id)
        return [{"target": ec.MOD, "key": job, "mod_revision": self.job.mod_revision if self.job else 0},
                {"target": ec.CREATE, "key": lease,
                 "create_revision": self.lease.create_revision if self.lease else 0},
                {"target": ec.MOD, "key": end, "mod_revision": self.end.mod_revision if self.end else 0},
                {"target": ec.MOD, "key": held, "mod_revision": self.held.mod_revision if self.held else 0},
                # A claim decided on a timed job's delay key gone commits only while it is (0).
                {"target": ec.MOD, "key": delay, "mod_revision": self.delay.mod_revision if self.delay else 0}]


KEYS_READ = 5  # a job's keys: job, lease, end, held, delay


def _uuid4_hex() -> str:
    """``uuid.uuid4().hex``, as random and alike (version 4, RFC 4122 variant) at a third of
    the cost: an audit record's key takes one."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    return b.hex()


def reads(k: Keys, job_id: str) -> list[Any]:
    """The reads of a job's keys, as ``ec.get(key)`` builds them (written out: a call each less)."""
    job, lease, end, held, delay, _ = k.of(job_id)
    return [{"request_range": {"key": job}}, {"request_range": {"key": lease}}, {"request_range": {"key": end}},
            {"request_range": {"key": held}}, {"request_range": {"key": delay}}]


@dataclasses.dataclass
class _Plan:
    """The writes of one job's change, and the etcd lease bookkeeping after the commit."""

    op: Op
    new: JobRecord
    key: ClaimKey
    lease: EtcdLease | None = None  # the etcd lease the lease key goes on (claim, renew)
    granted_here: bool = False
    keepalive: Pending[int] | AioPending[int] | None = None
    sent: float = 0.0
    expires_at: float | None = None


CLAIMED = 10_000  # records of claims made here, for one-transaction fails


@dataclasses.dataclass(frozen=True)
class Parts:
    """What every transaction of one backend shares."""

    conn: Connection
    keys: Keys
    leases: EtcdLeases
    queue: QueueCursor
    clock: Clock | None  # the clock given to connect (tests)
    # The job value each claim made here wrote (a renewal does not change it), by claim: a
    # fail's guess, which needs the job's attempts and limit, as the holder's lease cannot say.
    claimed: Bounded[ClaimKey, JobRecord] = dataclasses.field(default_factory=lambda: Bounded(CLAIMED))


@dataclasses.dataclass
class Context:
    """What the transactions of one operation share."""

    claiming: Claiming | None = None  # a claim's etcd lease (claim, claim_next), for all its attempts
    # A renewal in a batch (``renewals``): onto the batch's shared etcd lease of its TTL, taken
    # once per batch (fresh for every renewal in it: none was sent before the batch), no keep-alive.
    shared: dict[int, EtcdLease] | None = None


class EtcdTransaction(Transaction):
    # What the attempt before left this one, when it asked for a ``resend`` (``follow``): its
    # claim_next candidate, or the records a renewal wrote before its key moves again.
    _next: Read | None = None  # the candidate ``next_claimables`` took
    _written: dict[str, JobRecord] | None = None
    _relet = False  # follows a resend after an etcd lease was gone: another is an error
    _leased: claimable.Leased | None = None  # claim_next's read of the leases (``claimable.first_claimable``)

    def __init__(self, parts: Parts, now: float, fresh: bool, context: Context | None = None,
                 boot: float | None = None) -> None:
        self._p, self._conn, self._k, self._leases = parts, parts.conn, parts.keys, parts.leases
        self.now, self._fresh = now, fresh
        self.injected = parts.clock  # the clock holders' deadlines are on (``Transaction.injected``)
        # The boot clock when ``now`` was read (at once, when not given): a lease estimate
        # turns boot time into store time through this pair, never through a later reading,
        # so that two estimates of one etcd lease agree however long each step took.
        self._boot = boot_clock() if boot is None else boot
        self.context = context or Context()
        self._claiming = self.context.claiming
        self._carried: dict[str, Read] = {}  # a retry's reads: the last failure branch's
        self._reads: dict[str, Read] = {}  # every job loaded, in order: the failure branch reads them
        self._loaded: dict[str, JobRecord | None] = {}  # each job's record as read (a fact's record unwrapped)
        self._compares: list[Any] = []
        self._saved: dict[str, tuple[JobRecord, Op]] = {}  # what each job's change writes, by which operation
        self._events: list[HistoryEvent] = []
        self._rejections: list[Rejection] = []
        self._stored: dict[str, JobRecord] = {}
        self._plans: dict[str, _Plan] = {}  # a nested commit's, between ``nested`` and ``settled``
        self.carry: dict[str, list[list[KV]]] = {}  # after a conflict: the failure branch's reads
        self._delays: dict[int, int] = {}  # the etcd leases of this commit's delays, by TTL

    # -- reads ---------------------------------------------------------------------------
    def follow(self, previous: Transaction) -> None:
        if not isinstance(previous, EtcdTransaction):
            return
        if previous.resend and previous.conflict:  # an etcd lease was gone: again, on the same reads
            self._carried = {job_id: read for job_id, read in previous._reads.items() if not read.guessed}
            self._next, self._relet = previous._next, True
        elif previous.resend:  # a renewal found its key moved: it moves it again, from what it wrote
            self._written = previous._stored
        else:
            self._carried = {job_id: Read(job_id, kvs, self.now) for job_id, kvs in previous.carry.items()}
            # claim_next again after a lost race: the leases as it read them a moment ago
            # (``claimable.LEASED_REUSED_FOR``), the pending jobs read again.
            if previous._leased is not None and previous._leased.fresh():
                self._leased = previous._leased

    def answer(self, io: EtcdIo[T]) -> T:
        """What ``io`` returns, run now (the sync flavour); tenure.aio's transaction awaits it,
        the step suspended meanwhile."""
        return self._conn.run(io)

    def _read(self, job_id: str) -> Read:
        """The job's keys the step decides on: read already in this transaction, else from the last
        failure branch or read now (reads only: safe to retry), and compared by the commit."""
        read = self._reads.get(job_id)
        if read is None:
            read = self._carried.get(job_id) or self.answer(self._reading(job_id))
            self._reads[job_id] = read  # as ``_use`` (written out: a call less on every load)
            self._compares += read.compares(self._k, job_id)
        return read

    def _reading(self, job_id: str) -> EtcdIo[Read]:
        if self._claiming is not None:
            yield from self._claiming.granting_beside()
        ops = reads(self._k, job_id)
        res = yield ec.Txn([], ops, [], retry=True)
        return Read(job_id, res.ranges, self.now, ops)

    def _use(self, job_id: str, read: Read) -> Read:
        """``read`` is what the step decides on: the commit compares its revisions."""
        self._reads[job_id] = read
        self._compares += read.compares(self._k, job_id)
        return read

    def _reported(self, job_id: str, read: Read) -> JobRecord | read_facts.EndedEarly | None:
        """What ``read`` found, for the core to judge (``read_facts``): a lease etcd ended (perhaps
        early: etcd-io/etcd#15247) as ``EndedEarly``, its holder free to act until one TTL after
        this process first saw it gone (the longest of the claim's and its renewals': the job's
        and the held key's); a sighting starts that wait."""
        rec = read.record
        if rec is None or not read.ended_by_etcd():
            return rec
        entry = self._leases.ended(job_id, read.incarnation, read.seen)
        if entry.ttl is None:
            named = held_ttl(read.held) if read.held is not None else None
            entry.ttl = max(rec.ttl or 0.0, named or 0.0)
        return read_facts.EndedEarly(rec, entry.left())

    def _found(self, job_id: str) -> read_facts.Loaded:
        """The job as read (or saved) in this transaction, never guessed."""
        if job_id in self._saved:
            return self._saved[job_id][0]
        found = self._reported(job_id, self._read(job_id))
        self._loaded[job_id] = found.record if isinstance(found, read_facts.EndedEarly) else found
        return found

    def read_record(self, job_id: str) -> JobRecord | None:
        """The job's record as a claim decides on it (claim_next_many's candidates, ``claims``)."""
        return read_facts.seen(self._found(job_id), Op.CLAIM, self.now)

    def load(self, job_id: str, op: Op, lease: Lease | None = None) -> read_facts.Loaded:
        """A first attempt guesses: a submitted job is new, and so is a claimed one when a pooled
        etcd lease is at hand (one transaction; otherwise the grant goes beside the read); a
        holder's lease implies its record. A retry, or a job already read, reads."""
        if self._fresh or job_id in self._reads or job_id in self._saved or job_id in self._carried:
            return self._found(job_id)
        if lease is not None:
            claimed = self._p.claimed.get((job_id, lease.token, lease.owner)) if op is Op.FAIL else None
            if op is Op.FAIL and claimed is None:  # a fail needs the job's attempts and limit: read
                return self._found(job_id)
            return self._held_guess(lease, claimed)
        if op is Op.SUBMIT or (op is Op.CLAIM and self._claiming is not None and self._claiming.lease is not None):
            self.guessed = True
            self._use(job_id, Read(job_id, None, self.now))  # compared as absent
            self._loaded[job_id] = None
            return None
        return self._found(job_id)

    def _held_guess(self, lease: Lease, claimed: JobRecord | None = None) -> JobRecord:
        """The record ``lease`` implies; ``claimed``: what its claim wrote, if made here."""
        job_id, k = lease.job_id, self._k.of(lease.job_id)
        self.guessed = True
        mine = owner_prefix(lease.owner)
        self._reads[job_id] = Read(job_id, None, self.now)  # for the failure branch's reads
        self._compares += [ec.compare(k.lease, "create", ">", lease.token - 1),  # the claim's or a revival's
                           ec.compare(k.lease, "value", ">", mine),  # starts with the owner
                           ec.compare(k.lease, "value", "<", mine + b"\x7f"),
                           ec.compare(k.job, "mod", "==", lease.token)]  # no claim since
        written = None if self._written is None else self._written.get(job_id)
        if written is not None:  # its key moves again: the record as the renewal before wrote it
            rec = written
        elif claimed is None:  # attempts do not change while a lease is held: the claim's count
            rec = JobRecord(job_id, JobState.LEASED, lease.owner, lease.token, lease.expires_at, lease.ttl,
                            attempts=lease.attempt)
        else:
            rec = dataclasses.replace(claimed, lease_until=lease.expires_at, ttl=lease.ttl)
        self._loaded[job_id] = rec
        return rec

    def next_claimables(self, n: int) -> list[str]:
        """One job (claim_next_many goes its own way: ``claims``): index candidates
        (``claimable``), read here (``claimable.AHEAD`` in one request) and passed over unless
        claimable at ``now``; the one returned is claimed from that read, so a claim someone
        made since is a conflict of the commit, which the core retries from a fresh index read
        (a resend takes the same candidate again)."""
        found = self._next or self.answer(self._finding())
        if found is None:
            return []
        self._next = found
        self._use(found.job_id, found)
        return [found.job_id]

    def _finding(self) -> EtcdIo[Read | None]:
        found, self._leased = yield from claimable.first_claimable(self._k, self._leases, self._p.queue, self._take,
                                                                   self.now, self._leased)
        return found

    def _take(self, job_ids: list[str]) -> EtcdIo[Read | None]:
        """The keys of the first of the candidates ``job_ids`` claimable at ``now``, else None:
        those not carried from the attempt before read in one request."""
        k = self._k
        unread = [job_id for job_id in job_ids if job_id not in self._carried]
        found: dict[str, tuple[list[list[KV]], list[Any]]] = {}
        if unread:
            if self._claiming is not None:
                yield from self._claiming.granting_beside()
            ops = [reads(k, job_id) for job_id in unread]
            res = yield ec.Txn([], [op for each in ops for op in each], [], retry=True)
            ranges = res.ranges
            for i, job_id in enumerate(unread):
                found[job_id] = ranges[KEYS_READ * i:KEYS_READ * (i + 1)], ops[i]
        for job_id in job_ids:
            try:
                carried = self._carried.get(job_id)
                read = carried or Read(job_id, found[job_id][0], self.now, found[job_id][1])
                rec = read_facts.seen(self._reported(job_id, read), Op.CLAIM, self.now)  # as the claim will
            except CorruptRecord:
                continue  # listed as corrupt by jobs(), never claimed through claim_next
            if transitions.is_next(rec, self.now):
                return read
        return None

    # -- writes --------------------------------------------------------------------------
    def save(self, record: JobRecord, op: Op, event: HistoryEvent | None) -> None:
        self._saved[record.job_id] = record, op
        if event is not None:
            self._events.append(event)

    def add_rejection(self, rejection: Rejection) -> None:
        self._rejections.append(rejection)

    def stored(self, record: JobRecord) -> JobRecord:
        return self._stored.get(record.job_id, record)

    def _plan(self, new: JobRecord, op: Op, submits: int) -> EtcdIo[tuple[_Plan, list[Any]]]:
        """The change ``op`` from what was loaded to ``new``, and the writes that make it."""
        job_id, k, now = new.job_id, self._k, self.now
        old = self._loaded.get(job_id)
        owner = new.owner or (old.owner if old is not None else None) or ""
        plan = _Plan(op, new, (job_id, new.token, owner))
        if op is Op.SUBMIT:  # a new job, or a new run of a completed one
            shift = submits * 1e-5  # the queue keeps the order given (1 µs apart could round together)
            at, due = now + shift, None if new.claimable_at is None else new.claimable_at + shift
            plan.new = dataclasses.replace(new, submitted_at=at, claimable_at=due)
            value = JobValue(JobState.PENDING, None, new.token, None, at, None, None, new.runs,
                             codec.life_fields(plan.new), timed=due is not None)
            queued = value.index_key(k, job_id)
            assert queued is not None
            # A new job or run has no delay key: only a delay writes one.
            delay = [] if due is None else [(yield from self._delay_write(new))]
            return plan, [ec.put(k.job(job_id), job_value(job_id, value)), ec.delete(k.end(job_id)),
                          ec.put(queued, b""), *delay]
        if op is Op.CLAIM:
            return (yield from self._claim_writes(plan, self._reads[job_id]))
        if op is Op.FAIL or op is Op.REQUEUE:
            return plan, [*self._rerun_writes(new, self._reads[job_id]), (yield from self._delay_write(new))]
        assert old is not None
        if op is Op.RENEW:
            return (yield from self._renew_writes(plan, old, self._reads[job_id]))
        if op is Op.EXPIRE:  # an operator ended the lease
            assert new.lease_until is not None
            return plan, [ec.delete(k.lease(job_id), prev_kv=True),
                          ec.put(k.end(job_id), end_value("expired", new.token, new.lease_until, None))]
        assert op is Op.COMPLETE or op is Op.RELEASE, op
        how = "completed" if op is Op.COMPLETE else "released"
        requeue = [ec.put(k.queue(job_id, now), b"")] if op is Op.RELEASE else []
        keys = k.of(job_id)
        return plan, [ec.put(keys.end, end_value(how, new.token, now, new.result)),
                      ec.delete(keys.lease, prev_kv=True), ec.delete(keys.held), ec.delete(keys.last), *requeue]

    def _rerun_writes(self, new: JobRecord, read: Read) -> list[Any]:
        """A fail's or requeue's writes: the job's value rewritten as pending (its last token
        in it) or parked, no lease or outcome, indexed at ``claimable_at`` (or now) unless parked."""
        k, job_id, now = self._k, new.job_id, self.now
        pending = new.state is JobState.PENDING
        since = now if pending and new.claimable_at is None else None
        value = JobValue(new.state, None, new.token, None, new.submitted_at, new.claimed_at, None, new.runs,
                         codec.life_fields(new), since, timed=pending and new.claimable_at is not None)
        was, queued = index_key(k, job_id, read.value, read.end), value.index_key(k, job_id)
        writes = [ec.put(k.job(job_id), job_value(job_id, value)), ec.delete(k.end(job_id)),
                  ec.delete(k.lease(job_id), prev_kv=True), ec.delete(k.held(job_id)),
                  *([] if was is None or was == queued else [ec.delete(was)])]  # (a Txn names a key once)
        if queued is not None:
            return [*writes, ec.put(queued, b""), ec.delete(k.last(job_id))]
        return [*writes, ec.put(k.last(job_id), b"")]

    def _delay_write(self, new: JobRecord) -> EtcdIo[Any]:
        """The write of a job's ``delay/`` key: for a pending job with a delay, on an etcd lease of
        the wait (whole seconds, rounded up: etcd ends it no sooner), which a grant sent first
        makes (one per TTL a commit); otherwise its deletion. Claims commit only without it."""
        key = self._k.delay(new.job_id)
        if new.state is not JobState.PENDING or new.claimable_at is None:
            return ec.delete(key)  # any earlier wait ends (a requeue without delay); its lease runs out
        ttl = etcd_ttl(new.claimable_at - self.now)
        if ttl not in self._delays:
            self._delays[ttl], _ = yield ec.Grant(ttl)
        return ec.put(key, b"", lease=self._delays[ttl])

    def _claim_writes(self, plan: _Plan, read: Read) -> EtcdIo[tuple[_Plan, list[Any]]]:
        new, now, job_id = plan.new, self.now, plan.new.job_id
        k = self._k.of(job_id)
        assert self._claiming is not None, "claims go through EtcdBackend.claim and claim_next"
        assert new.owner is not None and new.ttl is not None
        plan.lease = yield from self._claiming.resolving()
        plan.sent = boot_clock()
        if not plan.lease.fresh(plan.sent):
            plan.keepalive = yield ec.StartKeepalive(plan.lease.id)  # answered alongside the txn
        # A pooled lease used without a keep-alive ends when its last grant or keep-alive said.
        lasts = plan.lease.granted if plan.keepalive is not None else plan.lease.ends() - plan.sent
        plan.expires_at = now + lasts + EXPIRY_GRACE
        # The job key keeps the nominal end, shown once etcd has ended the lease.
        value = JobValue(JobState.LEASED, new.owner, 0, new.ttl, new.submitted_at, now, now + plan.lease.granted,
                         new.runs, codec.life_fields(new))
        queued = index_key(self._k, job_id, read.value, read.end)
        # On its last attempt the job is indexed so: parked, not a candidate, once the lease ends.
        last = {"request_put": {"key": k.last, "value": b""}} if new.out_of_attempts else \
            {"request_delete_range": {"key": k.last}}
        # As ``ec.put`` and ``ec.delete`` build them (written out: a call each less on every claim).
        writes = [{"request_put": {"key": k.job, "value": job_value(job_id, value)}},
                  {"request_put": {"key": k.lease, "value": lease_value(new.owner, new.ttl, None, plan.expires_at),
                                   "lease": plan.lease.id}},
                  {"request_put": {"key": k.held, "value": held_value(new.owner, new.ttl)}},
                  {"request_delete_range": {"key": k.end}}, last]
        if queued is not None:
            writes.append({"request_delete_range": {"key": queued}})
        return plan, writes

    def _renew_writes(self, plan: _Plan, old: JobRecord, read: Read) -> EtcdIo[tuple[_Plan, list[Any]]]:
        k, new, job_id = self._k, plan.new, plan.new.job_id
        assert new.owner is not None and new.ttl is not None and old.ttl is not None
        ttl = etcd_ttl(new.ttl)
        revive = read.ended_by_etcd()
        cached = self._leases.of_claim(plan.key)
        plan.sent = boot_clock()
        batch, now_on = self.context.shared, 0.0
        if (batch is not None or (cached is not None and cached.shared)) and not revive:
            # Renewed by moving onto a shared lease (no keep-alive) that ends no earlier than the
            # lease the key is on, as this process estimated it (within SHORTER_OK, what reading
            # the store's and the boot clock at different moments may be off by).
            now_on = 0.0 if new.ttl != old.ttl or old.lease_until is None else \
                self._boot + old.lease_until - self.now - EXPIRY_GRACE - SHORTER_OK
            plan.lease = batch.get(ttl) if batch is not None else None
            if plan.lease is None or plan.lease.ends() < now_on:
                plan.lease = yield from self._leases.shared(ttl, now_on)
                if batch is not None:
                    batch[ttl] = plan.lease
        elif cached is not None and cached.alive and cached.ttl == ttl and not revive:
            plan.lease, plan.keepalive = cached, (yield ec.StartKeepalive(cached.id))
        else:  # a claim made elsewhere, a new TTL or a revival: the key moves to a new etcd lease
            plan.lease, plan.granted_here = (yield from self._leases.granting(ttl)), True
        lasts = plan.lease.ends() - self._boot if plan.lease.shared else plan.lease.granted
        plan.expires_at = self.now + lasts + EXPIRY_GRACE
        if plan.lease.shared and now_on:
            plan.expires_at = max(plan.expires_at, old.lease_until or 0.0)  # not back by that margin
        # Onto a shared lease no previous value is needed: the key left this claim's own etcd lease
        # or a shared one, or another connection's, which runs out by itself (``_after``).
        writes = [ec.put(k.lease(job_id), lease_value(new.owner, new.ttl, self.now, plan.expires_at,
                                                      plan.lease.shared), lease=plan.lease.id,
                         prev_kv=not plan.lease.shared)]
        if new.ttl != old.ttl or revive:
            # The longer TTL goes to the held key (the holder may still act on the lease before
            # this one), where a claimer finds it once the lease key is gone; a revival bumps
            # its revision, so claimers wait the new incarnation out afresh.
            writes.append(ec.put(k.held(job_id), held_value(new.owner, max(new.ttl, old.ttl))))
        return plan, writes

    def _event(self, event: HistoryEvent, plans: dict[str, _Plan], retention: int) -> Any:
        plan = plans.get(event.job_id)
        claim = plan is not None and plan.op is Op.CLAIM
        expires_at = plan.expires_at if plan is not None and plan.expires_at is not None else event.expires_at
        value = event_value(event, None if claim else event.token, expires_at)
        # A claim's renewal event is one key, named by its token and overwritten by the next
        # (``transitions.replaced``): etcd keeps one live key per claim, not one per renewal.
        renewed = transitions.replaced(event)
        uid = _uuid4_hex() if renewed is None else f"{event.op}-{renewed[1]}"
        return {"request_put": {"key": self._k.history(event.job_id, uid), "value": value, "lease": retention}}

    # -- the commit ----------------------------------------------------------------------
    def commit(self) -> None:
        self._conn.run(self.committing())

    def committing(self) -> EtcdIo[None]:
        planned = yield from self._planning()
        if planned is None:
            return  # decided on fresh reads and changes nothing: nothing to verify
        writes, plans = planned
        failure: list[Any] = []
        for job_id, read in self._reads.items():
            failure += read.ops or reads(self._k, job_id)
        if self._claiming is not None:
            self._claiming.maybe_written = True
        try:
            res = yield ec.Txn(self._compares, writes, failure)
        except BaseException as exc:
            for plan in plans.values():
                if plan.keepalive is not None:
                    plan.keepalive.cancel()
            if self._relet or not isinstance(exc, ec.LeaseNotFound):
                raise  # a renewal's new etcd lease may carry the key now: it runs out by itself
            yield from self._lease_gone(plans)
            return
        yield from self._settling(res, plans)

    def nested(self) -> EtcdIo[Any | None]:
        """This transaction's Txn as one operation of a larger one (``renewals``: a batch of them
        in one request), its failure branch empty (no reads to carry); None if it writes nothing.
        ``settled`` takes its answer."""
        planned = yield from self._planning()
        if planned is None:
            return None
        writes, self._plans = planned
        return ec.txn(self._compares, writes, [])

    def settled(self, res: TxnResult) -> EtcdIo[None]:
        """After ``nested``'s Txn was answered (``res``, its own part of the larger answer)."""
        yield from self._settling(res, self._plans)

    def dropped(self) -> None:
        """``nested``'s Txn was not sent, or not answered: the keep-alives started beside it end."""
        for plan in self._plans.values():
            if plan.keepalive is not None:
                plan.keepalive.cancel()

    def given(self, read: Read) -> None:
        """``read`` answers the job's load (claim_next_many reads its candidates together)."""
        self._carried[read.job_id] = read

    def _planning(self) -> EtcdIo[tuple[list[Any], dict[str, _Plan]] | None]:
        """The commit's writes and plans; None when there is nothing to send."""
        plans: dict[str, _Plan] = {}
        writes: list[Any] = []
        self._delays = {}
        submits = 0  # new jobs planned so far
        for new, op in self._saved.values():
            plan, ops = yield from self._plan(new, op, submits)
            submits += plan.op is Op.SUBMIT
            plans[new.job_id] = plan
            writes += ops
        if self._events or self._rejections:
            retention = yield from self._leases.retention()  # audit records end with it
            for e in self._events:
                writes.append(self._event(e, plans, retention))
            for r in self._rejections:
                writes.append(ec.put(self._k.rejection(_uuid4_hex()), rejection_value(r), lease=retention))
        if not writes and not self.guessed:
            return None
        return writes, plans

    def _settling(self, res: TxnResult, plans: dict[str, _Plan]) -> EtcdIo[None]:
        if res.succeeded:
            for plan in plans.values():
                yield from self._after(plan, res)
            if self._claiming is not None:
                self._claiming.maybe_written = False
            return
        if self._claiming is not None:
            self._claiming.maybe_written = False
        self.conflict = True
        for i, job_id in enumerate(self._reads if res.ranges else ()):  # a nested Txn reads nothing
            self.carry[job_id] = res.ranges[KEYS_READ * i:KEYS_READ * (i + 1)]
        for plan in plans.values():
            if plan.keepalive is not None:
                plan.keepalive.cancel()
            if plan.granted_here and plan.lease is not None:
                self._leases.revoke_later(plan.lease.id)  # nothing was attached to it
        for lease_id in self._delays.values():
            self._leases.revoke_later(lease_id)  # nor to these

    def _lease_gone(self, plans: dict[str, _Plan]) -> EtcdIo[None]:
        """The Txn named an etcd lease that is gone (revoked behind our back, a pooled one etcd
        ended, a renewal's cached one another connection revoked), and etcd applied nothing: the
        audit's retention lease is looked up again (it may be the one), a claim's or renewal's is
        never used again, and the core sends the step again at once (``resend``; once, as
        ``follow`` says) on leases that exist: a claim's is granted here, so that it guesses as it
        did, a renewal's and a delay's are granted by the resend as they are on any commit."""
        yield from self._leases.retention_lost()
        for plan in plans.values():
            lease = plan.lease
            if lease is not None and plan.op in (Op.CLAIM, Op.RENEW):
                lease.alive = False
                self._leases.forget(plan.key)
                if plan.op is Op.CLAIM and self._claiming is not None:
                    self._claiming.lease = yield from self._leases.granting(lease.ttl, SLACK)
        if self._claiming is not None:
            self._claiming.maybe_written = False
        self.conflict = self.resend = True

    def _after(self, plan: _Plan, res: TxnResult) -> EtcdIo[None]:
        """etcd lease bookkeeping once the commit applied ``plan``."""
        lease, new = plan.lease, plan.new
        if plan.op is Op.CLAIM:
            assert lease is not None and plan.expires_at is not None
            if plan.keepalive is not None:
                left = yield plan.keepalive
                if left < lease.ttl:  # 0: etcd ended it, and the key went with it
                    raise BackendUnavailable(f"etcd did not keep the lease of the claim of {new.job_id!r} "
                                             "alive; the claim was withdrawn")
                lease.confirmed, lease.granted = plan.sent, left
            assert self._claiming is not None
            self._claiming.lease = None  # in use now: the claim must not give it back
            stored = self._stored[new.job_id] = dataclasses.replace(new, token=res.revision,
                                                                    lease_until=plan.expires_at)
            self._leases.remember((new.job_id, res.revision, new.owner or ""), lease)
            self._p.claimed.put((new.job_id, res.revision, new.owner or ""), stored)
            return
        prev = [kv for kv in res.prev if kv.key == self._k.lease(new.job_id)]  # where the key was
        if plan.op is Op.RENEW:
            assert lease is not None and plan.expires_at is not None
            self._stored[new.job_id] = dataclasses.replace(new, lease_until=plan.expires_at)
            if lease.shared:
                # The etcd lease the key left carries nothing now (the claim's own) or other keys
                # (a shared one): either way it runs out by itself, unrevoked. Not pooled: with no
                # previous value asked for, whether a revoke of it is on its way is not known.
                self._leases.remember(plan.key, lease)
                return
            if plan.keepalive is not None:
                left = yield plan.keepalive
                if left >= lease.ttl:
                    lease.confirmed, lease.granted = plan.sent, left
                else:
                    # etcd ended the etcd lease after the transaction applied (a put naming a lease
                    # etcd no longer has is refused): the renewal stands, as any renewal sent before
                    # etcd ended a lease does; the next one moves the key to a new etcd lease.
                    lease.alive = False
                if lease.alive and any(kv.lease != lease.id for kv in prev):
                    # Another connection had moved the key to its own etcd lease and may be revoking
                    # ours right now: that revoke must not land on the key, so the core renews once
                    # more at once (``resend``: what was written stands), onto a new etcd lease.
                    self._leases.forget(plan.key)
                    for kv in prev:
                        self._let_go(kv)
                    self.resend = True
                    return
            for kv in prev:
                if kv.lease != lease.id:
                    self._let_go(kv)
            self._leases.remember(plan.key, lease)
        else:  # complete, release, fail, force_expire, requeue: the key left its etcd lease
            self._p.claimed.pop(plan.key)
            held = self._leases.forget(plan.key) if plan.op is not Op.EXPIRE else None
            for kv in prev:
                if held is not None and held.alive and kv.lease == held.id and not held.shared:
                    self._leases.give_back(held)  # it carried only this key: the next claim takes it
                else:
                    self._let_go(kv)

    def _let_go(self, kv: KV) -> None:
        """The etcd lease a key just left (``kv``, its previous value): a shared one stays (other
        keys hang on it, and it runs out by itself); any other carried only this key: revoked."""
        if not on_shared_lease(kv):
            self._leases.revoke_later(kv.lease)


