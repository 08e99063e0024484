"""``zk://user:pass@h1:2181,h2:2181/root``: leases on ZooKeeper through kazoo.

Every decision follows one pattern, two round trips (``held`` has the two cases
that need only the second):

1. *read*: write this client's clock znode and read the job's znodes, pipelined in one round
   trip. ZooKeeper answers a session's requests in order, so the job data is at least as new
   as the clock write, whose ``mtime`` the leader stamped: the store's time of this step.
2. *write*: one ``multi`` that checks the job znode's version (and the generation znode's, for
   claims) and writes the new record plus a history or rejection znode. If anything changed
   since step 1 the multi fails as a whole and the step is retried from a fresh read.

The token is the version of ``gen/<job>``, which only claims write; see ``layout``
and docs/backends/zookeeper.md. The multi also keeps the index of claimable jobs that
``claim_next`` reads (``index``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)

from tenure.backends.zookeeper import layout as zl
from tenure.backends.zookeeper import query as zookeeper_query
from tenure.backends.zookeeper.acl import Guard
from tenure.backends.zookeeper.audit import Audit
from tenure.backends.zookeeper.config import Config, mapped_errors
from tenure.backends.zookeeper.held import HeldRecords
from tenure.backends.zookeeper.index import Index, Known, Placer
from tenure.backends.zookeeper.multiread import read_many
from tenure.backends.zookeeper.session import Session
from tenure.core import contention, paging, protocol, transitions
from tenure.core.backend import Characteristics, Link, SteppedBackend
from tenure.core.clock import Clock, boot_clock
from tenure.core.codec import corrupt_status
from tenure.core.errors import (
    AlreadyClaimed,
    BackendUnavailable,
    CorruptRecord,
    JobCompleted,
    JobNotFound,
    StaleLease,
    TokenChanged,
)
from tenure.core.options import Options, StoreURL
from tenure.core.records import (
    Change,
    HistoryEvent,
    JobPage,
    JobRecord,
    JobState,
    JobStatus,
    Lease,
    Op,
    Rejection,
    Summary,
)
from tenure.core.transitions import history_event

SUBMIT_BATCH = 250  # jobs per multi in submit_many: about 200 KB, well under jute.maxbuffer (1 MB)
# Bytes of a submit_many multi at most, by _submit_size: a multi above the server's
# jute.maxbuffer (1 MB by default) is not refused but drops the connection, every time.
SUBMIT_BYTES = 512 * 1024
_CONTENTION = (BadVersionError, NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency)


@dataclass
class _Read:
    """What step 1 saw: the store's time and the job's znodes as of after that time."""

    now: float
    epoch: int  # of the leader whose clock gave ``now`` (the high half of the zxid)
    key: str
    data: bytes | None
    version: int  # of the job znode; -1 if absent
    gen_version: int | None  # of the generation znode; None if absent or not read
    placer: Placer | None = None  # where a job this step queues goes; None if not probed
    exact: bool = True  # False: ``now`` is only an upper bound (HeldRecords), no expiry judge

    def record(self, job_id: str) -> JobRecord | None:
        return None if self.data is None else zl.load_record(self.data, self.key, job_id)

    @property
    def slot(self) -> str | None:
        """The pending index entry the record names."""
        return zl.queued_slot(self.data)


class ZooKeeperBackend(SteppedBackend):
    characteristics = Characteristics(
        name="zookeeper",
        store_clock="the ZooKeeper leader's clock, as it stamps znode mtimes",
        min_ttl=0.1,
        max_result_bytes=512 * 1024,  # base64 in a znode under jute.maxbuffer (1 MB), with the record
        tls_options=("tls",),
        clock_resolution=0.001,  # znode mtimes are whole milliseconds
        counts_from_indexes=True,  # where the store has the claimable index (zookeeper.query)
    )

    def __init__(self, config: Config, injected: Clock | None = None) -> None:
        """``injected``: the clock given to ``connect`` (tests), which holders' deadlines are
        on; it only decides whether those vouch for anything (``clock.deadline_runs``)."""
        self.config = config
        self.session = Session(config)
        self.client = self.session.client
        self.layout = self.session.layout
        self.held = HeldRecords(self.session, self, injected)
        self._claims_existing = False  # whether the last claim found its job existing
        try:
            self.index = Index(self.session, self._ensure_layout(), self.drop_stale)
            self._queries = zookeeper_query.ZooKeeperIndex(self.client, self.layout, config.timeout)
            self.audit = Audit(self.session)
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_url(cls, url: StoreURL, options: Options, clock: Clock | None) -> ZooKeeperBackend:
        # ``clock`` only sets holders' deadlines (in Store); the store's clock is the leader's.
        return cls(Config.from_url(url, options), clock)

    def link(self) -> Link:
        return self.session.link()

    def _ensure_layout(self) -> bool:
        """Create what is missing; True if the store has (or now has) the claimable index.

        A store whose ``jobs/`` has children but no ``pending/`` was written by a version
        without the index: it is used without one (``claim_next`` scans), never half-indexed.
        """
        dirs = self.layout.dirs + self.layout.index_dirs
        Guard(self.session).check(dirs)  # before anything is written under a root anyone may change
        with mapped_errors("creating the layout"):
            found = [self.client.exists_async(p) for p in dirs]
            stats = {path: self.session.wait(result) for path, result in zip(dirs, found, strict=True)}
            jobs = stats[self.layout.jobs]
            indexed = stats[self.layout.pending] is not None or jobs is None or jobs.numChildren == 0
            for path in dirs if indexed else self.layout.dirs:
                if stats[path] is None:
                    acl = self.config.clocks_acl() if path == self.layout.clocks else None
                    with contextlib.suppress(NodeExistsError):
                        self.client.create(path, b"", acl=acl, makepath=True)
        self.session.clock_create()
        return indexed

    # -- step 1: store time and the job's znodes -------------------------------------------
    def _read(self, job_id: str, *, gen: bool = False, queue: bool = False,
              sent: Callable[[], _Read | None] | None = None) -> _Read:
        """``queue``: the step may queue the job, so also probe the bucket it would go in.
        ``sent``: the answer of a step 1 already sent (``_send_read``), to wait for first."""
        return self.session.with_clock(
            lambda first: (sent if first and sent else self._send_read(job_id, gen=gen, queue=queue))())

    def _send_read(self, job_id: str, *, gen: bool = False, queue: bool = False,
                   bound: tuple[float, int] | None = None) -> Callable[[], _Read | None]:
        """Send step 1; the function returned waits for it (None if our clock znode is gone).

        ``bound``: (store time, epoch) from ``HeldRecords`` instead of writing the clock znode,
        for a read whose ``now`` only sets times and is never used to judge expiry.
        """
        key = self.layout.job(job_id)
        what = f"reading job {job_id!r}"
        with mapped_errors(what):
            bucket, probe = self.index.probe() if queue else (None, None)
            sent = boot_clock()
            clock = None if bound else self.client.set_async(self.session.clock_path, b"")
            job = self.client.get_async(key)
            gen_stat = self.client.exists_async(self.layout.gen(job_id)) if gen else None

        def answer() -> _Read | None:
            with mapped_errors(what):
                if clock is None:
                    assert bound is not None
                    now, epoch = bound
                else:
                    try:
                        clock_stat = self.session.wait(clock)
                    except NoNodeError:
                        return None
                    now = self.session.stamp(clock_stat, sent)
                    epoch = clock_stat.mzxid >> 32  # a zxid's high half counts leader elections
                try:
                    data, stat = self.session.wait(job)
                    version = stat.version
                except NoNodeError:
                    data, version = None, -1
                g = None if gen_stat is None else self.session.wait(gen_stat)
                placer = self.index.placer(now, bucket, None if probe is None else self.session.wait(probe))
                return _Read(now, epoch, key, data, version, None if g is None else g.version,
                             placer if queue else None, exact=clock is not None)

        return answer

    def now(self) -> float:
        return self.session.now()

    # -- step 2: one multi ---------------------------------------------------------------------
    def _commit(self, tx: Any, what: str, known: Known | None = None) -> list[Any] | None:
        """Commit a multi: its results, or None if it was outraced (a version moved since the
        read) or an index entry was not as expected (``known`` learns which, for the next try)."""
        return self.send_commit(tx, what, known)()

    def send_commit(self, tx: Any, what: str, known: Known | None = None) -> Callable[[], list[Any] | None]:
        """``_commit``, sent now; the function returned waits for the answer."""
        with mapped_errors(what):
            pending = tx.commit_async()

        def answer() -> list[Any] | None:
            with mapped_errors(what):
                results: list[Any] = self.session.wait(pending)
                failed = [r for r in results if isinstance(r, Exception)]
                for exc in failed:
                    if not isinstance(exc, _CONTENTION):
                        raise exc
            if failed:
                self.index.learn(tx.operations, results, known)
                self.audit.failed(tx.operations, results)
                return None
            self.audit.committed(results)
            return results

        return answer

    def fast_write(self, tx: Any, now: tuple[float, int], old: JobRecord | None, version: int,
                   new: JobRecord, op: Op) -> Any:
        """For ``HeldRecords``: add to ``tx`` what ``_write`` adds, with the record at
        ``version`` (-1: created) and ``now`` = (store time, epoch), read from nothing."""
        read = _Read(now[0], now[1], self.layout.job(new.job_id), None, version, None)
        return self._write(read, old, new, op, tx=tx)

    def _gen_of(self, read: _Read, rec: JobRecord | None, job_id: str,
                seen: set[tuple[int, int | None]]) -> int | bool | None:
        """The generation znode's version, or False to read again.

        The two znodes are read one after the other, so a claim committed in between shows
        a mismatch once; the same mismatch seen twice is a record tenure did not write.
        """
        if rec is None or read.gen_version == rec.token:
            return read.gen_version
        if (read.version, read.gen_version) in seen:
            raise CorruptRecord(self.layout.gen(job_id), f"generation znode version {read.gen_version}"
                                f" does not match the record's token {rec.token}")
        seen.add((read.version, read.gen_version))
        return False

    def _write(self, read: _Read, old: JobRecord | None, new: JobRecord, op: Op,
               actor: str | None = None, known: Known | None = None, tx: Any = None) -> Any:
        """A multi that writes ``new`` if the job znode is as read, with its history event and
        the index entries that change with it (added to ``tx`` if given)."""
        tx = self.client.transaction() if tx is None else tx
        slot, index_ops = self.index.change(old, read.slot, new, read.placer, known)
        if read.version < 0:
            tx.create(read.key, zl.dump_record(new, read.epoch, slot))
        else:
            tx.set_data(read.key, zl.dump_record(new, read.epoch, slot), version=read.version)
        for kind, path in index_ops:  # after the record's write: it fails first on a lost race
            if kind == "create":
                tx.create(path, b"")
            else:
                tx.delete(path)
        self.audit.add_event(tx, history_event(new, op, read.now, actor))
        return tx

    # -- the protocol ----------------------------------------------------------------------------
    def submit(self, job_id: str, actor: str | None = None) -> None:
        seen: set[tuple[int, int | None]] = set()
        known = Known()
        for _ in contention.attempts():
            read = self._read(job_id, gen=True, queue=True)
            rec = read.record(job_id)
            gen = self._gen_of(read, rec, job_id, seen)
            if gen is False:
                continue
            tx = self._submit_in(read, rec, gen, job_id, actor, known.at(read.version))
            if tx is None or self._commit(tx, f"submitting {job_id!r}", known):
                return
        raise contention.outraced(job_id)

    def submit_many(self, job_ids: list[str], actor: str | None = None) -> None:
        """One pipelined read and one multi per ``SUBMIT_BATCH`` jobs. Each multi is atomic,
        the call as a whole is not (as with one ``submit`` per job); a batch that loses a race
        or meets a record it cannot read is submitted again job by job."""
        protocol.submit_in_batches(job_ids, SUBMIT_BATCH, lambda chunk: self._submit_batch(chunk, actor),
                                   lambda job_id: self.submit(job_id, actor), self._submit_size, SUBMIT_BYTES)

    def _submit_size(self, job_id: str) -> int:
        """What a job adds to a submit multi, at most: three paths that name it (job, generation,
        pending entry), two JSON texts that hold it (record, history event; a character outside
        ASCII takes up to 12 bytes there), and the rest of both."""
        return 3 * (len(self.layout.job(job_id)) + 48) + 2 * len(json.dumps(job_id)) + 512

    def _submit_batch(self, job_ids: list[str], actor: str | None) -> bool:
        tx, changed = self.client.transaction(), False
        for job_id, read in zip(job_ids, self._read_many(job_ids), strict=True):
            try:
                rec = read.record(job_id)
            except CorruptRecord:
                return False  # submit() raises it, having submitted the jobs before it
            if rec is not None and read.gen_version != rec.token:
                return False  # submit() tells a race from a corrupt generation znode
            changed |= self._submit_in(read, rec, read.gen_version, job_id, actor, None, tx) is not None
        return not changed or self._commit(tx, f"submitting {len(job_ids)} jobs") is not None

    def _read_many(self, job_ids: list[str]) -> list[_Read]:
        """Step 1 for several jobs in one round trip (a read-only multi), with the probe."""
        keys = [self.layout.job(j) for j in job_ids]
        gens = [self.layout.gen(j) for j in job_ids]

        def attempt(_: bool) -> list[_Read] | None:
            with mapped_errors("reading jobs"):
                bucket, probe = self.index.probe()
                sent = boot_clock()
                clock = self.client.set_async(self.session.clock_path, b"")
                # Sent after the clock write, so answered after it: as new as that time.
                found = {path: (data, version) for path, data, version
                         in read_many(self.client, keys + gens, self.config.timeout)}
                try:
                    clock_stat = self.session.wait(clock)
                except NoNodeError:
                    return None
                now, epoch = self.session.stamp(clock_stat, sent), clock_stat.mzxid >> 32
                placer = self.index.placer(now, bucket, None if probe is None else self.session.wait(probe))
            absent: tuple[bytes | None, int] = (None, -1)
            return [_Read(now, epoch, key, found.get(key, absent)[0], found.get(key, absent)[1],
                          found[gen][1] if gen in found else None, placer) for key, gen in zip(keys, gens, strict=True)]

        return self.session.with_clock(attempt)

    def _submit_in(self, read: _Read, rec: JobRecord | None, gen: int | None, job_id: str,
                   actor: str | None, known: Known | None, tx: Any = None) -> Any:
        """Add a submit to ``tx`` (a new multi if None); None if there is nothing to change."""
        new = transitions.submit(rec, job_id, read.now)
        if new is None:
            return None
        recreated = rec is None and bool(gen)  # the job znode was deleted; its generations were not
        if recreated:
            # The new job znode starts again at version 0, where the holder's one-round-trip
            # renew (held) could find the version it knows: moving the generation
            # znode, which that multi checks, refuses it. The token skips one, never repeats.
            assert gen
            new = JobRecord(job_id, JobState.PENDING, token=gen + 1, submitted_at=read.now)
        tx = self._write(read, rec, new, Op.SUBMIT, actor, known, tx)
        if gen is None:
            tx.create(self.layout.gen(job_id), b"")
        elif recreated:
            tx.set_data(self.layout.gen(job_id), b"", version=gen)
        return tx

    def claim(self, job_id: str, owner: str, ttl: float) -> Lease:
        # One round trip: the multi that claims the job if it is new (HeldRecords), and behind
        # it step 1 of the general path, answered after the multi, for a job that exists.
        # The read costs the server and kazoo's thread work for nothing when the job is new,
        # so it goes along only if the last claim here found its job existing: a worker that
        # claims new jobs pays one round trip, one that claims known jobs two, as before.
        first = None
        fast = self.held.send_claim_new(job_id, owner, ttl)
        if fast is not None:
            claimed, bound = fast
            if self._claims_existing:
                first = self._send_read(job_id, gen=True, bound=bound)  # no clock write: see _claim
            lease = claimed()
            self._claims_existing = lease is None
            if lease is not None:
                return lease
        lease = self._claim(job_id, owner, ttl, first=first)
        assert lease is not None
        return lease

    def _claim(self, job_id: str, owner: str, ttl: float, entry: str | None = None,
               first: Callable[[], _Read | None] | None = None) -> Lease | None:
        """Claim ``job_id``; for ``claim_next``, ``entry`` is the index entry that proposed it:
        then a job that does not exist is not created (None), and an entry that no longer
        describes the record is deleted, in a multi that checks the record is as read."""
        seen: set[tuple[int, int | None]] = set()
        known = Known()
        for _ in contention.attempts():
            read, first = self._read(job_id, gen=True, sent=first), None
            rec = read.record(job_id)
            if not read.exact and rec is not None and rec.state is JobState.LEASED:
                continue  # whether its lease expired is the leader's clock's to say: read it
            gen = self._gen_of(read, rec, job_id, seen)
            if gen is False:
                continue
            if entry is not None and rec is None:
                self.drop_stale(entry, None)
                return None
            if rec is None and gen:
                rec = JobRecord(job_id, JobState.PENDING, token=gen, submitted_at=read.now)
            if rec is not None and self._stamped_by_another_leader(read, rec):
                self._rebase(read, rec)
                continue
            try:
                new = transitions.claim(rec, job_id, owner, ttl, read.now)
            except (AlreadyClaimed, JobCompleted):
                if entry is not None and self.index.stale(read.data, rec, entry):
                    self.drop_stale(entry, read.version)
                raise
            old = None if read.version < 0 else rec  # a job znode deleted by hand had no index
            tx = self._write(read, old, new, Op.CLAIM, known=known.at(read.version))
            gen_path = self.layout.gen(job_id)
            if gen is None:
                tx.create(gen_path, b"")
            # Only claims write this znode, so its version counts claims: the token.
            tx.set_data(gen_path, b"", version=gen or 0)
            if self._commit(tx, f"claiming {job_id!r}", known):
                self.held.remember(new, 0 if read.version < 0 else read.version + 1)
                return transitions.lease_of(new)
        raise contention.outraced(job_id)

    def drop_stale(self, entry: str, version: int | None) -> None:
        """Delete an index entry that no longer describes its job, provided the job znode is
        still at ``version`` (None: there is no job znode; only pending entries are dropped
        then, since a leased entry may be a claim of a new job being committed)."""
        tx = self.client.transaction()
        if version is not None:
            tx.check(self.layout.job(self._entry_job(entry)), version)
        elif entry.startswith(self.layout.leased + "/"):
            return
        tx.delete(entry)
        with contextlib.suppress(BackendUnavailable):  # tidying only: a failure changes nothing
            self._commit(tx, "dropping a stale index entry")

    def _entry_job(self, entry: str) -> str:
        name = entry.rsplit("/", 1)[1]
        return zl.decode(name) if entry.startswith(self.layout.leased + "/") else zl.entry_job(name)

    def _stamped_by_another_leader(self, read: _Read, rec: JobRecord) -> bool:
        """A lease whose expiry an earlier leader's clock stamped: this leader's clock may
        disagree with it in either direction, so its ``lease_until`` means nothing here."""
        if rec.state is not JobState.LEASED or read.data is None:
            return False
        return zl.stamp_epoch(read.data) != read.epoch

    def _on_this_leaders_clock(self, read: _Read, rec: JobRecord | None) -> JobRecord | None:
        """The record with a lease an earlier leader stamped restarted on this leader's clock.

        The holder's own deadline ends within a TTL of its last renewal, which came before
        this read, so a lease ending a full TTL from now on the new clock outlasts it
        whichever way the two leaders' clocks differ.
        """
        if rec is None or not self._stamped_by_another_leader(read, rec):
            return rec
        assert rec.ttl is not None
        return dataclasses.replace(rec, lease_until=read.now + rec.ttl)

    def _rebase(self, read: _Read, rec: JobRecord) -> None:
        """Write the lease re-stamped on this leader's clock, then report it as held.

        Costs up to one TTL of extra reclaim delay after a leader change, once per lease
        nobody renewed since.
        """
        rebased = self._on_this_leaders_clock(read, rec)
        assert rebased is not None
        tx = self.client.transaction()
        tx.set_data(read.key, zl.dump_record(rebased, read.epoch), version=read.version)
        if self._commit(tx, f"re-stamping {rec.job_id!r} on the new leader's clock"):
            raise AlreadyClaimed(rec.job_id, rec.owner, rec.token, rebased.lease_until)

    def claim_next(self, owner: str, ttl: float) -> Lease | None:
        if not self.index.enabled:
            return self._claim_next_by_scan(owner, ttl)
        return protocol.first_claimed(self.index.candidates(),
                                      lambda candidate: self._claim(candidate[0], owner, ttl, candidate[1]))

    def _claim_next_by_scan(self, owner: str, ttl: float) -> Lease | None:
        # A store without the index. Candidates from a scan (expired leases first, then pending
        # oldest first); each is claimed with a fresh read, so a stale scan costs a retry,
        # never a wrong claim.
        now = self.now()
        candidates = [(0, r.lease_until or 0.0, r.job_id) if r.state is JobState.LEASED
                      else (1, r.submitted_at or 0.0, r.job_id)
                      for r in self._records() if isinstance(r, JobRecord)
                      and transitions.is_claimable(r, now)]
        return protocol.first_claimed([job_id for *_, job_id in sorted(candidates)],
                                      lambda job_id: self.claim(job_id, owner, ttl))

    def _holder_op(self, op: Op, lease: Lease, change: transitions.Change) -> JobRecord:
        if op is not Op.RELEASE:  # a release queues the job: that needs the bucket read first
            fast = self.held.holder_op(op, lease, change)
            if fast is not None:
                return fast
        known = Known()
        for _ in contention.attempts():
            read = self._read(lease.job_id, queue=op is Op.RELEASE)
            rec = read.record(lease.job_id)
            # Judged as a claim would leave it: re-stamped if an earlier leader stamped it
            # (that leader's expiry means nothing on this clock). The multi checks the version.
            step = transitions.holder_step(self._on_this_leaders_clock(read, rec), op, lease, change, read.now)
            if isinstance(step, JobRecord):
                tx = self._write(read, rec, step, op, known=known.at(read.version))
                if self._commit(tx, f"{op} of {lease.job_id!r}", known):
                    self.held.remember(step, read.version + 1)
                    return step
                continue
            rejected = step
            tx = self.client.transaction()
            if read.version >= 0:  # the rejection stands only if the record is still as judged
                tx.check(read.key, read.version)
            self.audit.add_rejection(tx, rejected)
            if self._commit(tx, f"auditing a stale {op}"):
                self.held.forget(lease)
                raise StaleLease(rejected)
        raise contention.outraced(lease.job_id)

    def force_expire(self, job_id: str, actor: str | None = None, token: int | None = None) -> None:
        for _ in contention.attempts():
            read = self._read(job_id)
            rec = read.record(job_id)
            if rec is None:
                raise JobNotFound(job_id)
            if token is not None and rec.token != token:
                raise TokenChanged(job_id, token, rec.token)  # as of a read: nothing was written
            # A lease an earlier leader stamped is ended too: judged on this leader's clock it
            # may look over already, yet the next claim would re-stamp it and find it held.
            if rec.state is not JobState.LEASED or (
                    not self._stamped_by_another_leader(read, rec) and transitions.is_claimable(rec, read.now)):
                return
            new = transitions.force_expire(rec, read.now)
            tx = self._write(read, rec, new, Op.EXPIRE, actor)
            if token is not None:  # the generation znode's version is the token: still the one seen
                tx.check(self.layout.gen(job_id), token)
            if self._commit(tx, f"expiring {job_id!r}"):
                return
        raise contention.outraced(job_id)

    # -- reading ------------------------------------------------------------------------------------
    def get(self, job_id: str) -> JobStatus | None:
        read = self._read(job_id)
        try:
            rec = read.record(job_id)
        except CorruptRecord as exc:
            return corrupt_status(job_id, exc.key, exc)
        return None if rec is None else transitions.status(rec, read.now)

    def _records(self, now: float | None = None) -> Iterator[JobRecord | JobStatus]:
        """Every job znode: a record, or a CORRUPT status for one tenure cannot read; with
        ``now``, the status at that store time instead of the record (the listing's fast way)."""
        with mapped_errors("listing jobs"):
            names = sorted(self.client.get_children(self.layout.jobs))
        prefix = len(self.layout.jobs) + 1
        paths = [f"{self.layout.jobs}/{n}" for n in names]
        with mapped_errors("listing jobs"):
            for path, data, _ in read_many(self.client, paths, self.config.timeout):
                name = path[prefix:]
                status = None if now is None else zookeeper_query.listed(name, data, now)
                yield zl.decoded(self.layout.jobs, name, data) if status is None else status

    def jobs(self) -> Iterator[JobStatus]:
        now = self.now()
        for item in self._records(now):
            yield transitions.status(item, now) if isinstance(item, JobRecord) else item

    def summary(self, now: float, soon: float) -> Summary:
        counted = self._queries.counts(now, soon) if self.index.enabled else None  # zookeeper.query
        if counted is None:
            return super().summary(now, soon)
        return dataclasses.replace(counted, rejections_last_hour=len(self.rejections(now - 3600.0, None)))

    def page(self, now: float, states: frozenset[JobState] | None, job: str | None,
             owner: str | None, order: str, offset: int, limit: int) -> JobPage:
        indexed = (paging.page(self._queries, now, states, job, owner, order, offset, limit)
                   if self.index.enabled else None)
        return indexed or super().page(now, states, job, owner, order, offset, limit)

    def build_indexes(self) -> int:
        """Give a store made before the claimable index that index (an upgrade, run while no
        other client is connected: see ``zookeeper.upgrade``); how many jobs it indexed."""
        from tenure.backends.zookeeper.upgrade import build_indexes

        return build_indexes(self.session, self.index)

    def rejections(self, since: float | None, limit: int | None) -> list[Rejection]:
        return self.audit.rejections(since, limit)

    def record_rejection(self, rejection: Rejection) -> None:
        tx = self.client.transaction()
        self.audit.add_rejection(tx, rejection)
        self._commit(tx, "recording a rejection")

    def history(self, job_id: str | None, since: float | None, limit: int | None) -> list[HistoryEvent]:
        return self.audit.history(job_id, since, limit)

    def watch(self, stop: threading.Event, interval: float) -> Iterator[Change]:
        from tenure.backends.zookeeper.watch import watch

        return watch(self.session, self.audit.rejection_log, stop, interval)

    def health(self) -> dict[str, Any]:
        info: dict[str, Any] = {"backend": "zookeeper", "hosts": self.config.hosts,
                                "root": self.config.root, "state": str(self.client.state),
                                "store_clock": self.characteristics.store_clock}
        info["store_time"] = self.now()
        zxid = self.session.last_zxid
        info["zxid"], info["leader_epoch"] = hex(zxid), zxid >> 32
        with mapped_errors("reading server facts"):
            if not self.config.tls:  # kazoo 2.11's four-letter words fail over TLS
                for line in self.client.command(b"srvr").splitlines():
                    name, _, value = line.partition(":")
                    if name in ("Zookeeper version", "Mode", "Node count"):
                        info[name.lower().replace(" ", "_")] = value.strip()
            stat = self.client.exists(self.layout.jobs)
            info["jobs"] = stat.numChildren if stat else 0
            info["session_id"] = hex(self.client.client_id[0]) if self.client.client_id else None
        return info

    def close(self) -> None:
        self.session.close()
