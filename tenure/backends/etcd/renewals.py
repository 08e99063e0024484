"""``renew_many`` on etcd: many renewals in one Txn, each lease judged alone.

Each renewal is the core's own renew step (``steps.renew``) in an ``EtcdTransaction`` of its
own that guesses from the holder's lease, as a single renewal does (the lease key's create
revision and owner, the job key's mod revision: no claim since), and moves the lease key onto
this process's shared etcd lease of that TTL (``EtcdLeases.shared``) with the history event
beside it. The renewals go as nested Txns of one Txn, so a lease whose guess fails writes
nothing and fails alone, its neighbours apply; the caller renews those alone (a read, then the
core's decision: a refusal audited, or a revival of a lease etcd ended early).

etcd allows 128 operations a Txn (``--max-txn-ops``), nested ones included, where a nested
Txn's budget is what its parents leave: a top level of ``GROUPS`` Txns, each of ``GROUP``
renewals of at most 4 operations a side, fits (60 + 60 + 4 <= 128), 3,600 renewals a request;
``MAX_BYTES`` keeps a request under etcd's 1.5 MiB (``--max-request-bytes``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tenure.backends.etcd import client as ec
from tenure.backends.etcd.client import Io, TxnResult
from tenure.backends.etcd.leases import EtcdLease
from tenure.backends.etcd.transaction import Context, EtcdTransaction, Parts
from tenure.core import steps
from tenure.core.errors import BackendUnavailable, LeaseError
from tenure.core.records import JobRecord, Lease

GROUP = 60  # renewals per nested Txn
GROUPS = 60  # nested Txns per request
MAX_BYTES = 1 << 20  # per request, under etcd's default --max-request-bytes of 1.5 MiB

Outcome = Lease | LeaseError | None  # None: not renewed here, to renew alone


class _One:
    """One renewal of the batch: its transaction, what its step decided, its nested Txn."""

    def __init__(self, parts: Parts, now: float, shared: dict[int, EtcdLease], lease: Lease, ttl: float) -> None:
        self.operation = steps.renew(lease, ttl)
        self.tx = EtcdTransaction(parts, now, False, Context(shared=shared))
        self.found: JobRecord | None = None
        self.op: Any = None

    def deciding(self) -> Io[None]:
        try:
            found = self.operation.step(self.tx)  # a guess: no read
        except (steps.Reread, LeaseError):
            return  # refused on the guess, or damaged: decided alone, on reads
        if isinstance(found, JobRecord):
            self.found = found
            self.op = yield from self.tx.nested()

    def outcome(self, res: TxnResult) -> Io[Outcome]:
        yield from self.tx.settled(res)
        if not res.succeeded or self.found is None:
            return None  # its guess failed: nothing was written for it
        return self.operation.finish(self.tx.stored(self.found))


def renewing(parts: Parts, now: float, renewals: Sequence[steps.Renewal]) -> Io[list[Outcome]]:
    """Each renewal's outcome in order: the renewed lease, the error of the request that
    carried it (``BackendUnavailable``: the caller's batch judges it), or None where the caller
    must renew it alone. Decided and sent a request at a time, so a batch of thousands holds
    one request's transactions at once."""
    found: dict[int, Outcome] = {}
    shared: dict[int, EtcdLease] = {}  # the batch's shared etcd leases, by TTL
    chunk: list[tuple[int, _One]] = []
    size = 0
    for n in range(len(renewals)):
        for entry in (yield from _decided(parts, now, shared, renewals, [n], found)):
            weight = entry[1].op.ByteSize() + 8  # and its nesting
            if chunk and (len(chunk) == GROUP * GROUPS or size + weight > MAX_BYTES):
                yield from _sending(parts, now, shared, renewals, chunk, found)
                chunk, size = [], 0
            chunk.append(entry)
            size += weight
    if chunk:
        yield from _sending(parts, now, shared, renewals, chunk, found)
    return [found.get(n) for n in range(len(renewals))]


def _sending(parts: Parts, now: float, shared: dict[int, EtcdLease], renewals: Sequence[steps.Renewal],
             chunk: list[tuple[int, _One]], found: dict[int, Outcome]) -> Io[None]:
    """One request of nested Txns, and each renewal's outcome from its answer."""
    try:
        try:
            res = yield ec.call("txn", [], _grouped([one.op for _, one in chunk]), [])
        except ec.LeaseNotFound:
            # The shared etcd lease (ended early, revoked) or the audit's retention lease is
            # gone, and nothing was written: once more on fresh ones, each decided again.
            yield from parts.leases.retention_lost()
            parts.leases.shared_lost()
            shared.clear()
            chunk = yield from _decided(parts, now, shared, renewals, [n for n, _ in chunk], found)
            res = yield ec.call("txn", [], _grouped([one.op for _, one in chunk]), [])
    except BackendUnavailable as exc:  # these leases' only: earlier requests' stand
        found.update((n, exc) for n, _ in chunk)
        return
    answers = [nested for group in res.nested for nested in group.nested]
    for (n, one), answer in zip(chunk, answers, strict=True):
        found[n] = yield from one.outcome(answer)


def _decided(parts: Parts, now: float, shared: dict[int, EtcdLease], renewals: Sequence[steps.Renewal],
             which: Sequence[int], found: dict[int, Outcome]) -> Io[list[tuple[int, _One]]]:
    """The renewals ``which`` decided on their guesses, those with a Txn to send; a grant that
    failed is its lease's outcome."""
    decided: list[tuple[int, _One]] = []
    for n in which:
        one = _One(parts, now, shared, *renewals[n])
        try:
            yield from one.deciding()
        except BackendUnavailable as exc:
            found[n] = exc
            continue
        if one.op is not None:
            decided.append((n, one))
    return decided


def merged(found: list[Outcome], alone: list[Lease | LeaseError]) -> list[Lease | LeaseError]:
    """``found`` with its Nones (in order) answered by ``alone``, the renewals made alone."""
    rest = iter(alone)
    return [next(rest) if one is None else one for one in found]


def _grouped(ops: list[Any]) -> list[Any]:
    return [ec.txn([], ops[i:i + GROUP], []) for i in range(0, len(ops), GROUP)]
