"""One protocol step on ZooKeeper: the optimistic transaction of ``RecordBackend``. Why each
part is safe: docs/backends/zookeeper.md, "Store time" and "One round trip".

**Read** (``load``): our clock znode written, then the job and its generation znode, pipelined:
ZooKeeper answers a session in order, so the data is at least as new as the clock write, whose
``mtime`` is the step's store time (the high half of its zxid: the leader epoch).
**Commit**: one multi that writes each saved record at the version read (or creates it), moves
the generation znode with the token (its version IS the token) or checks it there, keeps the
index (``index``) and adds the audit (``audit``); a job read and not written is checked at its
version. A multi that fails on a version is a conflict: nothing was written.
**Guesses** (``load``), one round trip, never judging expiry: a claim takes its job to be
new (once claims here find jobs existing, a read goes out behind the multi: ``follow``); the
holder's renew and complete answer from the record this process wrote (``Written``) while its
deadline runs. Both stamp with an upper bound of the leader's clock (``Session.bound_now``).
**Facts for the core** (``core/read_facts``): a record an earlier leader's clock stamped is
reported as such (``OtherClock``; the core reads a lease as re-stamped, and a claim's commit
writes it), a job znode deleted by hand as its generation znode's version (``Vanished``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency
from kazoo.protocol.serialization import CheckVersion, Create, Delete, SetData

from tenure.backends.zookeeper import layout as zl
from tenure.backends.zookeeper.audit import Audit
from tenure.backends.zookeeper.calls import Answer, Multi, MultiResults, ZkIo
from tenure.backends.zookeeper.errors import MAPPED, mapped, mapped_errors
from tenure.backends.zookeeper.index import Index, Placer
from tenure.backends.zookeeper.multiread import reading_many
from tenure.backends.zookeeper.session import Session
from tenure.core import read_facts, transitions
from tenure.core.bounded import Bounded
from tenure.core.clock import Clock, boot_clock, deadline_runs
from tenure.core.errors import BackendUnavailable, CorruptRecord
from tenure.core.record_transaction import Transaction
from tenure.core.records import HistoryEvent, JobRecord, JobState, Lease, Op, Rejection

_LOST_RACE = (BadVersionError, NodeExistsError, NoNodeError)
_OTHERS = (RolledBackError, RuntimeInconsistency)  # ops of a failed multi that did not fail it
_QUEUING = (Op.SUBMIT, Op.RELEASE, Op.FAIL, Op.REQUEUE)  # may queue the job: the read probes the bucket
# Leases this process wrote, kept for the holder's guess: one it misses is read, a round trip
# of its own in a batch of renewals (10,000, the size of the benchmark, left no room).
_CACHE = 100_000
T = TypeVar("T")


@dataclass
class Found:
    """A job as read: the record (None: no job znode) or why it cannot be read."""

    rec: JobRecord | None
    version: int  # of the job znode; -1 if absent
    gen: int | None  # version of the generation znode; None if absent or not read
    epoch: int | None = None  # of the leader whose clock stamped the record's times
    slot: str | None = None  # the pending entry the record names
    error: CorruptRecord | None = None


def found(job_id: str, key: str, data: bytes | None, version: int, gen: int | None) -> Found:
    if data is None:
        return Found(None, -1, gen)
    try:
        rec, epoch, slot = zl.read_job(data, key, job_id)
    except CorruptRecord as exc:
        return Found(None, version, gen, error=exc)
    return Found(rec, version, gen, epoch, slot)


class Written:
    """The leases this process wrote, with their znode versions; and whether claims here
    lately found their jobs existing (then a read goes out behind the new-job guess)."""

    def __init__(self) -> None:
        self._records: Bounded[tuple[str, int, str], Found] = Bounded(_CACHE)
        self.claims_existing = False

    def remember(self, rec: JobRecord, version: int, epoch: int) -> None:
        key = (rec.job_id, rec.token, rec.owner or "")
        if rec.state is JobState.LEASED:
            self._records.put(key, Found(rec, version, rec.token, epoch), refresh=True)
        else:
            self._records.pop(key)

    def get(self, lease: Lease) -> Found | None:
        return self._records.get((lease.job_id, lease.token, lease.owner))

    def forget(self, job_id: str, token: int, owner: str) -> None:
        self._records.pop((job_id, token, owner))


@dataclass
class Parts:
    """What every transaction of one backend shares."""

    session: Session
    index: Index
    audit: Audit
    written: Written
    injected: Clock | None  # the clock given to connect (tests): its deadlines vouch for nothing


class ZkTransaction(Transaction):
    # What most transactions leave as it was: class attributes, not set per transaction (two
    # per claim+complete, each setting every attribute was a tenth of the transaction's cost).
    _now: float | None = None
    epoch = 0
    _multi: Multi | None = None
    _placer: Placer | None = None
    _placer_read: Placer | None = None  # as the read made it, for a resend (``follow``)
    _stamp_due = False  # a guess's stamp is half used: the multi writes our clock znode first
    _stamp_sent: float | None = None
    _guessed_claim: str | None = None
    _behind: tuple[str, Callable[[], ZkIo[Found]], tuple[float, int]] | None = None
    _proposed: list[str] | None = None  # what next_claimables found
    _skip: frozenset[str] = frozenset()  # index entries a resend leaves out (``_resending``)
    _unreplaced = False  # a resend leaves out the deletes of earlier renewal events

    def __init__(self, parts: Parts, fresh: bool) -> None:
        self._p = parts
        self._client = parts.session.client
        self._layout = parts.session.layout
        self._fresh = fresh
        self._found: dict[str, Found] = {}
        self._loaded: set[str] = set()  # jobs the step read: checked at their versions if not written
        self._saved: dict[str, tuple[JobRecord, Found]] = {}
        self._checked: set[str] = set()  # the audit segments the multi checks
        self._renewals: dict[int, tuple[str, int]] = {}  # the multi's renewal events (``Audit.add_event``)
        self._guessed_leases: list[Lease] = []  # a batch of renewals guesses several
        self._odd: set[tuple[str, int]] = set()  # (job, version) whose generation znode disagreed
        self._passed: list[read_facts.Loaded] = []  # what it passed over for a write (``passed_over``)

    # -- the store's time --------------------------------------------------------------------------
    @property
    def now(self) -> float:
        if self._now is None:
            self._at(*self.answer(self._p.session.stamping()))
        assert self._now is not None
        return self._now

    @now.setter
    def now(self, value: float) -> None:
        self._now = value

    def _at(self, now: float, epoch: int) -> None:
        if self._now is None:  # the first read's: later reads are at least as new as it
            self._now, self.epoch = now, epoch

    # -- reading -------------------------------------------------------------------------------------
    def read_record(self, job_id: str) -> JobRecord | None:
        """The job's record, read (an operator's ``get``: no guess, no facts)."""
        got = self._found.get(job_id) or self._read([job_id])[0]
        if got.error:
            raise got.error
        return got.rec

    def load(self, job_id: str, op: Op, lease: Lease | None = None) -> read_facts.Loaded:
        got = self._found.get(job_id) or self._guess(job_id, op, lease) or self._followed(job_id) \
            or self._read([job_id], queue=op in _QUEUING)[0]
        self._found[job_id] = got
        self._loaded.add(job_id)
        if got.error:
            raise got.error
        rec = got.rec  # reported as found: the core decides what it means (``read_facts``)
        if rec is None:
            return None if got.gen is None else read_facts.Vanished(job_id, got.gen)
        return rec if got.epoch == self.epoch else read_facts.OtherClock(rec)

    def passed_over(self) -> list[read_facts.Loaded]:
        return self._passed

    def preload(self, job_ids: list[str]) -> None:
        self._read([j for j in job_ids if j not in self._found], queue=True)

    def follow(self, previous: Transaction) -> None:
        if not isinstance(previous, ZkTransaction):
            return
        self._behind, self._odd = previous._behind, previous._odd
        if previous.resend:  # its multi vouched for what it read, up to an index entry to leave out
            self._found, self._now, self.epoch = previous._found, previous._now, previous.epoch
            self.guessed, self._stamp_due = previous.guessed, previous._stamp_due
            self._guessed_claim, self._guessed_leases = previous._guessed_claim, previous._guessed_leases
            self._proposed, self._skip, self._unreplaced = previous._proposed, previous._skip, previous._unreplaced
            self._passed = previous._passed
            self._placer_read = previous._placer_read
            self._placer = None if self._placer_read is None else self._placer_read.copy()

    def _guess(self, job_id: str, op: Op, lease: Lease | None) -> Found | None:
        if self._fresh:
            return None
        got = None
        if op is Op.CLAIM:
            got = Found(None, -1, None)
        elif op in (Op.RENEW, Op.COMPLETE) and lease is not None and deadline_runs(lease.deadline, self._p.injected):
            got = self._p.written.get(lease)
        session = self._p.session
        bound = session.bound_now() if got is not None else None
        if bound is None and got is not None and op is not Op.CLAIM:
            # The stamp is too old to bound the leader's clock: write our clock znode (one round
            # trip, as reading the job would be) and guess, rather than read the job and, in a
            # batch of renewals, every job after it.
            self.answer(session.stamping())
            bound = session.bound_now()
        if got is None or bound is None:
            return None
        self._at(*bound[:2])
        self.guessed = True
        self._stamp_due = bound[2]  # renew the stamp in the same multi
        if op is Op.CLAIM:
            self._guessed_claim = job_id
        else:
            assert lease is not None
            self._guessed_leases.append(lease)
        return got

    def _followed(self, job_id: str) -> Found | None:
        """The read sent behind the last attempt's new-job multi, unless the job is leased."""
        behind, self._behind = self._behind, None  # answers one attempt: the next one reads
        if behind is None or behind[0] != job_id:
            return None
        got = self.answer(behind[1]())
        if got.rec is not None and got.rec.state is JobState.LEASED:
            return None
        self._at(*behind[2])
        return got

    def _send_read(self, job_id: str) -> Callable[[], ZkIo[Found]]:
        """The job's znodes read now; the answer's ``ZkIo`` waits for them."""
        key, gen_key = self._layout.znodes(job_id)
        job = self._client.get_async(key)
        gen = self._client.exists_async(gen_key)

        def answer() -> ZkIo[Found]:
            try:
                try:
                    data, stat = yield job
                    data, version = data or b"", stat.version  # none, in a znode made by hand: corrupt
                except NoNodeError:
                    data, version = None, -1
                g = yield gen
            except MAPPED as exc:
                raise mapped(exc, f"reading job {job_id!r}") from exc
            return found(job_id, key, data, version, None if g is None else g.version)

        return answer

    def _read(self, job_ids: list[str], queue: bool = False) -> list[Found]:
        return self.answer(self._reading(job_ids, queue)) if job_ids else []

    def _reading(self, job_ids: list[str], queue: bool) -> ZkIo[list[Found]]:
        """Our clock znode written, then the jobs' znodes: one round trip. What it found is
        kept (``preload``'s reads answer the step's loads). A clock znode found gone (an expired
        session) is created again, then all sent once more (``Session.with_clock``, written out
        here: one generator per read, not three)."""
        s, index = self._p.session, self._p.index
        for _ in range(2):
            try:
                bucket, probe = (yield from index.probe()) if queue else (None, None)
                sent = boot_clock()
                clock = self._client.set_async(s.clock_path, b"")
                one = self._send_read(job_ids[0]) if len(job_ids) == 1 else None
                many = None if one else self._reading_many(job_ids)  # sent after the clock write too
                try:
                    stat = yield clock
                except NoNodeError:
                    stat = None
                if stat is not None:
                    self._at(s.stamp(stat, sent), stat.mzxid >> 32)
                    if queue:
                        self._placer = index.placer(self.now, bucket, None if probe is None else (yield probe))
                        self._placer_read = self._placer.copy()
                    if one is not None:
                        got = [(yield from one())]
                    else:
                        assert many is not None
                        got = yield from many
                    self._found.update(zip(job_ids, got, strict=True))
                    return got
            except MAPPED as exc:
                raise mapped(exc, f"reading job {job_ids[0]!r}" if len(job_ids) == 1 else "reading jobs") from exc
            yield from s.clock_creating()
        raise BackendUnavailable("ZooKeeper keeps losing this client's clock znode")

    def _reading_many(self, job_ids: list[str]) -> ZkIo[list[Found]]:
        """Several jobs' znodes in one read-only multi, sent at once."""
        keys = [self._layout.job(j) for j in job_ids]
        gens = [self._layout.gen(j) for j in job_ids]
        reading = reading_many(self._client, keys + gens)  # the requests go out now

        def answer() -> ZkIo[list[Found]]:
            read = {p: (d, v) for p, d, v in (yield from reading)}
            return [found(j, k, read[k][0] if k in read else None, read[k][1] if k in read else -1,
                          read[g][1] if g in read else None) for j, k, g in zip(job_ids, keys, gens, strict=True)]

        return answer()

    def next_claimables(self, n: int) -> list[str]:
        if self._proposed is None:
            self._proposed = self.answer(self._finding(n))
        return self._proposed

    def _finding(self, n: int) -> ZkIo[list[str]]:
        if self._p.index.enabled:
            return (yield from self._p.index.claimable(self._at, self._take, n))
        taken: list[str] = []
        for job_id, data, version in (yield from self._scanned()):
            if len(taken) == n:
                break
            if self._take(job_id, data, version):
                taken.append(job_id)
        return taken

    def _take(self, job_id: str, data: bytes, version: int) -> bool:
        """Whether claim_next tries ``job_id``, proposed at ``version``: claimable by the
        store's time as the core reads it (``read_facts``). One passed over that the core
        would write (re-stamp) is kept for the step (``passed_over``)."""
        got = found(job_id, self._layout.job(job_id), data, version, None)
        rec = got.rec
        if rec is None or not transitions.is_next(rec, self.now):
            return False  # unreadable, taken since it was listed, or no claim can follow its token
        self._found[job_id] = got
        fact = rec if got.epoch == self.epoch else read_facts.OtherClock(rec)
        if transitions.is_next(read_facts.seen(fact, Op.CLAIM, self.now), self.now):
            return True
        if read_facts.restamped(fact, Op.CLAIM, self.now) is not None:
            self._passed.append(fact)
        return False

    def _scanned(self) -> ZkIo[list[tuple[str, bytes, int]]]:
        """A store without the index: every job read, expired leases first, then pending jobs
        oldest first."""
        listed: list[tuple[int, float, str, bytes, int]] = []
        with mapped_errors("listing jobs"):
            names = yield self._client.get_children_async(self._layout.jobs)
            read = yield from reading_many(self._client, [f"{self._layout.jobs}/{n}" for n in sorted(names)])
            for job_id, rec, data, version in zl.readable(self._layout.jobs, read):
                if transitions.is_claimable(rec, self.now):
                    leased = rec.state is JobState.LEASED
                    since = rec.lease_until if leased else (rec.claimable_at or rec.submitted_at)
                    listed.append((0 if leased else 1, since or 0.0, job_id, data, version))
        return [(job_id, data, version) for *_, job_id, data, version in sorted(listed)]

    # -- how I/O is waited for -----------------------------------------------------------------------
    def answer(self, io: ZkIo[T]) -> T:
        """What ``io`` returns: run now, waiting in this thread. The asyncio transaction
        (``tenure.backends.zookeeper.aio``) awaits it, the step suspended meanwhile."""
        return self._p.session.run(io)

    # -- writing -------------------------------------------------------------------------------------
    def _tx(self) -> Multi:
        if self._multi is None:
            self._multi = self._client.transaction()
            if self._stamp_due:  # first in the multi: ``_committed`` reads its answer
                self._stamp_sent = boot_clock()
                self._multi.operations.append(SetData(self._p.session.clock_path, b"", -1))
        return self._multi

    def save(self, record: JobRecord, op: Op, event: HistoryEvent | None) -> None:
        job_id = record.job_id
        got = self._found[job_id]
        tx = self._tx()
        # kazoo's requests appended as they are sent, without ``tx.create``'s and the others'
        # checks of each argument, chroot (the root is in every path ``Layout`` builds) and log
        # line: in multis of thousands (renewals, an audit trim) about a sixth of the client's CPU.
        ops, acl = tx.operations, self._p.session.acl
        slot, index_ops = self._p.index.change(op, got.rec, got.slot, record, self._placer)
        key, gen = self._layout.znodes(job_id)
        if got.version < 0:
            ops.append(Create(key, zl.dump_record(record, self.epoch, slot), acl, 0))
            base = got.gen  # a job znode deleted by hand: the token goes on from its generation znode
            if base is None:
                ops.append(Create(gen, b"", acl, 0))
                base = 0
        else:
            ops.append(SetData(key, zl.dump_record(record, self.epoch, slot), got.version))
            assert got.rec is not None
            base = got.rec.token
        if record.token != base:  # a claim, or a re-created job's first run: the counter moves
            ops.append(SetData(gen, b"", base))
        elif got.version >= 0:
            ops.append(CheckVersion(gen, base))
        for kind, path in index_ops:  # after the record's write: it fails first on a lost race
            if path not in self._skip:
                ops.append(Create(path, b"", acl, 0) if kind == "create" else Delete(path, -1))
        self._saved[job_id] = (record, got)
        if event is not None:  # after the index: the audit's writes come last
            self._p.audit.add_event(tx, event, self._checked, self._renewals, replace=not self._unreplaced)

    def add_rejection(self, rejection: Rejection) -> None:
        self._p.audit.add_rejection(self._tx(), rejection, self._checked)
        self._p.written.forget(rejection.job_id, rejection.token, rejection.owner)

    def __enter__(self) -> ZkTransaction:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        """The ``with`` block of ``ZooKeeperBackend.transaction``: committed on a normal exit,
        dropped on an exception (no ``contextlib`` generator: two per claim+complete)."""
        if kind is None:
            self.commit()

    def commit(self) -> None:
        """``committing``, written out for this thread: the multi's answer waited for here,
        without the generator and its driver (the tidying or learning after it, if any, is
        run as ``ZkIo``)."""
        tx = self._multi
        if tx is None:
            return  # nothing to write
        try:
            after = self._judged(self._sent(tx).get(timeout=self._p.session.config.timeout), tx.operations)
        except MAPPED as exc:
            raise self._write_failed(exc) from exc
        if after is not None:
            self._p.session.run(after)

    def committing(self) -> ZkIo[None]:
        """The multi, sent once: what a failed one means is judged here, whether and when to
        try again is the core's (``steps.Attempts``: ``conflict``, ``resend``)."""
        tx = self._multi
        if tx is None:
            return  # nothing to write
        try:
            after = self._judged((yield self._sent(tx)), tx.operations)
        except MAPPED as exc:
            raise self._write_failed(exc) from exc
        if after is not None:
            yield from after

    def _write_failed(self, exc: Exception) -> BackendUnavailable:
        what = f"writing job {next(iter(self._loaded))!r}" if self._loaded else "recording a rejection"
        return mapped(exc, what, write=True)

    def _sent(self, tx: Multi) -> Answer[MultiResults]:
        """The multi sent, with a check of each job read and not written; its pending answer.
        A guessed claim where claims lately found their jobs existing sends a read behind it."""
        for job_id in self._loaded:
            if job_id not in self._saved and self._found[job_id].version >= 0:
                tx.operations.append(CheckVersion(self._layout.job(job_id), self._found[job_id].version))
        pending = tx.commit_async()
        if self._guessed_claim is not None and self._p.written.claims_existing:
            self._behind = (self._guessed_claim, self._send_read(self._guessed_claim), (self.now, self.epoch))
        return pending

    def _judged(self, results: list[Any], operations: list[Any]) -> ZkIo[None] | None:
        """What the multi's answer means; the I/O that follows, if any. The op that failed it
        is a lost race (any other error is raised) or a write already done (``_resending``).
        Does no I/O itself: a loop, not a generator (every commit looks)."""
        culprit = None
        for op, result in zip(operations, results, strict=True):
            if isinstance(result, Exception) and not isinstance(result, _OTHERS):
                if not isinstance(result, _LOST_RACE):
                    raise result
                culprit = op, result
                break
        if culprit is None:
            return self._committed(results, operations)
        if culprit[0].path.startswith(self._layout.record_dirs):
            return self._lost(*culprit)  # a record's own race: not an index entry's, not an event's
        if self._p.index.redundant(*culprit):
            self._resending(skip=culprit[0].path)
        elif self._p.audit.unreplaced(*culprit):
            self._resending(unreplaced=True)
        else:
            return self._lost(*culprit)
        return None

    def _resending(self, skip: str | None = None, unreplaced: bool = False) -> None:
        """The multi failed only on a write already done: index entry ``skip`` already as the
        op would leave it (``Index.redundant``), or an earlier renewal event gone before its
        delete (``Audit.unreplaced``). Nothing was written, and every record before it was as
        read. The next attempt (``follow``) sends the same multi without that entry, or
        without any such delete, from these reads."""
        if skip is not None:
            self._skip = self._skip | {skip}
        self._unreplaced = self._unreplaced or unreplaced
        self.conflict = self.resend = True

    def _committed(self, results: list[Any], operations: list[Any]) -> ZkIo[None] | None:
        """What this process keeps of a commit; the audit's tidying it calls for, if any."""
        if self._stamp_sent is not None:
            self._p.session.stamp(results[0], self._stamp_sent)  # the clock znode, written first
        if self._placer is not None:
            self._p.index.committed(self._placer)
        for rec, got in self._saved.values():
            self._p.written.remember(rec, got.version + 1, self.epoch)  # a new znode: -1 + 1
        if self._guessed_claim is not None:
            self._p.written.claims_existing = False
        self._behind = None
        return self._p.audit.committed(results, operations, self._renewals)

    def _lost(self, op: Any, error: Exception) -> ZkIo[None] | None:
        """Nothing was written: a conflict, unless the generation znode disagrees with a
        record that is still as read, twice: that record tenure did not write. ``op`` failed
        the multi (the others were rolled back or not tried); returns the audit's I/O that
        calls for, if any (``Audit.failed``)."""
        path = getattr(op, "path", "")
        if not self.guessed and path.startswith(self._layout.gens + "/") and isinstance(op, (SetData, CheckVersion)):
            job_id = zl.decode(path.rsplit("/", 1)[1])
            seen = (job_id, self._found[job_id].version)
            if seen in self._odd:
                rec = self._found[job_id].rec
                raise CorruptRecord(path, "generation znode version does not match the record's token "
                                    f"{rec.token if rec else 0}")
            self._odd.add(seen)
        if self._guessed_claim is not None:
            self._p.written.claims_existing = True
        for lease in self._guessed_leases:
            self._p.written.forget(lease.job_id, lease.token, lease.owner)
        self.conflict = True
        if path.startswith(self._layout.record_dirs):
            return None  # a record's own race: the audit's segments are as they were
        return self._p.audit.failed(op, error)
