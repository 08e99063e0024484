"""History and rejections as sequential znodes, added inside the multi of the step they record
(docs/backends/zookeeper.md, "Audit").

ZooKeeper numbers a sequential znode with a signed 32-bit count of its parent's child
creations, and 3.8 stops naming at its end. So records go into *segments* (directories
named by a 10-digit index): a record numbered ``SEGMENT_LIMIT`` or more makes its writer open
the next segment and close its own in one multi, and every multi that adds a record checks
its segment is still open (version 0), so records are ordered by (segment, number). Records
of a store made before segments lie in the directory itself: the oldest segment. Logs are
trimmed to ``retention`` by the commit of a record whose number is a multiple of
``trim_period(retention)``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.serialization import CheckVersion, Create, Delete

from tenure.backends.zookeeper import layout as zl
from tenure.backends.zookeeper.calls import Multi, ZkIo
from tenure.backends.zookeeper.errors import mapped_errors
from tenure.backends.zookeeper.multiread import read_many
from tenure.backends.zookeeper.session import Session
from tenure.core import audit, transitions
from tenure.core.batches import batches
from tenure.core.bounded import Bounded
from tenure.core.errors import AuthenticationFailed, BackendUnavailable
from tenure.core.records import HistoryEvent, Rejection

SEGMENT_LIMIT = 2**31 - 2**20  # a record numbered this or higher opens the next segment
TRIM_MOST = 10_000
_BATCH = 200
# Deletes per multi when trimming, and their bytes at most (a path and 16 bytes of framing
# each): under jute.maxbuffer as submit_many's and renew_many's multis are.
_TRIM_MULTI = 5000
_TRIM_BYTES = 512 * 1024
_SEQUENCE = 2  # ZooKeeper's create flag for a sequential znode
_LEGACY = -1  # the rank of records written straight into the directory, before segments
# Claims whose latest renewal event this process wrote, with its path: the next renewal's multi
# deletes it (``transitions.replaced``). A claim renewed by another process, or forgotten here,
# keeps its earlier renewal event until the log is trimmed.
_RENEWALS = 100_000
Key = tuple[int, int]  # (segment rank, number): the order records were written in


class Log:
    """One audit directory: its segments, the one records go into now, and their order."""

    def __init__(self, session: Session, directory: str, prefix: str) -> None:
        self._session = session
        self.directory = directory
        self.prefix = prefix  # "e-" or "r-", as ZooKeeper's sequential names start
        self._lock = threading.Lock()
        self.segment = self._path(0)
        # Credentials that may not read here fail at their first operation, as before; a
        # wrong guess of the segment is corrected by the first multi (``Audit.failed``).
        with contextlib.suppress(AuthenticationFailed):
            self.segment = session.run(self._newest())

    # -- segments --------------------------------------------------------------------------------
    def ranking(self, watch: Callable[[Any], None] | None = None) -> ZkIo[list[int]]:
        """The segments' ranks, oldest first; ``_LEGACY`` first if records predate segments."""
        with mapped_errors("listing the audit"):
            names = yield self._session.client.get_children_async(self.directory, watch=watch)
        ranks = sorted(rank for n in names if (rank := zl.segment_rank(n)) is not None)
        legacy = any(zl.sequence(n, self.prefix) is not None for n in names)
        return [_LEGACY, *ranks] if legacy else ranks

    def _path(self, rank: int) -> str:
        return self.directory if rank == _LEGACY else f"{self.directory}/{zl.segment_name(rank)}"

    def _newest(self) -> ZkIo[str]:
        ranks = [r for r in (yield from self.ranking()) if r != _LEGACY]
        if ranks:
            return self._path(ranks[-1])
        first = self._path(0)
        # A read-only identity may not create it, and never writes records into it.
        with contextlib.suppress(AuthenticationFailed), mapped_errors("opening the audit"), \
                contextlib.suppress(NodeExistsError):
            yield self._session.client.create_async(first, b"")
        return first

    def refresh(self) -> ZkIo[None]:
        newest = yield from self._newest()
        with self._lock:
            self.segment = newest

    def rotate(self, segment: str) -> ZkIo[None]:
        """Open the segment after ``segment`` and close ``segment``, in one multi."""
        rank = zl.segment_rank(segment.rsplit("/", 1)[1])
        if rank is None:
            return
        tx = self._session.client.transaction()
        tx.create(self._path(rank + 1), b"")
        tx.set_data(segment, b"closed", version=0)
        with mapped_errors("opening the next audit segment"):
            yield tx.commit_async()  # failed as a whole: another client rotated first
        yield from self.refresh()

    # -- writing -----------------------------------------------------------------------------------
    def add(self, tx: Multi, data: bytes, checked: set[str]) -> None:
        """A record created in ``tx``, whose multi checks the segments in ``checked`` (a set the
        caller keeps per multi: looking through a batch's thousands of operations for the check
        made adding records quadratic)."""
        with self._lock:
            segment = self.segment
        if segment not in checked:
            tx.operations.append(CheckVersion(segment, 0))  # still open: a closed segment takes no more records
            checked.add(segment)
        # Appended as ``ZkTransaction.save`` appends its requests; ``_SEQUENCE``: ZooKeeper's flag.
        tx.operations.append(Create(f"{segment}/{self.prefix}", data, self._session.acl, _SEQUENCE))

    # -- reading -----------------------------------------------------------------------------------
    def listing(self, rank: int, watch: Callable[[Any], None] | None = None) -> ZkIo[list[tuple[Key, str]]]:
        """The records of one segment, oldest first, as (key, path)."""
        directory = self._path(rank)
        with mapped_errors("listing the audit"):
            try:
                names = yield self._session.client.get_children_async(directory, watch=watch)
            except NoNodeError:
                return []
        found = [((rank, n), f"{directory}/{name}") for name in names
                 if (n := zl.sequence(name, self.prefix)) is not None]
        return sorted(found)

    def newest_first(self) -> Iterator[str]:
        for rank in reversed(self._session.run(self.ranking())):
            for _, path in reversed(self._session.run(self.listing(rank))):
                yield path

    def after(self, last: Key | None, watch: Callable[[Any], None]) -> list[tuple[Key, str]]:
        """Records written after ``last`` (all with None), oldest first, arming ``watch`` on
        the directory and on each segment listed."""
        ranks = [r for r in self._session.run(self.ranking(watch)) if last is None or r >= last[0]]
        return [(key, path) for rank in ranks for key, path in self._session.run(self.listing(rank, watch))
                if last is None or key > last]

    def trim(self, retention: int) -> ZkIo[None]:
        paths = []
        for rank in (yield from self.ranking()):
            paths += [path for _, path in (yield from self.listing(rank))]
        doomed = paths[:max(0, len(paths) - retention)]
        client = self._session.client
        with mapped_errors("trimming the audit"):
            for chunk in batches(doomed, _TRIM_MULTI, lambda path: len(path) + 16, _TRIM_BYTES):
                # One multi per batch: one transaction (and fsync) instead of one per znode.
                tx = client.transaction()
                for path in chunk:
                    tx.operations.append(Delete(path, -1))
                if not any(isinstance(r, NoNodeError) for r in (yield tx.commit_async())):
                    continue
                # Another client trimmed some first: the multi did nothing; delete one by one.
                pending = [client.delete_async(p) for p in chunk]
                for result in pending:
                    with contextlib.suppress(NoNodeError):
                        yield result


def trim_period(retention: int) -> int:
    """How far apart (in record numbers) the records are whose commit trims their log. Each
    trim lists the whole log, so a trim every 256 records listed some 40 names per record
    written: with thousands of renewals a second, about half of a renewal's CPU and most of
    the requests. Every ``retention`` numbers instead (``TRIM_MOST`` at most), about half as
    many records since deletes advance the numbers too: a log holds from ``retention`` to
    about twice as many records (``retention`` and some 5,000 when it is larger)."""
    return min(retention, TRIM_MOST)


class Audit:
    def __init__(self, session: Session) -> None:
        self._session = session
        self.event_log = Log(session, session.layout.events, "e-")
        self.rejection_log = Log(session, session.layout.rejections, "r-")
        self._every = trim_period(session.config.retention)
        self._logs = {log.directory: log for log in (self.event_log, self.rejection_log)}
        self._renewals: Bounded[tuple[str, int], str] = Bounded(_RENEWALS)

    def add_event(self, tx: Multi, event: HistoryEvent, checked: set[str], renewals: dict[int, tuple[str, int]],
                  replace: bool = True) -> None:
        """``renewals``: the caller's, per multi: the renewal events it creates, for ``committed``.
        ``replace``: delete the claim's earlier renewal event (not in a multi sent again after
        one such delete found its event gone: ``unreplaced``)."""
        claim = transitions.replaced(event)
        if claim is None:
            self._renewals.pop((event.job_id, event.token))  # the claim ended (or never renewed here)
        elif replace and (earlier := self._renewals.get(claim)) is not None:
            tx.operations.append(Delete(earlier, -1))  # in the same multi: no read, no request of its own
        self.event_log.add(tx, zl.dump_event(event), checked)
        if claim is not None:
            renewals[id(tx.operations[-1])] = claim

    def unreplaced(self, op: Any, error: Exception) -> bool:
        """Whether a multi failed on the delete of an earlier renewal event that is gone
        (trimmed, here or by another process): sent again without any such delete
        (``add_event``'s ``replace``: one round trip more, not one per event gone; an earlier
        event still there stays until trimmed)."""
        return (isinstance(op, Delete) and isinstance(error, NoNodeError)
                and str(op.path).startswith(self.event_log.directory + "/"))

    def add_rejection(self, tx: Multi, rejection: Rejection, checked: set[str]) -> None:
        self.rejection_log.add(tx, zl.dump_rejection(rejection), checked)

    def committed(self, results: list[Any], operations: list[Any],
                  renewals: dict[int, tuple[str, int]]) -> ZkIo[None] | None:
        """After a commit: remember the renewal events it created (``add_event``); return the
        tidying its records call for, None for none (most commits). A record numbered past
        ``SEGMENT_LIMIT`` opens the next segment; one whose number is a multiple of the trim
        period trims its log, once per commit however many periods its records crossed (a
        batch of renewals writes hundreds of events)."""
        if renewals:
            for op, path in zip(operations, results, strict=False):
                if isinstance(path, str) and (claim := renewals.get(id(op))) is not None:
                    self._renewals.put(claim, path, refresh=True)
        due: list[tuple[Log, str, int]] = []
        for path in results:
            # A record's path is <log>/<segment>/<name>: one look-up passes over the multi's
            # other created znodes (the job's, its generation's, index entries).
            log = self._logs.get(path.rsplit("/", 2)[0]) if isinstance(path, str) else None
            number = None if log is None else zl.sequence(path.rpartition("/")[2], log.prefix)
            if log is not None and number is not None and (number >= SEGMENT_LIMIT or number % self._every == 0):
                due.append((log, path, number))
        return self._tidying(due) if due else None

    def _tidying(self, due: list[tuple[Log, str, int]]) -> ZkIo[None]:
        """Tidying only: a failure here must not report the committed change as failed (the
        next record past the limit rotates, the next period trims). A trim runs in the
        background (``Session.tidy``): the commit's answer, a renewal's, never waits for it."""
        trimmed: list[Log] = []
        for log, path, number in due:
            with contextlib.suppress(BackendUnavailable):
                if number >= SEGMENT_LIMIT:
                    yield from log.rotate(path.rpartition("/")[0])
                if number % self._every == 0 and log not in trimmed:
                    trimmed.append(log)
                    self._session.tidy(log.directory, functools.partial(log.trim, self._session.config.retention))

    def failed(self, op: Any, error: Exception) -> ZkIo[None] | None:
        """After a multi that ``op`` failed: the refresh of the log whose segment it found
        closed (or vanished), None for none (most failures: a lost race). Not a generator:
        every failed multi asks."""
        if not ((isinstance(op, CheckVersion) and isinstance(error, BadVersionError))
                or (isinstance(op, Create) and isinstance(error, NoNodeError))):
            return None
        for log in (self.event_log, self.rejection_log):
            if op.path.startswith(log.directory + "/"):
                return log.refresh()
        return None

    def _newest_first(self, log: Log) -> Iterator[tuple[str, bytes]]:
        """(path, data) of the log's records, newest first (one request per ``_BATCH``; a
        record trimmed since the listing is passed over)."""
        paths = log.newest_first()
        while chunk := list(itertools.islice(paths, _BATCH)):
            with mapped_errors("reading the audit"):
                s = self._session
                loaded = [(path, data) for path, data, _ in read_many(s.client, chunk, s.config.timeout)]
            yield from loaded

    def rejections(self, since: float | None, limit: int | None) -> list[Rejection]:
        found = audit.readable(self._newest_first(self.rejection_log), lambda r: zl.load_rejection(r[1], r[0]))
        return audit.select(found, since, limit)

    def history(self, job_id: str | None, since: float | None, limit: int | None) -> list[HistoryEvent]:
        found = audit.readable(self._newest_first(self.event_log), lambda r: zl.load_event(r[1], r[0]))
        return audit.select(found, since, limit, None if job_id is None else lambda e: e.job_id == job_id)
