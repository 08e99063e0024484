"""``renew_many`` and ``complete_many`` on etcd: many held leases' changes in one Txn, each
lease judged alone.

Each change is the core's own step (``steps.renew``, ``steps.complete``) in an
``EtcdTransaction`` of its own that guesses from the holder's lease, as a single renewal or
completion does (the lease key's create revision and owner, the job key's mod revision: no
claim since), with the history event beside it; a renewal moves the lease key onto this
process's shared etcd lease of that TTL (``EtcdLeases.shared``). The changes go as nested Txns
of one Txn (``nesting``), so a lease whose guess fails writes nothing and fails alone, its
neighbours apply; the caller changes those alone (a read, then the core's decision: a refusal
audited, or a revival of a lease etcd ended early). A renewal or completion is at most 5
operations a side (``nesting.PART_OPS``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, NamedTuple, TypeAlias, TypeVar

from tenure.backends.etcd import client as ec
from tenure.backends.etcd import nesting
from tenure.backends.etcd.client import EtcdIo, TxnResult
from tenure.backends.etcd.leases import EtcdLease
from tenure.backends.etcd.transaction import Context, EtcdTransaction, Parts
from tenure.core import contention, steps
from tenure.core.clock import boot_clock
from tenure.core.errors import BackendUnavailable, LeaseError
from tenure.core.records import JobRecord, Rejection

T = TypeVar("T")
U = TypeVar("U")  # what a change made alone gives
Change = steps.Operation[JobRecord | Rejection, T]  # one held lease's renew or complete
Outcome: TypeAlias = "T | LeaseError | None"  # None: not changed here, to change alone
Shared = dict[int, EtcdLease]  # renewals: the batch's shared etcd leases, by TTL


class Moment(NamedTuple):
    """The store's time a batch is decided at, and the boot clock read with it."""

    now: float
    boot: float


class _One(Generic[T]):
    """One change of the batch: its transaction, what its step decided, its nested Txn."""

    def __init__(self, parts: Parts, at: Moment, shared: Shared | None, operation: Change[T]) -> None:
        self.operation = operation
        self.tx = EtcdTransaction(parts, at.now, False, Context(shared=shared), boot=at.boot)
        self.found: JobRecord | None = None
        self.op: Any = None

    def deciding(self) -> EtcdIo[None]:
        try:
            found = self.operation.step(self.tx)  # a guess: no read
        except (steps.Reread, LeaseError):
            return  # refused on the guess, or damaged: decided alone, on reads
        if isinstance(found, JobRecord):
            self.found = found
            self.op = yield from self.tx.nested()

    def outcome(self, res: TxnResult) -> EtcdIo[Outcome[T]]:
        yield from self.tx.settled(res)
        if not res.succeeded or self.found is None:
            return None  # its guess failed: nothing was written for it
        return self.operation.finish(self.tx.stored(self.found))


def changing(parts: Parts, now: float, operations: Sequence[Change[T]],
             shared: Shared | None) -> EtcdIo[list[Outcome[T]]]:
    """Each change's outcome in order: what its step gave, the error of the request that
    carried it (``BackendUnavailable``: the caller's batch judges it), or None where the caller
    must make it alone. ``shared``: a renewal batch's shared etcd leases (empty at first).
    Decided and sent a request at a time, so a batch of thousands holds one request's
    transactions at once."""
    at = Moment(now, boot_clock())  # read together: a later request's leases are estimated alike
    found: dict[int, Outcome[T]] = {}
    chunk: list[tuple[int, _One[T]]] = []
    size = 0
    for n in range(len(operations)):
        for entry in (yield from _decided(parts, at, shared, operations, [n], found)):
            weight = nesting.weight(entry[1].op)
            if nesting.full(len(chunk), size, weight):
                yield from _sending(parts, at, shared, operations, chunk, found)
                chunk, size = [], 0
            chunk.append(entry)
            size += weight
    if chunk:
        yield from _sending(parts, at, shared, operations, chunk, found)
    return [found.get(n) for n in range(len(operations))]


def _sending(parts: Parts, at: Moment, shared: Shared | None, operations: Sequence[Change[T]],
             chunk: list[tuple[int, _One[T]]], found: dict[int, Outcome[T]]) -> EtcdIo[None]:
    """One request of nested Txns (sent again as the core says: ``_relet``), and each change's
    outcome from its answer."""
    relet = False

    def attempt() -> EtcdIo[TxnResult]:
        nonlocal chunk, relet
        try:
            return (yield ec.Txn([], nesting.grouped([one.op for _, one in chunk]), []))  # type: ignore[no-any-return]
        except ec.LeaseNotFound as exc:
            if relet:
                raise
            relet = True
            # A shared etcd lease (ended early, revoked) or the audit's retention lease is gone,
            # and nothing was written: the core sends it again at once, on fresh ones, each
            # change decided again.
            yield from parts.leases.retention_lost()
            if shared is not None:
                parts.leases.shared_lost()
                shared.clear()
            chunk = yield from _decided(parts, at, shared, operations, [n for n, _ in chunk], found)
            raise contention.Resend from exc

    try:
        res = yield from steps.attempted(attempt, "(a batch)")  # resent, never Outraced
    except BackendUnavailable as exc:  # these leases' only: earlier requests' stand
        found.update((n, exc) for n, _ in chunk)
        return
    for (n, one), answer in zip(chunk, nesting.answers(res), strict=True):
        found[n] = yield from one.outcome(answer)


def _decided(parts: Parts, at: Moment, shared: Shared | None, operations: Sequence[Change[T]],
             which: Sequence[int], found: dict[int, Outcome[T]]) -> EtcdIo[list[tuple[int, _One[T]]]]:
    """The changes ``which`` decided on their guesses, those with a Txn to send; a grant that
    failed is its lease's outcome."""
    decided: list[tuple[int, _One[T]]] = []
    for n in which:
        one = _One(parts, at, shared, operations[n])
        try:
            yield from one.deciding()
        except BackendUnavailable as exc:
            found[n] = exc
            continue
        if one.op is not None:
            decided.append((n, one))
    return decided


def merged(found: list[Outcome[T]], alone: list[U | LeaseError]) -> list[T | U | LeaseError]:
    """``found`` with its Nones (in order) answered by ``alone``, the changes made alone."""
    rest = iter(alone)
    return [next(rest) if one is None else one for one in found]
