"""One round trip, not two, for a new claim and for the holder's renew and complete.

The general path (``backend``) reads the store's time and the record first, then writes.
Two cases need no read:

- the claim of a job that does not exist yet: the multi creates its znodes and fails as a
  whole if any exists (then the general path runs);
- a renew or complete by the process that holds the lease, while its safe deadline runs:
  this process wrote the record, knows it and its version, and the multi checks the version
  and that the generation znode is still at the lease's token, so it fails if anyone wrote
  the record since (a claim, a re-stamp after a leader change, an operator, even one who
  deleted the job znode: a claim or submit that re-creates it moves the generation znode);
  the general path then decides, and audits a refusal.

Neither judges expiry: a new job has no lease, and while the holder's deadline runs its lease
cannot have run out by the store's clock (the deadline is the core's: the TTL less the drift
margin after the request that set it). A pause between the deadline check and the send can
still land the multi after the lease ended, if nobody wrote the record meanwhile: the
exception docs/protocol.md states. What they still need is the store's time, for the new
``lease_until``: an upper bound of the leader's clock, from the last stamp (the ``mtime`` of
this client's clock znode, from step 1 or a multi here) plus our monotonic time since
that write was *sent*, with room for the leader's clock running ``_RATE`` times as fast. A
lease written here thus ends no earlier, on the leader's clock, than its TTL after the request.
A stamp older than ``_FRESH`` is not used (the bound would grow loose): the general path runs,
and stamps again. Past half of that, a multi here writes the clock znode too (a new stamp at
no extra round trip); younger stamps spare the multi that write.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any, Protocol

from tenure.backends.zookeeper.session import Session
from tenure.core import transitions
from tenure.core.clock import Clock, boot_clock, deadline_runs
from tenure.core.records import JobRecord, JobState, Lease, Op

_FRESH = 1.0  # seconds a stamp of the leader's clock serves for the bound
_RATE = 1.1  # the leader's clock may run this much faster than ours over that second
_CACHE = 10_000  # records of held leases kept


class Writer(Protocol):
    """What the shortcuts need of the backend: its multi for a change, and its commit."""

    def fast_write(self, tx: Any, now: tuple[float, int], old: JobRecord | None, version: int,
                   new: JobRecord, op: Op) -> Any: ...

    def send_commit(self, tx: Any, what: str) -> Callable[[], list[Any] | None]: ...


class HeldRecords:
    def __init__(self, session: Session, writer: Writer, injected: Clock | None) -> None:
        self._session = session
        self._writer = writer
        self._injected = injected  # the clock given to connect(), if any: see deadline_runs
        self._lock = threading.Lock()
        self._records: collections.OrderedDict[tuple[str, int, str], tuple[JobRecord, int]] = \
            collections.OrderedDict()

    # -- the leader's clock ------------------------------------------------------------------
    def _now_at_most(self) -> tuple[float, int, bool] | None:
        """An upper bound of the leader's clock now, its epoch, and whether the stamp is old
        enough to take a new one; None if it is too old to use."""
        bound = self._session.bound()
        if bound is None:
            return None
        at, sent, epoch = bound
        elapsed = boot_clock() - sent
        return None if elapsed > _FRESH else (at + elapsed * _RATE, epoch, elapsed > _FRESH / 2)

    # -- the records this process wrote ------------------------------------------------------
    def remember(self, rec: JobRecord, version: int) -> None:
        """Note ``rec`` as this process wrote it, at znode ``version``: kept while it is a lease."""
        key = (rec.job_id, rec.token, rec.owner or "")
        with self._lock:
            if rec.state is not JobState.LEASED:
                self._records.pop(key, None)
                return
            self._records[key] = (rec, version)
            self._records.move_to_end(key)
            while len(self._records) > _CACHE:
                self._records.popitem(last=False)

    def forget(self, lease: Lease) -> None:
        with self._lock:
            self._records.pop((lease.job_id, lease.token, lease.owner), None)

    # -- the two shortcuts ---------------------------------------------------------------------
    def send_claim_new(self, job_id: str, owner: str, ttl: float
                       ) -> tuple[Callable[[], Lease | None], tuple[float, int]] | None:
        """Send the claim of a job that does not exist yet, as one multi: the function that
        waits for it (its None: the job exists, take the general path), and the bound on the
        leader's clock it used. None: no fresh bound."""
        now = self._now_at_most()
        if now is None:
            return None
        new = transitions.claim(None, job_id, owner, ttl, now[0])
        tx = self._writer.fast_write(self._multi(now[2]), now[:2], None, -1, new, Op.CLAIM)
        gen = self._session.layout.gen(job_id)
        tx.create(gen, b"")
        tx.set_data(gen, b"", version=0)  # the first claim: token 1, as on the general path
        answer = self._send(tx, f"claiming {job_id!r}", now[2])

        def lease() -> Lease | None:
            if not answer():
                return None
            self.remember(new, 0)
            return transitions.lease_of(new)

        return lease, now[:2]

    def holder_op(self, op: Op, lease: Lease, change: Any) -> JobRecord | None:
        """``change(record, now)`` written in one multi; None to take the general path."""
        if not deadline_runs(lease.deadline, self._injected):
            return None
        with self._lock:
            held = self._records.get((lease.job_id, lease.token, lease.owner))
        now = self._now_at_most()
        if held is None or now is None:
            return None
        rec, version = held
        new: JobRecord = change(rec, now[0])
        tx = self._writer.fast_write(self._multi(now[2]), now[:2], rec, version, new, op)
        # The job znode's version alone does not prove the record is ours: deleted by hand and
        # created again by another claim, it starts at the same versions. The generation
        # znode is never deleted and every claim moves its version, which is the token.
        tx.check(self._session.layout.gen(lease.job_id), lease.token)
        if not self._send(tx, f"{op} of {lease.job_id!r}", now[2])():
            self.forget(lease)  # someone wrote it since: the general path reads it
            return None
        self.remember(new, version + 1)
        return new

    def _multi(self, stamp: bool) -> Any:
        """A new multi; with ``stamp``, our clock znode written first (a new stamp)."""
        tx = self._session.client.transaction()
        if stamp:
            tx.set_data(self._session.clock_path, b"")
        return tx

    def _send(self, tx: Any, what: str, stamp: bool) -> Callable[[], bool]:
        """Send a multi of ours; the function returned: whether it was applied (False: outraced,
        a znode moved or exists), after taking its stamp of the leader's clock if it has one."""
        sent = boot_clock()
        answer = self._writer.send_commit(tx, what)

        def applied() -> bool:
            results = answer()
            if results is None:
                return False
            if stamp:
                self._session.stamp(results[0], sent)  # the clock znode, written first
            return True

        return applied
