"""``claim_next_many`` on etcd: many claims in one Txn, each its own claim, won or lost alone.

A request (``Request.claiming``) takes three round trips however many it claims:

1. the indexes, as claim_next reads them (``claimable.claimables``: expired leases first, then
   pending jobs oldest first, with claim_next's spread), for up to n different candidates;
2. the candidates' keys in one Txn of ranges (nested, ``READ_GROUP`` jobs each, within etcd's
   128 operations a Txn), each judged as claim_next's transaction judges its one: passed over
   unless claimable at ``now`` (``transitions.is_next``). The etcd leases the claims will hang
   on are asked for beside it: one each, pooled or granted (``Claiming``, as a single claim's);
3. the claims as nested Txns of one Txn (``nesting``): each the core's own claim step
   (``steps.claim``) in an ``EtcdTransaction`` of its own, on that read (fresh: nothing is
   guessed), with a single claim's compares (the read's revisions: no change to the job's keys
   since, its delay key absent) and writes (job, lease, held, end, last and queue keys, and the
   history event). A claim another claimer beat writes nothing and fails alone; its
   neighbours apply.

Every claim of a request is applied at the request's revision, which is each one's token: a
token still grows strictly per job, while the claims of one request share theirs across jobs
(docs/backends/etcd.md). A request whose claims all lost races answers ``steps.Lost``: the
core (``steps.Claims``) makes it again on fresh reads after claim_next's pause, up to claim_next's
attempts, starting from the indexes read in the same Txn as its claims (handed on in ``Lost``:
two round trips, not three); one that won some
returns those, and ``steps.Claims`` asks again for the rest. The pooled etcd leases too old to
serve a claim alone are kept alive on one stream beside the candidates' read, not one each.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from tenure.backends.etcd import claimable, nesting
from tenure.backends.etcd import client as ec
from tenure.backends.etcd.client import EtcdIo, TxnResult
from tenure.backends.etcd.leases import Claiming, etcd_ttl
from tenure.backends.etcd.transaction import KEYS_READ, Context, EtcdTransaction, Parts, Read, reads
from tenure.core import contention, steps, transitions
from tenure.core.clock import boot_clock
from tenure.core.errors import BackendUnavailable, CorruptRecord, LeaseError
from tenure.core.records import JobRecord, Lease

# Claims per request at most: the candidates' reads take 5 ranges each, READ_GROUP to a nested
# Txn (100 operations, so up to 28 of them fit etcd's 128); a claim is at most 7 operations a
# side (5 compares; job, lease, held, end, last and queue keys and the event), nesting.PART_OPS.
CLAIM_BATCH = 250
READ_GROUP = 20


class _One:
    """One candidate of the request: its claim's transaction on the candidate's read, what the
    claim step saved, its nested Txn."""

    def __init__(self, parts: Parts, now: float, owner: str, ttl: float, claiming: Claiming, read: Read) -> None:
        self.read, self.claiming = read, claiming
        self.operation = steps.claim(read.job_id, owner, ttl)
        self.tx = EtcdTransaction(parts, now, True, Context(claiming))
        self.tx.given(read)
        self.found: JobRecord | None = None
        self.op: Any = None

    def claimable(self) -> bool:
        """Whether claim_next would claim it, on its read (``EtcdTransaction.next_claimables``)."""
        try:
            return transitions.is_next(self.tx.read_record(self.read.job_id), self.tx.now)
        except LeaseError:  # corrupt
            return False

    def deciding(self) -> EtcdIo[None]:
        """The claim step, and its Txn (``op``; None if the step refused: nothing to send)."""
        try:
            self.found = self.operation.step(self.tx)
        except LeaseError:  # claim_next would pass it over (no claim can follow its token)
            return
        self.op = yield from self.tx.nested()

    def outcome(self, res: TxnResult) -> EtcdIo[Lease | None]:
        """The lease, or None if another claimer got there first (nothing was written)."""
        yield from self.tx.settled(res)
        if not res.succeeded or self.found is None:
            return None
        return self.operation.finish(self.tx.stored(self.found))


@dataclasses.dataclass(frozen=True)
class Round:
    """What one request claimed, and what follows."""

    leases: list[Lease]
    more: bool  # more may be claimable: n were proposed, or some were lost to other claimers
    raced: bool  # some were lost to other claimers
    index: claimable.Read | None = None  # the indexes as the claims left them, read beside them

    @property
    def answer(self) -> steps.Claimed | steps.Lost:
        """What ``claim_batch`` answers: the leases and whether more may be claimable, or, when
        every claim lost a race, ``steps.Lost`` with the indexes read beside them (the core
        makes the request again on fresh reads, starting from those)."""
        if self.raced and not self.leases:
            return steps.Lost(self.index)
        return self.leases, self.more


def carried_index(carried: object) -> claimable.Read | None:
    """The indexes a lost request handed on (``Round.answer``), for the next to start from."""
    return cast("claimable.Read | None", carried)


class Request:
    """One request of claim_next_many, in either flavour: ``claiming``, then ``finish``
    whatever happened."""

    def __init__(self, parts: Parts, now: float, owner: str, ttl: float, index: claimable.Read | None = None) -> None:
        """``index``: the indexes read beside the claims of the request before, which all lost."""
        self._p, self.now, self.owner, self.ttl, self._index = parts, now, owner, ttl, index
        self._claimings: list[Claiming] = []  # the etcd leases asked for, one per candidate read
        self._ones: list[_One] = []  # the candidates taken, in order, each on the claiming of its place
        self._failed: dict[int, BaseException] = {}  # by place: a claim withdrawn after it was written

    def claiming(self, n: int) -> EtcdIo[Round]:
        """Up to ``n`` claims in one Txn, each won or lost alone."""
        p = self._p
        ones = yield from claimable.claimables(p.keys, p.leases, p.queue, self._taking, self.now, n, self._index)
        more = len(ones) == n
        decided: list[_One] = []
        size = 0
        for one in ones:
            yield from one.deciding()
            if one.op is None:
                continue
            weight = nesting.weight(one.op)
            if nesting.full(len(decided), size, weight):  # the rest in the next request
                one.tx.dropped()
                more = True
                break
            decided.append(one)
            size += weight
        if not decided:
            return Round([], more, False)
        for one in decided:
            one.claiming.maybe_written = True
        # The indexes are read after the claims, in the same request: if every claim lost, the
        # next request starts from them (a round trip less; the claimers that won moved the queue).
        index = claimable.index(p.keys, p.queue, self.now)
        try:
            res = yield from self._sending(decided, index.reads)
        except BaseException:
            for one in decided:
                one.tx.dropped()
            raise  # each claiming is revoked (``finish``): a claim that was written is withdrawn
        leases: list[Lease] = []
        raced = False
        error: BackendUnavailable | None = None
        for one, answer in zip(decided, nesting.answers(res), strict=True):
            try:
                lease = yield from one.outcome(answer)
            except BackendUnavailable as exc:  # its etcd lease ended before the keep-alive: withdrawn
                self._failed[self._ones.index(one)] = error = exc
                continue
            raced = raced or lease is None
            if lease is not None:
                leases.append(lease)
        if error is not None and not leases and not raced:
            raise error
        return Round(leases, more or raced, raced, claimable.answered(index, res.ranges))

    def _taking(self, job_ids: list[str]) -> EtcdIo[list[_One]]:
        """Those of the candidates ``job_ids`` claim_next would claim now, their keys read in
        one request, each with an etcd lease of its own asked for beside the read."""
        while len(self._claimings) < len(self._ones) + len(job_ids):
            self._claimings.append(self._p.leases.claiming(etcd_ttl(self.ttl)))
        asked = self._claimings[len(self._ones):]
        for claiming in asked:
            yield from claiming.granting_beside()
        # Pooled etcd leases too old to serve a claim alone are kept alive on one stream beside
        # the read (not each beside the commit, as a single claim's is): then they are fresh.
        sent = boot_clock()
        stale = [claiming for claiming in asked if claiming.lease is not None and not claiming.lease.fresh(sent)]
        ids = [claiming.lease.id for claiming in stale if claiming.lease is not None]
        kept = (yield ec.StartKeepalives(ids)) if ids else None
        k = self._p.keys
        groups = [ec.txn([], [op for job_id in job_ids[i:i + READ_GROUP] for op in reads(k, job_id)], [])
                  for i in range(0, len(job_ids), READ_GROUP)]
        res = yield ec.Txn([], groups, [], retry=True)
        if kept is not None:
            yield from _kept_alive(stale, sent, (yield kept))
        ranges = [kvs for group in res.nested for kvs in group.ranges]
        taken: list[_One] = []
        for i, job_id in enumerate(job_ids):
            try:
                read = Read(job_id, ranges[KEYS_READ * i:KEYS_READ * (i + 1)], self.now)
            except CorruptRecord:
                continue  # listed as corrupt by jobs(), never claimed through claim_next
            one = _One(self._p, self.now, self.owner, self.ttl, self._claimings[len(self._ones)], read)
            if one.claimable():
                self._ones.append(one)
                taken.append(one)
        return taken

    def _sending(self, decided: list[_One], reads: list[Any]) -> EtcdIo[TxnResult]:
        """The claims' Txn. One that named an etcd lease that is gone (a pooled one etcd ended or
        someone revoked, the audit's retention lease) wrote nothing: the core sends it again at
        once, each claim decided again on a new grant, as a single claim's is (``_relet``)."""
        relet = False

        def attempt() -> EtcdIo[TxnResult]:
            nonlocal relet
            try:
                return (yield ec.Txn([], [*nesting.grouped([one.op for one in decided]), *reads], []))  # type: ignore[no-any-return]
            except ec.LeaseNotFound as exc:
                if relet:
                    raise
                relet = True
                yield from self._relet(decided)
                raise contention.Resend from exc

        return (yield from steps.attempted(attempt, "(claim_next)"))

    def _relet(self, decided: list[_One]) -> EtcdIo[None]:
        """After a Txn that named an etcd lease gone: the retention lease looked up again, and each
        claim decided again on the same read, on a new grant (its pooled lease never pooled again)."""
        yield from self._p.leases.retention_lost()
        for place, one in enumerate(decided):
            one.tx.dropped()
            if one.claiming.lease is not None:
                one.claiming.lease.alive = False  # never pooled again
                one.claiming.lease = None
            yield from one.claiming.granting_beside()
            decided[place] = again = _One(self._p, self.now, self.owner, self.ttl, one.claiming, one.read)
            self._ones[self._ones.index(one)] = again
            yield from again.deciding()
            again.claiming.maybe_written = True
        decided[:] = [one for one in decided if one.op is not None]  # (decided as before, on the same read)

    def finish(self, failed: BaseException | None) -> EtcdIo[None]:
        """After ``claiming`` (``failed``: what it raised): each etcd lease asked for, as a single
        claim's (``EtcdLeases.claimed``): back to the pool unless a claim was written with it,
        revoked where a claim may have been written and is withdrawn."""
        for place, claiming in enumerate(self._claimings):
            yield from self._p.leases.claimed(claiming, self._failed.get(place, failed))


def _kept_alive(claimings: list[Claiming], sent: float, left: list[int]) -> EtcdIo[None]:
    """Each pooled etcd lease's keep-alive answer (sent at ``sent``): fresh from then, or gone
    (etcd ended it: never pooled again), a grant asked for in its place."""
    for claiming, ttl in zip(claimings, left, strict=True):
        lease = claiming.lease
        assert lease is not None
        if ttl >= lease.ttl:
            lease.confirmed, lease.granted = sent, ttl
        else:
            lease.alive, claiming.lease = False, None
            yield from claiming.granting_beside()
