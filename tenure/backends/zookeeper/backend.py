"""``zk://user:pass@h1:2181,h2:2181/root``: leases on ZooKeeper through kazoo.

A ``RecordBackend``: the protocol's decisions, retries and batches are the core's; ZooKeeper
supplies the optimistic transaction (``transaction``: reads with versions and the leader's
clock, one multi per step, the one-round-trip guesses). The token is the version of
``gen/<job>``, which only claims move; see ``layout`` and docs/backends/zookeeper.md. The
multi also keeps the index of claimable jobs that ``claim_next`` reads (``index``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from collections.abc import Iterator
from typing import Any

from kazoo.exceptions import NoAuthError, NodeExistsError
from kazoo.protocol.states import ZnodeStat

from tenure.backends.zookeeper import query as zookeeper_query
from tenure.backends.zookeeper.acl import Guard
from tenure.backends.zookeeper.audit import Audit
from tenure.backends.zookeeper.calls import Answer
from tenure.backends.zookeeper.config import Config
from tenure.backends.zookeeper.errors import mapped_errors
from tenure.backends.zookeeper.index import Index
from tenure.backends.zookeeper.session import Session
from tenure.backends.zookeeper.transaction import Parts, Written, ZkTransaction
from tenure.core import order, transitions
from tenure.core.backend import Characteristics, Durability, Link, RecordBackend
from tenure.core.clock import Clock
from tenure.core.codec import corrupt_status
from tenure.core.errors import CorruptRecord, StoreNotFound
from tenure.core.options import Options, StoreURL
from tenure.core.records import Change, HistoryEvent, JobPage, JobState, JobStatus, Lease, Rejection, Summary
from tenure.core.steps import Completion
from tenure.views import paging

UNREADABLE = object()  # an exists() the server refused: the znode is there


class ZooKeeperBackend(RecordBackend):
    characteristics = Characteristics(
        name="zookeeper",
        store_clock="the ZooKeeper leader's clock, as it stamps znode mtimes",
        durability=Durability.REPLICATED,  # zab: on a quorum's logs (forceSync=no voids it)
        min_ttl=0.1,
        max_result_bytes=512 * 1024,  # base64 in a znode under jute.maxbuffer (1 MB), with the record
        tls_options=("tls",),
        clock_resolution=0.001,  # znode mtimes are whole milliseconds
        counts_from_indexes=True,  # where the store has the claimable index (zookeeper.query)
        claim_order=order.OPTIMISTIC,  # claimers spread (tenure.core.order)
        create_option=True,
    )
    SUBMIT_BATCH = 250  # jobs per multi in submit_many: about 200 KB, well under jute.maxbuffer (1 MB)
    # Bytes of a submit_many multi at most, by submit_weight: a multi above the server's
    # jute.maxbuffer (1 MB by default) is not refused but drops the connection, every time.
    SUBMIT_BYTES = 512 * 1024
    # renew_many: a record, a check and an event a lease, some 600 bytes with short ids (up to
    # 900 by renew_weight): the byte budget bounds a multi of long ids, as SUBMIT_BYTES does.
    # Held leases renew a multi's worth at a time, each multi's deadlines counted from its own
    # send: 5,000 leases in one renew_many were nine multis one after another, and a lease of
    # the first could be lost waiting for the last (docs/performance.md).
    RENEW_BATCH = 500
    RENEW_BYTES = 512 * 1024
    # claim_next_many: the jobs the index proposes, claimed in one multi (a record, its
    # generation, two index entries and an event each), as many as fit SUBMIT_BYTES.
    CLAIMS_IN_BATCHES = True
    CLAIM_BATCH = 250
    CLAIM_BYTES = 512 * 1024
    # complete_many: a record with its result (base64) and an event each.
    COMPLETE_BATCH = 1000
    COMPLETE_BYTES = 512 * 1024

    def __init__(self, config: Config, injected: Clock | None = None) -> None:
        """``injected``: the clock given to ``connect`` (tests), which holders' deadlines are
        on; it only decides whether those vouch for anything (``clock.deadline_runs``)."""
        self.config = config
        self.session = Session(config)
        self.client = self.session.client
        self.layout = self.session.layout
        try:
            self.index = Index(self.session, self._ensure_layout())
            self._queries = zookeeper_query.ZooKeeperIndex(self.client, self.layout, config.timeout)
            self.audit = Audit(self.session)
        except BaseException:
            self.close()
            raise
        self.parts = Parts(self.session, self.index, self.audit, Written(), injected)

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
        with mapped_errors("creating the layout"):
            found = [self.client.exists_async(p) for p in dirs]
            stats = {path: self._exists(result) for path, result in zip(dirs, found, strict=True)}
        jobs = stats[self.layout.jobs]
        if jobs is None and not self.config.create:  # before the guard, which may repair ACLs
            raise StoreNotFound(f"no such store: {self.config.root} has no tenure store "
                                "(create=false: nothing was created)")
        Guard(self.session).check(dirs)  # before anything is written under a root anyone may change
        with mapped_errors("creating the layout"):
            indexed = (stats[self.layout.pending] is not None or jobs is None
                       or (jobs is not UNREADABLE and jobs.numChildren == 0))
            for path in dirs if indexed else self.layout.dirs:
                if stats[path] is None:
                    acl = self.config.clocks_acl() if path == self.layout.clocks else None
                    with contextlib.suppress(NodeExistsError):
                        self.client.create(path, b"", acl=acl, makepath=True)
        self.session.run(self.session.clock_creating())
        return indexed

    def _exists(self, result: Answer[ZnodeStat | None]) -> Any:
        """An ``exists`` answer: its stat, None, or UNREADABLE for a znode these credentials may
        not read. ZooKeeper 3.9 checks READ on ``exists`` (3.8 did not); the znode is there, and
        what the credentials may do is for each operation to find out, as on 3.8."""
        try:
            return self.session.wait(result)
        except NoAuthError:
            return UNREADABLE

    def transaction(self, fresh: bool = False) -> ZkTransaction:
        return ZkTransaction(self.parts, fresh)  # its own ``with`` block: committed on a normal exit

    def submit_weight(self, job_id: str) -> int:
        """What a job adds to a submit multi, at most: three paths that name it (job, generation,
        pending entry), two JSON texts that hold it (record, history event; a character outside
        ASCII takes up to 12 bytes there), and the rest of both."""
        return 3 * (len(self.layout.job(job_id)) + 48) + 2 * len(json.dumps(job_id)) + 512

    def renew_weight(self, lease: Lease) -> int:
        """What renewing ``lease`` adds to a multi, at most: what submitting its job does (paths,
        record, event), and its owner in both JSON texts."""
        return self.claim_weight(lease.job_id, lease.owner)

    def claim_weight(self, job_id: str, owner: str) -> int:
        """What claiming a job adds to a multi, at most: as renewing its lease does."""
        return self.submit_weight(job_id) + 2 * len(json.dumps(owner))

    def complete_weight(self, completion: Completion) -> int:
        """What completing a lease adds to a multi, at most: as renewing it does, and its
        result in base64 (4 bytes for 3)."""
        lease, result = completion
        return self.claim_weight(lease.job_id, lease.owner) + 4 * ((len(result or b"") + 2) // 3)

    def now(self) -> float:
        return self.session.now()

    # -- reading ------------------------------------------------------------------------------------
    def get(self, job_id: str) -> JobStatus | None:
        with self.transaction(fresh=True) as tx:
            try:
                rec = tx.read_record(job_id)
            except CorruptRecord as exc:
                return corrupt_status(job_id, exc.key, exc)
        return None if rec is None else transitions.status(rec, tx.now)

    def jobs(self) -> Iterator[JobStatus]:
        now = self.now()
        with mapped_errors("listing jobs"):
            names = sorted(self.client.get_children(self.layout.jobs))
        yield from zookeeper_query.listing(self.client, self.layout, names, now, self.config.timeout)

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
