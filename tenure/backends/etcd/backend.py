"""``etcd://h1:2379,h2:2379,h3:2379/prefix``: leases on etcd, tokens from etcd revisions.

A ``RecordBackend``: the protocol's decisions are the core's, made in an optimistic
transaction (``transaction``: reads that carry revisions, one Txn that commits or reports a
conflict). A claim's fencing token is the revision of that Txn (the create revision of the
job's lease key). Revisions are global and never reused, so tokens grow across expiry,
completion, restarts and leader changes. Expiry is etcd's: the lease key is attached to an
etcd lease with the job's TTL, and etcd deletes it when that runs out; the etcd leases
themselves (pooled, kept alive, revoked, quarantined when etcd ends one early, the audit's
retention lease) are ``leases``'s, with the reasons there.

Round trips: claim 1 for a new job when a pooled etcd lease can be reused, else 2; renew 1
when this process made the claim with the same TTL, else 2 (a grant first); complete and
release 1; renew_many (held leases) and complete_many 1 per 1,300 leases or so, and for
renewals a grant of the shared etcd lease (``holders``); fail 1 when this process made the
claim, else 2 (the job's attempts are read first); submit 1 (the job guessed new); claim_next
3 (the indexes, 8 candidates' keys, the Txn), and claim_next_many 3 for up to 250 claims
(the indexes, every candidate's keys in one Txn, the claims in one: ``claims``), more while
candidates are taken meanwhile. A write that delays a job (submit or requeue with a delay, a fail with a wait) grants
its delay's etcd lease first: one more. A wrong guess costs nothing extra: the Txn's
failure branch reads the job's keys for the retry.

``now()`` is this machine's wall clock: etcd has no clock API. Neither expiry nor a delay
depends on it (a delay is an etcd lease holding the job's ``delay/`` key: ``layout``);
``expires_at`` is an estimate (local time of the grant or keep-alive plus the TTL plus
``EXPIRY_GRACE``) of when etcd will have deleted the lease key, ``claimable_at`` one of when
etcd deletes the delay key. Key layout: ``layout``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tenure.backends.etcd import claims as etcd_claims
from tenure.backends.etcd import holders as etcd_holders
from tenure.backends.etcd import listing as etcd_listing
from tenure.backends.etcd import query as etcd_query
from tenure.backends.etcd import upgrade as etcd_upgrade
from tenure.backends.etcd import watch as etcd_watch
from tenure.backends.etcd.client import KV, Connection
from tenure.backends.etcd.layout import Keys, read_event, read_rejection
from tenure.backends.etcd.leases import EtcdLeases, etcd_ttl
from tenure.backends.etcd.queue_cursor import QueueCursor
from tenure.backends.etcd.transaction import Context, EtcdTransaction, Parts, Read, reads
from tenure.core import audit, steps, transitions
from tenure.core.backend import Backend, Characteristics, Durability, RecordBackend
from tenure.core.clock import Clock
from tenure.core.codec import corrupt_status
from tenure.core.errors import CorruptRecord, InvalidArgument, LeaseError
from tenure.core.options import Options, StoreURL
from tenure.core.order import Tolerance
from tenure.core.record_transaction import Transaction
from tenure.core.records import Change, HistoryEvent, JobPage, JobRecord, JobState, JobStatus, Lease, Rejection, Summary
from tenure.views import paging

DEFAULT_PORT = 2379

_Stamped = TypeVar("_Stamped", Rejection, HistoryEvent)  # an audit record with a store time ``at``


class _Committing:
    """``with`` it: the transaction, committed on a normal exit, dropped on an exception (a
    class, not a ``contextlib.contextmanager``: two per claim+complete, each a generator more)."""

    __slots__ = ("tx",)

    def __init__(self, tx: EtcdTransaction) -> None:
        self.tx = tx

    def __enter__(self) -> EtcdTransaction:
        return self.tx

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if kind is None:
            self.tx.commit()


class EtcdBackend(RecordBackend):
    characteristics = Characteristics(
        name="etcd",
        store_clock="etcd's lease TTLs decide expiry and delays; times shown are the client's wall clock",
        durability=Durability.REPLICATED,  # raft: on a quorum's disks (--unsafe-no-fsync voids it)
        min_ttl=2.0,
        tokens_ordered_across_jobs=True,
        max_result_bytes=512 * 1024,  # base64, twice in a complete txn, under the 1.5 MiB request limit
        tls_options=("ca_cert",),
        counts_from_indexes=True,
        # Spread claimers; a lease etcd ended is seen ended, not when: by claim (tenure.core.order).
        claim_order=Tolerance(spread=True, expired_by_claim=True),
        # A delay's lease: up to 1 s of rounding up (2 s under etcd's minimum TTL, 1.5 election
        # timeouts: 2 s by default), 0.5 s to etcd's expiry tick, the deletion through raft.
        delay_late=3.0,
    )

    def __init__(self, hosts: list[tuple[str, int]], prefix: str, *, clock: Clock | None = None,
                 timeout: float = 5.0, retention: float = 7 * 86400.0, **security: Any) -> None:
        self.keys = Keys(prefix)
        self.hosts = hosts
        self.retention = retention
        self._clock = clock
        self._conn = Connection(hosts, timeout=timeout, **security)
        self._leases = EtcdLeases(self._conn, self.keys, retention)
        self.parts = Parts(self._conn, self.keys, self._leases, QueueCursor(self.keys), clock)
        self._index = etcd_query.EtcdIndex(self._conn, self.keys)  # summary() and page()
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

    def now(self) -> float:
        return self._clock.time() if self._clock is not None else time.time()

    # -- the protocol: the core's, in etcd transactions ----------------------------------
    def transaction(self, fresh: bool = False, context: Context | None = None) -> _Committing:
        """``context``: what the transactions of one operation share (a claim's etcd lease)."""
        return _Committing(EtcdTransaction(self.parts, self.now(), fresh, context))

    def _within(self, context: Context) -> Callable[[bool], contextlib.AbstractContextManager[Transaction]]:
        """The transactions of one operation, sharing ``context``."""
        return functools.partial(self.transaction, context=context)

    # submit_many: 25 new jobs per Txn, each guessed new: 5 compares, 5 writes (job, end,
    # queue, history, a delay's key) and 5 failure reads a job, within etcd's 128 operations a
    # side. At most some 7 KB a job (ids of 256 characters in 5 keys and 2 values), far under
    # etcd's 1.5 MiB request: no byte budget.
    SUBMIT_BATCH = 25

    @contextlib.contextmanager
    def _claiming(self, ttl: float) -> Iterator[Context]:
        """The etcd lease the claim hangs its key on, for every attempt of it: a pooled one
        (then a new job is guessed new: one transaction), else one granted beside a read."""
        claiming = self._leases.claiming(etcd_ttl(ttl))
        try:
            yield Context(claiming)
        except BaseException as exc:
            self._conn.run(self._leases.claimed(claiming, exc))
            raise
        if not claiming.settled:
            self._conn.run(self._leases.claimed(claiming, None))

    def claim(self, job_id: str, owner: str, ttl: float, *, max_attempts: int | None = None) -> Lease:
        # ``_claiming`` written out: the hot path's one contextlib generator a claim
        claiming = self._leases.claiming(etcd_ttl(ttl))
        try:
            # (``_within`` written out: a call less)
            within = functools.partial(self.transaction, context=Context(claiming))
            lease = self._run(steps.claim(job_id, owner, ttl, max_attempts), within)
        except BaseException as exc:
            self._conn.run(self._leases.claimed(claiming, exc))
            raise
        if not claiming.settled:
            self._conn.run(self._leases.claimed(claiming, None))
        return lease

    def claim_next(self, owner: str, ttl: float) -> Lease | None:
        """Expired leases first (their work is overdue), then pending jobs oldest first: the
        indexes' candidates (``claimable``), read and claimed in the core's transaction."""
        with self._claiming(ttl) as context:
            return self._run(steps.claim_next(owner, ttl), self._within(context))

    RENEWS_IN_BATCHES = True

    def renew_many(self, renewals: Sequence[steps.Renewal]) -> list[Lease | LeaseError]:
        """One Txn for a thousand renewals or more, each lease judged alone (``holders``); the ones
        whose guess failed (refused, ended early, damaged) are renewed alone after it."""
        found = self._conn.run(etcd_holders.changing(self.parts, self.now(),
                                                     [steps.renew(lease, ttl) for lease, ttl in renewals], {}))
        alone = [renewal for renewal, one in zip(renewals, found, strict=True) if one is None]
        return etcd_holders.merged(found, Backend.renew_many(self, alone))

    # claim_next_many: up to CLAIM_BATCH claims a request, each its own nested Txn (``claims``).
    CLAIMS_IN_BATCHES = True
    CLAIM_BATCH = etcd_claims.CLAIM_BATCH

    def claim_batch(self, owner: str, ttl: float, n: int, carried: object = None) -> steps.Claimed | steps.Lost:
        """Up to ``n`` claims in one Txn, each won or lost alone (``claims``); ``steps.Lost``
        when every one lost a race (the core asks again), carrying the indexes read beside them."""
        request = etcd_claims.Request(self.parts, self.now(), owner, ttl, etcd_claims.carried_index(carried))
        try:
            found = self._conn.run(request.claiming(n))
        except BaseException as exc:
            self._conn.run(request.finish(exc))
            raise
        self._conn.run(request.finish(None))
        return found.answer

    # complete_many: a thousand completions or more a Txn, each judged alone (``holders``).
    COMPLETES_IN_BATCHES = True

    def complete_many(self, completions: Sequence[steps.Completion]) -> list[LeaseError | None]:
        """As renew_many: one Txn for many, each completion guessed from its lease and judged
        alone; the ones whose guess failed are completed alone after it (refusals audited)."""
        found = self._conn.run(etcd_holders.changing(
            self.parts, self.now(), [steps.complete(lease, result) for lease, result in completions], None))
        alone = [completion for completion, one in zip(completions, found, strict=True) if one is None]
        return [None if isinstance(one, JobRecord) else one
                for one in etcd_holders.merged(found, Backend.complete_many(self, alone))]

    # -- reading -------------------------------------------------------------------------
    def get(self, job_id: str) -> JobStatus | None:
        now = self.now()
        try:
            read = Read(job_id, self._conn.txn([], reads(self.keys, job_id), [], retry=True).ranges, now)
        except CorruptRecord as exc:
            return corrupt_status(job_id, exc.key, exc)
        if read.ended_by_etcd():  # a sighting: it starts the quarantine before a claim
            self._leases.ended(job_id, read.incarnation, read.seen)
        return None if read.record is None else transitions.status(read.record, now)

    def jobs(self) -> Iterator[JobStatus]:
        now = self.now()
        return etcd_listing.scan(self._conn, self.keys, now, self._index.listing_pages(etcd_listing.PAGE))

    def _read_audit(self, span: tuple[bytes, bytes], limit: int | None, since: float | None,
                    read: Callable[[KV], _Stamped], by_mod: bool = False) -> list[_Stamped]:
        """Rejections or history, oldest first (``audit.select``); ``by_mod``: in the order of their
        latest writes (a claim's renewal event is one key, overwritten), not of their creation."""
        # Newest first with a limit when no time filter applies; otherwise all (bounded by retention).
        fetch = limit if since is None and limit is not None else 0
        if fetch == 0 and limit == 0:
            return []
        kvs, _, _ = self._conn.range(*span, limit=fetch, newest_first=True, by_create=not by_mod, by_mod=by_mod)
        return audit.select(audit.readable(kvs, read), since, limit)

    def rejections(self, since: float | None, limit: int | None) -> list[Rejection]:
        return self._read_audit(self.keys.span("rejection"), limit, since, lambda kv: read_rejection(kv)[0])

    def history(self, job_id: str | None, since: float | None, limit: int | None) -> list[HistoryEvent]:
        def read(kv: KV) -> HistoryEvent:
            return read_event(kv, job_id or self.keys.job_id(kv.key.rsplit(b"/", 1)[0], "history"))

        return self._read_audit(self.keys.history_span(job_id), limit, since, read, by_mod=True)

    def build_indexes(self) -> int:
        """Add the ``queue/`` and ``held/`` keys a store written before them lacks (an
        upgrade, safe beside writers of this version: see ``etcd.upgrade``); how many."""
        return etcd_upgrade.build_indexes(self._conn, self.keys, self.now())

    def summary(self, now: float, soon: float) -> Summary:
        counted = self._index.counts(now, soon)  # from the indexes (etcd.query)
        return dataclasses.replace(counted, rejections_last_hour=len(self.rejections(now - 3600.0, None)))

    def page(self, now: float, states: frozenset[JobState] | None, job: str | None,
             owner: str | None, order: str, offset: int, limit: int) -> JobPage:
        indexed = paging.page(self._index, now, states, job, owner, order, offset, limit)
        return indexed or super().page(now, states, job, owner, order, offset, limit)

    def watch(self, stop: threading.Event, interval: float) -> Iterator[Change]:
        return etcd_watch.watch(self.keys, self._conn, self.jobs, self.get, stop, interval)

    def health(self) -> dict[str, Any]:
        status = self._conn.status()
        return {"backend": "etcd", "prefix": self.keys.prefix,
                "store_clock": self.characteristics.store_clock,
                "endpoints": [f"{h}:{p}" for h, p in self.hosts], **status}

    def close(self) -> None:
        self._conn.close()

