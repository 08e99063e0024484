"""``etcd://h1:2379,h2:2379,h3:2379/prefix``: leases on etcd, tokens from etcd revisions.

A claim's fencing token is the revision of the transaction that made it (the create revision
of the job's lease key). Revisions are global and never reused, so tokens grow across expiry,
completion, restarts and leader changes. Expiry is etcd's: the lease key is attached to an
etcd lease with the job's TTL, and etcd deletes it when that runs out.

Round trips: claim 1 for a new job when an etcd lease of an ended claim can be reused, else 2
(the transaction's failure branch reads the job, or a grant is sent alongside a read); renew 1
(a keep-alive sent alongside the transaction) when this process made the claim with the same
TTL, otherwise 2; complete and release 1. A stale renew/complete/release writes its rejection
in the failure branch of that same transaction, and a later write fills in why. Reusing etcd
leases keeps grants and revokes off the hot path; why it keeps the holder's safe deadline is
in ``_EtcdLease`` and docs/backends/etcd.md.

``now()`` is this machine's wall clock: etcd has no clock API. Expiry never depends on it;
``expires_at`` is an estimate (local time of the grant or keep-alive plus the TTL plus
``EXPIRY_GRACE``) of when etcd will have deleted the lease key. Key layout: ``layout``.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import math
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from tenure.backends.etcd import client as ec
from tenure.backends.etcd import scan as etcd_scan
from tenure.backends.etcd.client import KV, Connection, Pending, TxnResult
from tenure.backends.etcd.layout import (
    UNKNOWN_REASON,
    JobValue,
    Keys,
    end_value,
    event_value,
    held_ttl,
    held_value,
    job_value,
    lease_value,
    owner_prefix,
    parse,
    queued_since,
    read_event,
    read_rejection,
    record,
    rejection_value,
)
from tenure.core import audit, contention, protocol, transitions
from tenure.core.backend import Backend, Characteristics
from tenure.core.clock import Clock, boot_clock, deadline_runs
from tenure.core.codec import corrupt_status
from tenure.core.errors import (
    AlreadyClaimed,
    BackendUnavailable,
    CorruptRecord,
    InvalidArgument,
    JobCompleted,
    JobNotFound,
    LeaseError,
    NotYetClaimable,
    StaleLease,
    TokenChanged,
)
from tenure.core.options import Options, StoreURL
from tenure.core.records import Change, HistoryEvent, JobRecord, JobState, JobStatus, Lease, Op, Reason, Rejection

log = logging.getLogger("tenure.etcd")

DEFAULT_PORT = 2379
EXPIRY_GRACE = 1.0  # etcd checks for expired leases every 500 ms, then deletes through raft
_CACHE = 10_000  # etcd leases of claims made here, for one-round-trip renewals
_SLACK = 1  # seconds a claim's etcd lease gets beyond its TTL, so later claims can reuse it
_POOL = 64  # idle etcd leases kept for reuse by claims (unused ones run out by themselves)
_MIN_LEFT = 1.0  # a pooled lease with less than this surely left is dropped, not kept alive
_NOTHING_WRITTEN = (AlreadyClaimed, JobCompleted, CorruptRecord)  # raised only on a definite "no"
_ENDED = 100_000  # leases seen ended by etcd, remembered for their quarantine
_BATCH = 30  # new jobs per submit_many transaction (4 writes each; etcd allows 128 a side)
_QUEUE_PAGE = etcd_scan.QueueCursor.PAGE  # pending jobs claim_next reads at a time
_SPREAD = 4  # concurrent claim_next calls start this many queue places apart at most


def _etcd_ttl(ttl: float) -> int:
    return max(1, math.ceil(ttl))  # etcd leases count whole seconds: round up, never shorten


_Stamped = TypeVar("_Stamped", Rejection, HistoryEvent)  # an audit record with a store time ``at``

@dataclasses.dataclass
class _EtcdLease:
    """An etcd lease of this process and what is known of its end.

    ``confirmed`` is the local monotonic time just before the last grant or keep-alive of it
    was sent, whose reply said ``granted`` seconds. etcd starts counting when the leader gets
    the request, so the lease ends no earlier than ``confirmed + granted`` (revocation aside:
    tenure revokes only leases it took out of use, see ``EtcdBackend._end``).
    """

    id: int
    ttl: int  # the etcd TTL of the claims it serves (its granted TTL less any slack)
    granted: int
    confirmed: float
    alive: bool = True  # False once a keep-alive found it gone: never kept alive or pooled again

    def fresh(self, now: float) -> bool:
        """Whether a claim sent at ``now`` may use it without a keep-alive.

        Half the slack: etcd's lease then ends no earlier than ``now + ttl`` even if etcd's
        clock runs up to 50 % faster than ours (``drift_margin`` is 5 % by default).
        """
        return now - self.confirmed <= (self.granted - self.ttl) / 2


@dataclasses.dataclass
class _Ended:
    """A lease etcd ended, as this process saw it: when first, and its holder's longest TTL."""

    first_seen: float  # monotonic, no earlier than the answer that showed the key gone
    ttl: float | None = None  # from the job and held keys, once a claim has read them


class _Snapshot:
    """A job's keys read at one revision, and the record they make."""

    def __init__(self, job_id: str, kvs: list[list[KV]], now: float) -> None:
        job, lease, end, held = (r[0] if r else None for r in kvs)
        self.job, self.lease, self.end, self.held = job, lease, end, held
        # The lease's incarnation (the held key's mod revision; 0 without one): what a wait
        # before a claim was for, and what the claim then compares (_wait_out_holder).
        self.incarnation = held.mod_revision if held is not None else 0
        self.mods = (job.mod_revision if job else 0, lease.create_revision if lease else 0,
                     end.mod_revision if end else 0)
        self.now = now  # judge the record by this time only: a live lease key is live at it
        self.seen = boot_clock()  # no earlier than etcd's answer (see _wait_out_holder)
        self.record = record(job_id, job, lease, end, now)


class EtcdBackend(Backend):
    characteristics = Characteristics(
        name="etcd",
        store_clock="etcd's lease TTLs decide expiry; times shown are the client's wall clock",
        min_ttl=2.0,
        tokens_ordered_across_jobs=True,
        max_result_bytes=512 * 1024,  # base64, twice in a complete txn, under the 1.5 MiB request limit
        tls_options=("ca_cert",),
    )

    def __init__(self, hosts: list[tuple[str, int]], prefix: str, *, clock: Clock | None = None,
                 timeout: float = 5.0, retention: float = 7 * 86400.0, **security: Any) -> None:
        self.keys = Keys(prefix)
        self.hosts = hosts
        self.retention = retention
        self._clock = clock
        self._conn = Connection(hosts, timeout=timeout, **security)
        self._lock = threading.Lock()
        self._leases: collections.OrderedDict[tuple[str, int, str], _EtcdLease] = collections.OrderedDict()
        self._pool: dict[int, list[_EtcdLease]] = {}  # idle leases by the etcd TTL they serve
        self._pooled = 0
        self._queue = etcd_scan.QueueCursor(self.keys)
        # (job, incarnation) of leases etcd ended, for the wait before a claim (_wait_out_holder)
        self._ended: collections.OrderedDict[tuple[str, int], _Ended] = collections.OrderedDict()
        self._retention_lease: tuple[int, float] | None = None  # (id, monotonic time to rotate)
        try:
            self._conn.range(self.keys.retention)  # fail now if unreachable or refused
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_url(cls, url: StoreURL, options: Options, clock: Clock | None) -> EtcdBackend:
        hosts = [(h, p or DEFAULT_PORT) for h, p in url.hosts] or [("127.0.0.1", DEFAULT_PORT)]
        timeout = options.number("timeout", 5.0, low=0.0, high=600.0, low_open=True)
        retention = options.number("retention", 7 * 86400.0, low=10.0, high=365 * 86400.0)
        user = options.text("user", url.username)
        password = options.text("password", url.password)
        files = {name: options.text(name) for name in ("ca_cert", "cert_cert", "cert_key")}
        options.finish()
        if (user is None) != (password is None):
            raise InvalidArgument("etcd authentication needs both user and password")
        if (files["cert_cert"] is None) != (files["cert_key"] is None):
            raise InvalidArgument("etcd client certificates need both cert_cert and cert_key")
        if files["cert_cert"] is not None and files["ca_cert"] is None:
            raise InvalidArgument("etcd client certificates need ca_cert (TLS) as well")
        for name, path in files.items():
            if path is not None and not Path(path).is_file():
                raise InvalidArgument(f"option {name}={path!r} for etcd://: no such file")
        assert timeout is not None and retention is not None
        return cls(hosts, url.path, clock=clock, timeout=timeout, retention=retention,
                   user=user, password=password, **files)

    # -- helpers -------------------------------------------------------------------------
    def now(self) -> float:
        return self._clock.time() if self._clock is not None else time.time()

    def _reads(self, job_id: str, revision: int = 0) -> list[Any]:
        k = self.keys
        return [ec.get(k.job(job_id), revision=revision), ec.get(k.lease(job_id), revision=revision),
                ec.get(k.end(job_id), revision=revision), ec.get(k.held(job_id), revision=revision)]

    def _snapshot(self, job_id: str) -> _Snapshot:
        res = self._conn.txn([], self._reads(job_id), [], retry=True)  # reads only: safe to retry
        return _Snapshot(job_id, res.ranges, self.now())

    def _retention_id(self) -> int:
        """A shared etcd lease that ends audit records after ``retention`` seconds, no scans.

        Every process writing under the prefix uses the one named in ``meta/retention``
        while it has more than 90% of its time left (etcd's own count, no client clocks),
        then one of them grants the next: records live 0.9 to 1.0 times the retention.
        """
        with self._lock:
            if self._retention_lease and boot_clock() < self._retention_lease[1]:
                return self._retention_lease[0]
        for _ in contention.attempts():
            kvs, _, _ = self._conn.range(self.keys.retention)
            named = parse(kvs[0].value).get("lease") if kvs else None
            if isinstance(named, int) and not isinstance(named, bool):
                remaining, granted = self._conn.time_to_live(named)
                fresh_for = remaining - 0.9 * granted
                if fresh_for > 0:
                    with self._lock:
                        self._retention_lease = (named, boot_clock() + fresh_for)
                    return named
            lease_id, _ = self._conn.grant(_etcd_ttl(self.retention))
            mod = kvs[0].mod_revision if kvs else 0
            if not self._conn.txn([ec.compare(self.keys.retention, "mod", "==", mod)],
                                  [ec.put(self.keys.retention, f'{{"lease":{lease_id}}}'.encode())],
                                  []).succeeded:
                self._revoke_later(lease_id)  # another process named one first: use theirs
        raise BackendUnavailable("could not agree on a retention lease (too much contention)")

    def _write(self, compares: list[Any], success: list[Any], failure: list[Any]) -> TxnResult:
        """A transaction that may attach audit records to the retention lease."""
        try:
            return self._conn.txn(compares, success, failure)
        except ec.LeaseNotFound:
            # Revoked behind our back (an operator, a restored snapshot): nothing was written,
            # so the same transaction is sent once more with a retention lease that exists.
            with self._lock:
                old, self._retention_lease = self._retention_lease, None
            if old is None:
                raise
            new = self._retention_id()
            if new == old[0]:
                raise
            ec.relet(success, old[0], new)
            ec.relet(failure, old[0], new)
            return self._conn.txn(compares, success, failure)

    def _audit(self, key: bytes, value: bytes) -> Any:
        return ec.put(key, value, lease=self._retention_id())

    def _event(self, job_id: str, op: Op, owner: str | None, token: int | None, at: float,
               expires_at: float | None) -> Any:
        return self._audit(self.keys.history(job_id, uuid.uuid4().hex),
                           event_value(op, owner, token, at, expires_at))

    def _revoke_later(self, lease_id: int) -> None:
        if lease_id:  # nothing is attached to it any more; it would also run out by itself
            self._conn.revoke_later(lease_id)

    def _remember(self, key: tuple[str, int, str], lease: _EtcdLease | None) -> _EtcdLease | None:
        """Note (or, with None, forget) the etcd lease of a claim; returns what was noted before."""
        with self._lock:
            if lease is None:
                return self._leases.pop(key, None)
            before = self._leases.get(key)
            self._leases[key] = lease
            while len(self._leases) > _CACHE:
                self._leases.popitem(last=False)
            return before

    def _take(self, etcd_ttl: int, now: float) -> _EtcdLease | None:
        """An idle etcd lease for a claim sent at ``now``, or None to grant a new one."""
        with self._lock:
            pool = self._pool.get(etcd_ttl)
            while pool:
                lease = pool.pop()  # the most recently given back first
                self._pooled -= 1
                if lease.confirmed + lease.granted - now >= _MIN_LEFT:
                    return lease
        return None  # the ones dropped run out by themselves: nothing is attached to them

    def _give_back(self, lease: _EtcdLease) -> None:
        """Pool a lease that carries no key (its claim ended, or never wrote)."""
        with self._lock:
            if self._pooled < _POOL:
                self._pool.setdefault(lease.ttl, []).append(lease)
                self._pooled += 1
                return
        self._revoke_later(lease.id)

    # -- the protocol --------------------------------------------------------------------
    def submit(self, job_id: str, actor: str | None = None) -> None:
        """``actor``: the operator who asked, recorded as the owner of the history event."""
        for _ in contention.attempts():
            snap = self._snapshot(job_id)
            now = self.now()
            new = transitions.submit(snap.record, job_id, now)
            if new is None:
                return
            if self._write(self._unchanged(job_id, snap), self._submitted(new, now, actor), []).succeeded:
                return
        raise contention.outraced(job_id)

    def submit_many(self, job_ids: list[str], actor: str | None = None) -> None:
        """New jobs in transactions of ``_BATCH`` without reading first; any job that exists
        already makes its batch fail as a whole, and that batch goes one job at a time."""
        protocol.submit_in_batches(job_ids, _BATCH, lambda batch: self._submit_new(batch, actor),
                                   lambda job_id: self.submit(job_id, actor))

    def _submit_new(self, batch: list[str], actor: str | None) -> bool:
        k = self.keys
        now = self.now()
        absent, writes = [], []
        for i, job_id in enumerate(batch):
            absent += [ec.compare(k.job(job_id), "mod", "==", 0), ec.compare(k.lease(job_id), "create", "==", 0),
                       ec.compare(k.end(job_id), "mod", "==", 0)]
            # Ten microseconds apart, so the queue keeps the order given: one apart can round
            # to the same microsecond at today's epoch times (a double's step is 0.24 µs).
            at = now + i * 1e-5
            new = transitions.submit(None, job_id, at)
            assert new is not None  # a job that does not exist is always submitted
            writes += self._submitted(new, at, actor)
        return self._write(absent, writes, []).succeeded

    def _submitted(self, new: JobRecord, now: float, actor: str | None) -> list[Any]:
        """The writes that make ``new`` pending: its job key, no outcome, a queue place, history."""
        k, job_id = self.keys, new.job_id
        value = JobValue(JobState.PENDING, None, new.token, None, now, None, None, new.runs)
        return [ec.put(k.job(job_id), job_value(job_id, value)), ec.delete(k.end(job_id)),
                ec.put(k.queue(job_id, now), b""), self._event(job_id, Op.SUBMIT, actor, new.token, now, None)]

    def _unchanged(self, job_id: str, snap: _Snapshot) -> list[Any]:
        k = self.keys
        mj, lc, mo = snap.mods
        return [ec.compare(k.job(job_id), "mod", "==", mj), ec.compare(k.lease(job_id), "create", "==", lc),
                ec.compare(k.end(job_id), "mod", "==", mo)]

    def claim(self, job_id: str, owner: str, ttl: float) -> Lease:
        # The core noted its send time before this call: every time taken here is later.
        start = boot_clock()
        etcd_ttl = _etcd_ttl(ttl)
        lease = self._take(etcd_ttl, start)
        try:
            return self._claim(job_id, owner, ttl, etcd_ttl, lease)
        except ec.LeaseNotFound:
            if lease is None:
                raise
            # etcd ended the pooled lease (revoked behind our back): nothing was written.
            return self._claim(job_id, owner, ttl, etcd_ttl, None)

    def _claim(self, job_id: str, owner: str, ttl: float, etcd_ttl: int, lease: _EtcdLease | None) -> Lease:
        """One claim with ``lease`` (or a new etcd lease), which ends no earlier than now + TTL.

        A lease granted or kept alive from here on ends no earlier than its send time plus
        its TTL, and a fresh pooled one no earlier than that either (``_EtcdLease.fresh``).
        """
        keepalive: Pending[int] | None = None
        snap: _Snapshot | None = None
        sent = boot_clock()
        if lease is None:  # nothing to reuse: grant one alongside a read of the job
            grant = self._conn.grant_started(etcd_ttl + _SLACK)
            try:
                snap = self._snapshot(job_id)
            except BaseException:
                with contextlib.suppress(LeaseError):  # nothing was written with it
                    lease_id, granted = grant.result()
                    self._give_back(_EtcdLease(lease_id, etcd_ttl, granted, sent))
                raise
            lease_id, granted = grant.result()
            lease = _EtcdLease(lease_id, etcd_ttl, granted, sent)
        elif not lease.fresh(sent):
            keepalive = self._conn.keepalive_started(lease.id)  # answered alongside the txn
        try:
            revision, expires_at = self._claim_txn(job_id, owner, ttl, lease, snap)
            if keepalive is not None:
                left = keepalive.result()
                if left < etcd_ttl:  # 0: etcd ended it, and the key went with it
                    raise BackendUnavailable(f"etcd did not keep the lease of the claim of {job_id!r} "
                                             "alive; the claim was withdrawn")
                lease.confirmed, lease.granted = sent, left
        except BaseException as exc:
            if keepalive is not None:
                keepalive.cancel()
            if isinstance(exc, _NOTHING_WRITTEN):
                self._give_back(lease)
            elif not isinstance(exc, ec.LeaseNotFound):  # etcd has no such lease any more
                # The key may have been written: revoking deletes it, and the caller hears an
                # error. If the revoke is lost too, the key ends with the lease, held by nobody.
                self._revoke_later(lease.id)
            raise
        self._remember((job_id, revision, owner), lease)
        return Lease(job_id, owner, revision, expires_at, ttl)

    def _claim_txn(self, job_id: str, owner: str, ttl: float, lease: _EtcdLease,
                   snap: _Snapshot | None) -> tuple[int, float]:
        """Write the claim: its token and expiry estimate; raises if the job is not claimable.

        Without a snapshot the first transaction assumes the job does not exist (one round
        trip for a new job, no read first); if it does, the failure branch reads its keys and
        the next transaction compares against those.
        """
        k = self.keys
        for _ in contention.attempts():
            now = self.now()
            rec = None
            if snap is not None:
                transitions.claim(snap.record, job_id, owner, ttl, snap.now)  # raises if not claimable
                self._wait_out_holder(snap)
                rec = snap.record
            expires_at = now + lease.granted + EXPIRY_GRACE
            # The job key keeps the nominal end, shown once etcd has ended the lease.
            value = JobValue(JobState.LEASED, owner, 0, ttl, rec.submitted_at if rec else now, now,
                             now + lease.granted, rec.runs if rec else 1)
            mj, _, mo = snap.mods if snap is not None else (0, 0, 0)
            queued = None if snap is None else queued_since(job_id, snap.job, snap.end)
            incarnation = snap.incarnation if snap is not None else 0
            res = self._write(  # job, end and held keys as read (the wait was for that
                # incarnation: _wait_out_holder), and no lease key whatever was read
                [ec.compare(k.job(job_id), "mod", "==", mj), ec.compare(k.lease(job_id), "create", "==", 0),
                 ec.compare(k.end(job_id), "mod", "==", mo), ec.compare(k.held(job_id), "mod", "==", incarnation)],
                [ec.put(k.job(job_id), job_value(job_id, value)),
                 ec.put(k.lease(job_id), lease_value(owner, ttl, None, expires_at), lease=lease.id),
                 ec.put(k.held(job_id), held_value(owner, ttl)), ec.delete(k.end(job_id)),
                 *([] if queued is None else [ec.delete(k.queue(job_id, queued))]),
                 self._event(job_id, Op.CLAIM, owner, None, now, expires_at)],
                self._reads(job_id))
            if res.succeeded:
                return res.revision, expires_at
            snap = _Snapshot(job_id, res.ranges, self.now())
        assert snap is not None
        transitions.claim(snap.record, job_id, owner, ttl, snap.now)  # held by now: say so
        raise contention.outraced(job_id)

    def _note_ended(self, snap: _Snapshot) -> _Ended | None:
        """If etcd ended the snapshot's lease: when this process first saw that, and its TTL."""
        rec = snap.record
        if rec is None or rec.state is not JobState.LEASED or snap.lease is not None or snap.end is not None:
            return None
        return self._ended_since(rec.job_id, snap.incarnation, snap.seen)

    def _ended_since(self, job_id: str, incarnation: int, seen: float) -> _Ended:
        """``incarnation``: the held key's mod revision, which a revival changes, so a lease
        revived and then ended again is waited out afresh."""
        with self._lock:
            entry = self._ended.setdefault((job_id, incarnation), _Ended(seen))
            self._ended.move_to_end((job_id, incarnation))
            while len(self._ended) > _ENDED:
                self._ended.popitem(last=False)
            return entry

    def _wait_out_holder(self, snap: _Snapshot) -> None:
        """Raise NotYetClaimable until the holder of a lease etcd ended must have stopped.

        etcd < 3.4.28 can revoke a lease early: a leader that was paused wakes up and revokes
        leases the new leader renewed meanwhile (etcd-io/etcd#15247). So the key's absence
        alone does not prove the holder's safe deadline passed. What does: the holder's last
        successful renewal was sent before the key went (every renewal compares the key), its
        deadline is at most its TTL after that send, and this process saw the key gone later
        still. One TTL on our monotonic clock after that sighting, the holder has stopped.
        The TTL is the longest of the claim's and of its renewals' (the held key keeps it).
        """
        rec = snap.record
        entry = self._note_ended(snap)
        if rec is None or entry is None:
            return  # no holder (pending, released, expired by an operator), or not claimable anyway
        if entry.ttl is None:
            named = held_ttl(snap.held) if snap.held is not None else None
            entry.ttl = max(rec.ttl or 0.0, named or 0.0)
        left = entry.first_seen + entry.ttl - boot_clock()
        if left > 0:
            raise NotYetClaimable(rec.job_id, rec.owner, rec.token, self.now() + left, left)

    def _waiting_out(self, job_id: str, incarnation: int) -> bool:
        """Whether a lease etcd ended is known to be in its quarantine still (no reads)."""
        with self._lock:
            entry = self._ended.get((job_id, incarnation))
        return entry is not None and entry.ttl is not None and entry.first_seen + entry.ttl > boot_clock()

    def claim_next(self, owner: str, ttl: float) -> Lease | None:
        """Expired leases first (their work is overdue), then pending jobs oldest first.

        Candidates come from the indexes (``layout``), read in one transaction; each is
        then claimed with its own compare-and-swap, so a candidate someone else took costs a
        retry, never a wrong claim.
        """
        k = self.keys
        window = self._queue.window()
        res = self._conn.txn([], [ec.get(*k.span("held"), keys_only=True),
                                  ec.get(*k.span("lease"), keys_only=True),
                                  ec.get(*window, keys_only=True, limit=_QUEUE_PAGE)], [], retry=True)
        seen = boot_clock()  # after the answer that showed these leases ended
        held, live, queued = res.ranges
        alive = {kv.key[len(k.section("lease")):] for kv in live}
        expired = []
        for kv in sorted(held, key=lambda kv: kv.mod_revision):  # the oldest claims first
            if kv.key[len(k.section("held")):] not in alive:
                with contextlib.suppress(CorruptRecord):  # listed as corrupt by jobs(), skipped here
                    job_id = k.job_id(kv.key, "held")
                    self._ended_since(job_id, kv.mod_revision, seen)
                    if not self._waiting_out(job_id, kv.mod_revision):
                        expired.append(job_id)
        lease = self._first_claimable(expired, owner, ttl)
        if lease is None:
            queued = self._queue.oldest(self._conn, first=(window, queued))
        while lease is None and queued:
            lease = self._first_claimable(self._queued_ids(queued), owner, ttl)
            if lease is None:  # all taken meanwhile: read on
                queued = self._queue.oldest(self._conn, after=queued[-1].key + b"\0")
        return lease

    def _queued_ids(self, kvs: list[KV]) -> list[str]:
        ids = []
        for kv in kvs:
            with contextlib.suppress(CorruptRecord):  # not tenure's: never claimed through it
                ids.append(self.keys.queued_job_id(kv.key))
        # Concurrent claimers would all race for the oldest job; starting a few places apart
        # spreads them with little change to the order.
        shift = random.randrange(min(len(ids), _SPREAD)) if ids else 0
        return ids[shift:] + ids[:shift]

    def _first_claimable(self, job_ids: list[str], owner: str, ttl: float) -> Lease | None:
        return protocol.first_claimed(job_ids, lambda job_id: self.claim(job_id, owner, ttl))

    def _held_here(self, lease: Lease) -> bool:
        """Whether this process claimed or renewed ``lease``."""
        with self._lock:
            mine = (lease.job_id, lease.token, lease.owner) in self._leases
        return mine

    def _within_deadline(self, lease: Lease) -> bool:
        """Asked just before a transaction is sent: a revival must leave before the deadline."""
        return deadline_runs(lease.deadline, self._clock)

    def _holder_txn(self, op: Op, lease: Lease, success: list[Any], now: float,
                    revive: list[Any] | None = None) -> TxnResult:
        """Run ``success`` if ``lease`` is current; otherwise audit in the same txn and raise.

        ``revive``: writes to make instead if etcd ended the lease but nothing else changed.
        The caller passes them only while the holder's safe deadline runs, that is while the
        lease cannot have run out yet by its TTL: etcd < 3.4.28 ended it early (see
        ``_wait_out_holder``). They restore what etcd should have kept and bump the held key,
        so a claimer that saw the key gone waits anew. A claim or force_expire since then
        changed the job or outcome key, and the revival is refused like any stale operation.
        """
        k, job_id, token = self.keys, lease.job_id, lease.token
        mine = owner_prefix(lease.owner)
        uid = uuid.uuid4().hex
        stub = Rejection(job_id, op, lease.owner, token, None, 0, now, "")
        refuse = [self._audit(k.rejection(uid), rejection_value(stub, complete=False))]
        if revive is not None:
            refuse = [ec.txn([ec.compare(k.job(job_id), "mod", "==", token),
                              ec.compare(k.lease(job_id), "create", "==", 0),
                              ec.compare(k.end(job_id), "mod", "==", 0),
                              ec.compare(k.held(job_id), "value", ">", mine),
                              ec.compare(k.held(job_id), "value", "<", mine + b"\x7f")], revive, refuse)]
        res = self._write(
            [ec.compare(k.lease(job_id), "create", ">", token - 1),  # the claim's key, or a revival's
             ec.compare(k.lease(job_id), "value", ">", mine),  # the value starts with the owner
             ec.compare(k.lease(job_id), "value", "<", mine + b"\x7f"),
             ec.compare(k.job(job_id), "mod", "==", token)],  # no claim since (nor submit)
            success, refuse)
        if res.succeeded:
            return res
        if res.nested and res.nested[0].succeeded:
            log.info("etcd had ended the lease of %r (token %d) early; %s restored it", job_id, token, op.value)
            return res.nested[0]
        # Why, read afterwards at the refusal's own revision: the same view the failure branch
        # had, without reading the job's keys in every transaction of the hot path.
        try:
            ranges = self._conn.txn([], self._reads(job_id, res.revision), [], retry=True).ranges
        except LeaseError:
            try:  # compacted away already: the keys as they are now
                ranges = self._conn.txn([], self._reads(job_id), [], retry=True).ranges
            except LeaseError as exc:  # refused and audited all the same; only the reason is missing
                log.warning("could not read why %s of %r was refused: %s", op.value, job_id, exc)
                raise StaleLease(Rejection(job_id, op, lease.owner, token, None, 0, now,
                                           UNKNOWN_REASON)) from exc
        try:
            rec = _Snapshot(job_id, ranges, now).record
        except CorruptRecord as exc:
            self._finish_rejection(uid, transitions.rejection(None, op, lease, Reason.NOT_FOUND, now),
                                   f"corrupt record: {exc.problem}")
            raise
        rejected = transitions.rejection(rec, op, lease, transitions.check(rec, lease, now) or Reason.EXPIRED,
                                         now)
        self._finish_rejection(uid, rejected)
        raise StaleLease(rejected)

    def _finish_rejection(self, uid: str, rejection: Rejection, reason: str | None = None) -> None:
        if reason is not None:
            rejection = Rejection(rejection.job_id, rejection.op, rejection.owner, rejection.token,
                                  rejection.current_owner, rejection.current_token, rejection.at, reason)
        try:
            key = self.keys.rejection(uid)
            self._write([ec.compare(key, "create", ">", 0)],  # never resurrect an expired one
                        [self._audit(key, rejection_value(rejection))], [])
        except LeaseError as exc:  # the rejection is recorded already, only its reason is missing
            log.warning("could not record why %s was rejected: %s", rejection, exc)

    def renew(self, lease: Lease, ttl: float) -> Lease:
        held_here = self._held_here(lease)  # before a retry below forgets the etcd lease
        try:
            return self._renew(lease, ttl, held_here)
        except ec.LeaseNotFound:
            # Another connection moved this claim to a new etcd lease and revoked ours, or
            # etcd ended it: forget it and renew the way a connection that never knew it does.
            self._remember((lease.job_id, lease.token, lease.owner), None)
            return self._renew(lease, ttl, held_here)

    def _renew(self, lease: Lease, ttl: float, held_here: bool) -> Lease:
        k, key = self.keys, (lease.job_id, lease.token, lease.owner)
        with self._lock:
            cached = self._leases.get(key)
        etcd_ttl = _etcd_ttl(ttl)
        now = self.now()
        sent = boot_clock()
        keepalive: Pending[int] | None = None
        if cached is not None and cached.alive and cached.ttl == etcd_ttl:
            held = cached
            keepalive = self._conn.keepalive_started(held.id)
        else:  # a claim made elsewhere, or a new TTL: move the key to a new etcd lease
            lease_id, granted = self._conn.grant(etcd_ttl)
            held = _EtcdLease(lease_id, etcd_ttl, granted, sent)
            now = self.now()
        expires_at = now + held.granted + EXPIRY_GRACE
        put_lease = ec.put(k.lease(lease.job_id), lease_value(lease.owner, ttl, now, expires_at),
                           lease=held.id, prev_kv=True)
        event = self._event(lease.job_id, Op.RENEW, lease.owner, lease.token, now, expires_at)
        # A new TTL goes to the held key (the longer of the two: the holder may still act on
        # the lease before this one), where a claimer finds it once the lease key is gone.
        put_held = ec.put(k.held(lease.job_id), held_value(lease.owner, max(ttl, lease.ttl)))
        writes = [put_lease, event] if ttl == lease.ttl else [put_lease, put_held, event]
        revive = [put_lease, put_held, event] if held_here and self._within_deadline(lease) else None
        try:
            res = self._holder_txn(Op.RENEW, lease, writes, now, revive)
        except BaseException as exc:
            if keepalive is not None:
                keepalive.cancel()
            elif isinstance(exc, StaleLease):
                # Refused, so nothing is attached to the new lease. After any other error the
                # key may have moved to it: revoking would end the lease early, so let it run out.
                self._revoke_later(held.id)
            raise
        if keepalive is not None:
            left = keepalive.result()
            if left >= etcd_ttl:
                held.confirmed, held.granted = sent, left
            else:
                # etcd ended the etcd lease after the transaction applied (a put naming a lease
                # etcd no longer has is refused, so it was there then): the renewal stands, as
                # any renewal sent before etcd ended a lease does. Claimers that find the key
                # gone wait out the holder from then on (_wait_out_holder); the next renewal
                # moves the key to a new etcd lease, restoring it while the deadline runs.
                log.info("etcd ended the etcd lease of %r (token %d) just after a renewal", lease.job_id,
                         lease.token)
                held.alive = False
            if held.alive and any(prev.lease != held.id for prev in res.prev):
                # Another connection had moved the key to its own etcd lease, and may be revoking
                # ours right now: that revoke must not land on the key, nor on a later claim.
                self._remember(key, None)
                for prev in res.prev:
                    self._revoke_later(prev.lease)
                return self._renew(lease, ttl, held_here=False)  # to a new etcd lease
        for prev in res.prev:
            if prev.lease != held.id:
                self._revoke_later(prev.lease)
        self._remember(key, held)
        return Lease(lease.job_id, lease.owner, lease.token, expires_at, ttl)

    def _end(self, op: Op, lease: Lease, how: str, result: bytes | None) -> None:
        k, now = self.keys, self.now()
        requeue = [ec.put(k.queue(lease.job_id, now), b"")] if op is Op.RELEASE else []
        writes = [ec.put(k.end(lease.job_id), end_value(how, lease.token, now, result)),
                  ec.delete(k.lease(lease.job_id), prev_kv=True), ec.delete(k.held(lease.job_id)), *requeue,
                  self._event(lease.job_id, op, lease.owner, lease.token, now, None)]
        # If etcd ended the lease early, the same writes are what the holder is owed.
        revive = writes if self._held_here(lease) and self._within_deadline(lease) else None
        res = self._holder_txn(op, lease, writes, now, revive)
        held = self._remember((lease.job_id, lease.token, lease.owner), None)
        for prev in res.prev:
            if held is not None and held.alive and prev.lease == held.id:
                # The key just deleted was the only one on it (each etcd lease serves one claim
                # at a time): keep it for the next claim instead of a revoke now and a grant then.
                self._give_back(held)
            else:
                self._revoke_later(prev.lease)

    def complete(self, lease: Lease, result: bytes | None) -> None:
        self._end(Op.COMPLETE, lease, "completed", result)

    def release(self, lease: Lease) -> None:
        self._end(Op.RELEASE, lease, "released", None)

    def force_expire(self, job_id: str, actor: str | None = None, token: int | None = None) -> None:
        k = self.keys
        for _ in contention.attempts():
            snap = self._snapshot(job_id)
            if snap.record is None:
                raise JobNotFound(job_id)
            if token is not None and snap.record.token != token:
                raise TokenChanged(job_id, token, snap.record.token)
            if snap.record.state is not JobState.LEASED or snap.end is not None:
                return  # not leased, or its claim ended already
            now = self.now()
            # The outcome key tells claimers an operator ended it, not etcd: no wait before a
            # claim (_wait_out_holder), as on every backend, also if etcd had ended it first.
            # The compares keep the job key as read, so the token checked above is still the
            # job's when this applies; if anything changed, the next round reads it again.
            new = transitions.force_expire(snap.record, now)
            assert new.lease_until is not None
            res = self._write(self._unchanged(job_id, snap),
                              [ec.delete(k.lease(job_id), prev_kv=True),
                               ec.put(k.end(job_id), end_value("expired", new.token, new.lease_until, None)),
                               self._event(job_id, Op.EXPIRE, actor or new.owner, new.token, now,
                                           new.lease_until)], [])
            if res.succeeded:
                for prev in res.prev:
                    self._revoke_later(prev.lease)
                return
        raise contention.outraced(job_id)

    def record_rejection(self, rejection: Rejection) -> None:
        key = self.keys.rejection(uuid.uuid4().hex)
        self._write([], [self._audit(key, rejection_value(rejection))], [])

    # -- reading -------------------------------------------------------------------------
    def get(self, job_id: str) -> JobStatus | None:
        try:
            snap = self._snapshot(job_id)
        except CorruptRecord as exc:
            return corrupt_status(job_id, exc.key, exc)
        self._note_ended(snap)  # a sighting: it starts the wait before a claim (_wait_out_holder)
        return None if snap.record is None else transitions.status(snap.record, snap.now)

    def jobs(self) -> Iterator[JobStatus]:
        now = self.now()
        for job_id, key, rec_or_error in etcd_scan.scan(self._conn, self.keys, now):
            if isinstance(rec_or_error, CorruptRecord):
                yield corrupt_status(job_id, key, rec_or_error)
            elif rec_or_error is not None:
                yield transitions.status(rec_or_error, now)

    def _read_audit(self, span: tuple[bytes, bytes], limit: int | None, since: float | None,
                    read: Callable[[KV], _Stamped]) -> list[_Stamped]:
        """Rejections or history, oldest first (``audit.select``)."""
        # Newest first with a limit when no time filter applies; otherwise all (bounded by retention).
        fetch = limit if since is None and limit is not None else 0
        if fetch == 0 and limit == 0:
            return []
        kvs, _, _ = self._conn.range(*span, limit=fetch, newest_first=True, by_create=True)
        return audit.select(audit.readable(kvs, read), since, limit)

    def rejections(self, since: float | None, limit: int | None) -> list[Rejection]:
        return self._read_audit(self.keys.span("rejection"), limit, since, lambda kv: read_rejection(kv)[0])

    def history(self, job_id: str | None, since: float | None, limit: int | None) -> list[HistoryEvent]:
        def read(kv: KV) -> HistoryEvent:
            return read_event(kv, job_id or self.keys.job_id(kv.key.rsplit(b"/", 1)[0], "history"))

        return self._read_audit(self.keys.history_span(job_id), limit, since, read)

    def watch(self, stop: threading.Event, interval: float) -> Iterator[Change]:
        return etcd_scan.watch(self.keys, self._conn, self.jobs, self.get, stop, interval)

    def health(self) -> dict[str, Any]:
        status = self._conn.status()
        return {"backend": "etcd", "prefix": self.keys.prefix,
                "store_clock": self.characteristics.store_clock,
                "endpoints": [f"{h}:{p}" for h, p in self.hosts], **status}

    def close(self) -> None:
        self._conn.close()

