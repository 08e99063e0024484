"""etcd's own lease handling, which has no counterpart in the core or on other stores.

The protocol's decisions are the core's (``RecordBackend``); what stays here is how etcd
leases serve them, and why:

- **Pooled leases.** A claim's lease key is attached to an etcd lease of the TTL plus
  ``SLACK``. A completion or release that deletes the key from an etcd lease this process
  attached gives that lease back to a pool instead of revoking it, and the next claim with
  the same TTL takes it: no grant or revoke on the hot path. ``EtcdLease.fresh`` says when a
  claim may use one without a keep-alive beside it (docs/backends/etcd.md). Without one, a
  claim's grant goes beside its read (``Claiming``, shared by the claim's attempts).
- **Keep-alives.** A renewal keeps its claim's etcd lease alive beside its transaction (the
  lease id is cached per claim), or moves the key to a new etcd lease.
- **Shared leases.** Renewals in a batch (``renewals``) move each key onto this process's
  shared etcd lease of that TTL (``shared``), granted anew once it is too old to serve a
  renewal sent now (``EtcdLease.fresh``): no keep-alive per lease, and a lease nobody renews
  ends with the shared lease it was last moved to, at most a TTL and the slack later. A shared
  lease is never kept alive, pooled or revoked (it carries other jobs' keys); a key on one
  says so in its value (``layout.lease_value``), so no process revokes it either.
- **Revokes.** Only a lease whose key this process just removed (or never attached) is
  revoked: nothing may revoke a lease a later claim uses, nor one that carries other keys.
- **Quarantine.** etcd (3.5.16 too) can end a lease before its TTL (etcd-io/etcd#15247), so a
  lease etcd ended is claimed only one TTL after this process first saw it gone
  (``Quarantine``); the holder may revive it while its deadline runs (``transaction``).
- **Retention.** History and rejections hang on one shared etcd lease (``retention``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading

from tenure.backends.etcd import client as ec
from tenure.backends.etcd.client import AioPending, Connection, EtcdIo, Pending
from tenure.backends.etcd.layout import Keys, parse
from tenure.core import contention, steps
from tenure.core.bounded import Bounded
from tenure.core.clock import boot_clock
from tenure.core.errors import (
    AlreadyClaimed,
    BackendUnavailable,
    CorruptRecord,
    JobCompleted,
    JobParked,
    Outraced,
    TokensExhausted,
)

# A claim's definite "no" (AlreadyClaimed includes JobScheduled and NotYetClaimable)
_NOTHING_WRITTEN = (AlreadyClaimed, JobCompleted, JobParked, CorruptRecord, Outraced, TokensExhausted)

SLACK = 1  # seconds a claim's etcd lease gets beyond its TTL, so later claims can reuse it
_CACHE = 10_000  # etcd leases of claims made here, for one-round-trip renewals
_POOL = 64  # idle etcd leases kept for reuse by claims (unused ones run out by themselves)
_MIN_LEFT = 1.0  # a pooled lease with less than this surely left is dropped, not kept alive
_ENDED = 100_000  # leases seen ended by etcd, remembered for their quarantine

ClaimKey = tuple[str, int, str]  # (job id, token, owner)


def etcd_ttl(ttl: float) -> int:
    return max(1, math.ceil(ttl))  # etcd leases count whole seconds: round up, never shorten


@dataclasses.dataclass
class EtcdLease:
    """An etcd lease of this process and what is known of its end.

    ``confirmed`` is the local monotonic time just before the last grant or keep-alive of it
    was sent, whose reply said ``granted`` seconds. etcd starts counting when the leader gets
    the request, so the lease ends no earlier than ``confirmed + granted`` (revocation aside:
    tenure revokes only leases it took out of use).
    """

    id: int
    ttl: int  # the etcd TTL of the claims it serves (its granted TTL less any slack)
    granted: int
    confirmed: float
    alive: bool = True  # False once a keep-alive found it gone: never kept alive or pooled again
    shared: bool = False  # renewals' shared lease: carries many keys, never kept alive, pooled or revoked

    def fresh(self, now: float) -> bool:
        """Whether a claim sent at ``now`` may use it without a keep-alive.

        Half the slack: etcd's lease then ends no earlier than ``now + ttl`` even if etcd's
        clock runs up to 50 % faster than ours (``drift_margin`` is 5 % by default).
        """
        return now - self.confirmed <= (self.granted - self.ttl) / 2

    def ends(self) -> float:
        """No earlier than this, by the local boot clock (revocation aside)."""
        return self.confirmed + self.granted


@dataclasses.dataclass
class Ended:
    """A lease etcd ended, as this process saw it: when first, and its holder's longest TTL."""

    first_seen: float  # monotonic, no earlier than the answer that showed the key gone
    ttl: float | None = None  # from the job and held keys, once a claim has read them

    def left(self) -> float:
        """Seconds until its holder must have stopped (0 once over; unknown TTL: not yet known)."""
        return 0.0 if self.ttl is None else max(0.0, self.first_seen + self.ttl - boot_clock())


class EtcdLeases:
    """The etcd leases of one connection: cached per claim, pooled, revoked, quarantined."""

    def __init__(self, conn: Connection, keys: Keys, retention: float) -> None:
        self._conn, self._keys, self._retention = conn, keys, retention
        self._lock = threading.Lock()
        self._claims: Bounded[ClaimKey, EtcdLease] = Bounded(_CACHE)  # a renewal keeps its claim's place
        self._pool: dict[int, list[EtcdLease]] = {}  # idle leases by the etcd TTL they serve
        self._pooled = 0
        # (job, incarnation) of leases etcd ended: the quarantine before a claim
        self._ended: Bounded[tuple[str, int], Ended] = Bounded(_ENDED)
        self._retention_lease: tuple[int, float] | None = None  # (id, monotonic time to rotate)
        self._shared: dict[int, EtcdLease] = {}  # renewals' shared lease, by the etcd TTL it serves

    # -- a claim's etcd lease ------------------------------------------------------------
    def of_claim(self, key: ClaimKey) -> EtcdLease | None:
        return self._claims.get(key)

    def remember(self, key: ClaimKey, lease: EtcdLease) -> None:
        self._claims.put(key, lease)

    def forget(self, key: ClaimKey) -> EtcdLease | None:
        return self._claims.pop(key)

    def granting(self, ttl: int, slack: int = 0) -> EtcdIo[EtcdLease]:
        sent = boot_clock()
        lease_id, granted = yield ec.Grant(ttl + slack)
        return EtcdLease(lease_id, ttl, granted, sent)

    def give_back(self, lease: EtcdLease) -> None:
        """Pool a lease that carries no key (its claim ended, or never wrote)."""
        if lease.shared:
            return  # other keys hang on it
        with self._lock:
            if lease.alive and self._pooled < _POOL:
                self._pool.setdefault(lease.ttl, []).append(lease)
                self._pooled += 1
                return
        self.revoke_later(lease.id)

    # -- renewals' shared leases ---------------------------------------------------------
    def shared(self, ttl: int, ending_after: float = 0.0) -> EtcdIo[EtcdLease]:
        """The shared etcd lease for renewals sent now of etcd TTL ``ttl``: the current one while
        it is fresh (it ends no earlier than now + ``ttl`` + half the slack, as a pooled lease
        serves a claim) and ends after ``ending_after`` (boot clock: a renewal never moves a key
        onto a lease that ends before the one it is on), else a new grant of ``ttl`` +
        ``SLACK``. Side by side batches may each grant one: both serve."""
        with self._lock:
            current = self._shared.get(ttl)
        if current is not None and current.alive and current.fresh(boot_clock()) and current.ends() >= ending_after:
            return current
        lease = yield from self.granting(ttl, SLACK)
        lease.shared = True
        with self._lock:
            self._shared[ttl] = lease
        return lease

    def shared_lost(self) -> None:
        """A write found an etcd lease gone (maybe a shared one): the next renewals get new ones."""
        with self._lock:
            for lease in self._shared.values():
                lease.alive = False
            self._shared.clear()

    def revoke_later(self, lease_id: int) -> None:
        if lease_id:  # nothing is attached to it any more; it would also run out by itself
            self._conn.revoke_later(lease_id)

    # -- the quarantine of a lease etcd ended --------------------------------------------
    def ended(self, job_id: str, incarnation: int, seen: float) -> Ended:
        """When this process first saw etcd had ended incarnation ``incarnation`` (the held
        key's mod revision, which a revival changes: a lease revived and ended again is
        waited out afresh) of the job's lease."""
        return self._ended.setdefault((job_id, incarnation), Ended(seen), refresh=True)

    def waiting_out(self, job_id: str, incarnation: int) -> bool:
        """Whether a lease etcd ended is known to be in its quarantine still (no reads)."""
        entry = self._ended.get((job_id, incarnation))
        return entry is not None and entry.ttl is not None and entry.left() > 0

    # -- the retention lease of the audit ------------------------------------------------
    def retention_id(self) -> int:
        """``retention``, waited for in this thread."""
        return self._conn.run(self.retention())

    def retention(self) -> EtcdIo[int]:
        """A shared etcd lease that ends audit records after ``retention`` seconds, no scans.

        Every process writing under the prefix uses the one named in ``meta/retention``
        while it has more than 90% of its time left (etcd's own count, no client clocks),
        then one of them grants the next: records live 0.9 to 1.0 times the retention.
        """
        with self._lock:
            if self._retention_lease and boot_clock() < self._retention_lease[1]:
                return self._retention_lease[0]
        key = self._keys.retention

        def attempt() -> EtcdIo[int]:
            kvs, _, _ = yield ec.Range(key)
            named = parse(kvs[0].value).get("lease") if kvs else None
            if isinstance(named, int) and not isinstance(named, bool):
                remaining, granted = yield ec.TimeToLive(named)
                fresh_for = remaining - 0.9 * granted
                if fresh_for > 0:
                    with self._lock:
                        self._retention_lease = (named, boot_clock() + fresh_for)
                    return named
            lease_id, _ = yield ec.Grant(etcd_ttl(self._retention))
            mod = kvs[0].mod_revision if kvs else 0
            if not (yield ec.Txn([ec.compare(key, "mod", "==", mod)],
                                  [ec.put(key, f'{{"lease":{lease_id}}}'.encode())], [])).succeeded:
                self.revoke_later(lease_id)  # another process named one first: use theirs
            raise contention.Collided  # read again what is named now, ours or theirs (the core's pause first)

        return (yield from steps.attempted(attempt, "(retention)", gave_up=_no_retention))

    def retention_lost(self) -> EtcdIo[None]:
        """After a write found an etcd lease missing: the retention lease in use looked up again
        (it may be the one, revoked behind our back), so that the write sent again names a live one."""
        with self._lock:
            old, self._retention_lease = self._retention_lease, None
        if old is not None:
            yield from self.retention()

    # -- a claim's etcd lease, for all its attempts ----------------------------------------
    def claiming(self, ttl: int) -> Claiming:
        """The etcd lease for a claim sent now: an idle one from the pool, or None to grant one
        beside a read."""
        now = boot_clock()
        with self._lock:
            pool = self._pool.get(ttl)
            while pool:
                lease = pool.pop()  # the most recently given back first
                self._pooled -= 1
                if lease.confirmed + lease.granted - now >= _MIN_LEFT:
                    return Claiming(ttl, lease)
        return Claiming(ttl, None)  # the ones dropped run out by themselves: nothing is attached to them

    def claimed(self, claiming: Claiming, failed: BaseException | None) -> EtcdIo[None]:
        """After the claim (``failed``: what it raised): a lease it did not write with goes back to
        the pool; one a transaction may have written with is revoked unless the claim surely
        wrote nothing. Never raises (a grant that failed: nothing was written with it)."""
        if failed is not None:
            with contextlib.suppress(Exception):
                lease = yield from claiming.resolving()
                if claiming.maybe_written and not isinstance(failed, _NOTHING_WRITTEN):
                    # The key may have been written: revoking deletes it, and the caller hears an
                    # error. If the revoke is lost too, the key ends with the lease, held by nobody.
                    self.revoke_later(lease.id)
                    claiming.lease = None
        if claiming.grant is not None:  # asked for beside a read, then not needed
            with contextlib.suppress(Exception):
                yield from claiming.resolving()
        if claiming.lease is not None:  # not used by the claim that was written
            self.give_back(claiming.lease)


def _no_retention() -> int:
    raise BackendUnavailable("could not agree on a retention lease (too much contention)")


@dataclasses.dataclass
class Claiming:
    """The etcd lease a claim (or claim_next) will hang its lease key on: pooled, or granted
    beside the read of the job (``granting_beside``).

    It outlives the claim's attempts (a lost race wrote nothing with it); the claim gives it
    back, or revokes it after a transaction that may have written it (``maybe_written``).
    """

    ttl: int
    lease: EtcdLease | None
    grant: Pending[tuple[int, int]] | AioPending[tuple[int, int]] | None = None
    sent: float = 0.0
    maybe_written: bool = False

    def granting_beside(self) -> EtcdIo[None]:
        """Ask for an etcd lease now, unless one is at hand or asked for: a read sent next
        shares its round trip."""
        if self.lease is None and self.grant is None:
            self.sent = boot_clock()
            self.grant = yield ec.StartGrant(self.ttl + SLACK)

    @property
    def settled(self) -> bool:
        """Nothing left for ``EtcdLeases.claimed`` to do after a claim that raised nothing: its
        lease is in use, and no grant is on its way."""
        return self.lease is None and self.grant is None

    def resolving(self) -> EtcdIo[EtcdLease]:
        if self.lease is None:
            assert self.grant is not None
            lease_id, granted = yield self.grant
            self.lease, self.grant = EtcdLease(lease_id, self.ttl, granted, self.sent), None
        return self.lease
