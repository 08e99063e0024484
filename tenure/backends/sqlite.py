"""``sqlite:///path/to/jobs.db``: several processes on one machine, through one SQLite file.

Every operation is one ``BEGIN IMMEDIATE`` transaction, so claims from concurrent processes
are serialised by SQLite's write lock, and the store's clock is read inside that lock.

The store's clock is the *machine's* boot clock (``sqlite_clock``), not ``time.time()`` of
the calling process: every process on the machine reads the same kernel clock, and a worker
whose wall clock is skewed (``faketime``, a bad TZ hack, a stepped clock) cannot make a live
lease look expired. It is turned into epoch seconds by an offset fixed once per boot and kept
in the database, so expiries read as ordinary timestamps. Files on network filesystems are
refused: another machine's processes would judge leases by another boot clock.

``synchronous=FULL`` (the default) or ``EXTRA``: with ``NORMAL``, SQLite's WAL mode may lose
the last acknowledged transactions on power loss, so a claim whose token a destination has
already admitted can be handed out again with the same token. It takes an explicit
``power_loss_may_reuse_tokens=true``.

Paths follow SQLAlchemy: ``sqlite:///jobs.db`` is relative, ``sqlite:////var/lib/jobs.db``
absolute.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import operator
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tenure.backends.sqlite_clock import RESOLUTION, MachineClock, refuse_network_filesystem
from tenure.core import codec, order
from tenure.core.backend import Characteristics, Durability, RecordBackend
from tenure.core.clock import Clock
from tenure.core.codec import corrupt_status
from tenure.core.errors import BackendUnavailable, CorruptRecord, InvalidArgument, StoreNotFound
from tenure.core.options import Options, StoreURL
from tenure.core.order import Expired, Queued
from tenure.core.record_transaction import Transaction
from tenure.core.records import (
    HistoryEvent,
    JobPage,
    JobRecord,
    JobState,
    JobStatus,
    Lease,
    Op,
    Rejection,
    RejectionKind,
    Summary,
)
from tenure.core.transitions import replaced, status
from tenure.core.validation import LAST_TOKEN, MAX_JOB_ID, refused_class

# 2: the job life cycle's columns (issue 28) and the state 'parked'. A store of schema 1 is
# upgraded in place when opened (``_upgrade``); a version of tenure that reads only 1 refuses
# the upgraded file rather than claim a scheduled job early or a parked one as corrupt.
SCHEMA_VERSION = "2"
_UPGRADES_FROM = ("1",)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS tenure_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tenure_jobs (
    job_id TEXT PRIMARY KEY, state TEXT NOT NULL, owner TEXT, token INTEGER NOT NULL,
    lease_until REAL, ttl REAL, submitted_at REAL, claimed_at REAL, renewed_at REAL,
    completed_at REAL, runs INTEGER NOT NULL, result BLOB, queued_at REAL,
    attempts INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER, last_error TEXT, claimable_at REAL,
    failed_at REAL);
CREATE INDEX IF NOT EXISTS tenure_jobs_leased ON tenure_jobs (lease_until) WHERE state = 'leased';
CREATE TABLE IF NOT EXISTS tenure_rejections (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, op TEXT NOT NULL,
    owner TEXT NOT NULL, token INTEGER NOT NULL, current_owner TEXT, current_token INTEGER,
    at REAL NOT NULL, reason TEXT NOT NULL, kind TEXT NOT NULL, resource TEXT);
CREATE INDEX IF NOT EXISTS tenure_rejections_at ON tenure_rejections (at);
CREATE INDEX IF NOT EXISTS tenure_rejections_job ON tenure_rejections (job_id, id);
CREATE TABLE IF NOT EXISTS tenure_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, op TEXT NOT NULL,
    owner TEXT, token INTEGER NOT NULL, at REAL NOT NULL, expires_at REAL);
CREATE INDEX IF NOT EXISTS tenure_events_job ON tenure_events (job_id, id);
CREATE INDEX IF NOT EXISTS tenure_events_at ON tenure_events (at);
"""
# Columns added after the table was first shipped, with what a row written before them reads
# as (``_setup`` adds those a store lacks): ``queued_at``, the time a pending job became
# claimable (none: its submission time); the life cycle's (issue 28): attempts 0, no limit,
# claimable now.
_ADDED_COLUMNS = (("queued_at", "REAL"), ("attempts", "INTEGER NOT NULL DEFAULT 0"), ("max_attempts", "INTEGER"),
                  ("last_error", "TEXT"), ("claimable_at", "REAL"), ("failed_at", "REAL"))
# A lease that may yet become claimable by its end alone (transitions.candidate_at): not one on
# the job's last allowed attempt, which is parked when it runs out, and must not be walked past
# by every claim_next.
_NOT_SPENT = "(max_attempts IS NULL OR attempts < max_attempts)"
# claim_next's candidates (transitions.candidate_at), each through a partial index, so that it
# costs the same with 100,000 jobs as with 10, whatever their states: leases by their end
# (then job id: ``order.Expired``);
# pending jobs claimable now by the time they became so (``queued_at``); scheduled ones by
# their ``claimable_at``, the time they join the queue. Those that replaced older indexes are
# dropped.
_QUEUE = f"""
CREATE INDEX IF NOT EXISTS tenure_jobs_ending ON tenure_jobs (lease_until, job_id)
    WHERE state = 'leased' AND {_NOT_SPENT};
CREATE INDEX IF NOT EXISTS tenure_jobs_ready ON tenure_jobs (coalesce(queued_at, submitted_at))
    WHERE state = 'pending' AND claimable_at IS NULL;
CREATE INDEX IF NOT EXISTS tenure_jobs_scheduled ON tenure_jobs (claimable_at)
    WHERE state = 'pending' AND claimable_at IS NOT NULL;
DROP INDEX IF EXISTS tenure_jobs_pending;
DROP INDEX IF EXISTS tenure_jobs_expiring;
DROP INDEX IF EXISTS tenure_jobs_queued;
"""
# In the order codec.job_record takes them.
_JOB_COLUMNS = ("job_id, state, owner, token, lease_until, ttl, submitted_at, claimed_at, "
                "renewed_at, completed_at, runs, result, " + ", ".join(codec.LIFE_FIELDS))
# Built once, not per statement: each claim and complete loads and saves a row.
_LOAD_SQL = f"SELECT {_JOB_COLUMNS} FROM tenure_jobs WHERE job_id = ?"
_SAVE_SQL = f"INSERT OR REPLACE INTO tenure_jobs ({_JOB_COLUMNS}, queued_at) VALUES ({{}})"
_EVENT_SQL = "INSERT INTO tenure_events (job_id, op, owner, token, at, expires_at) VALUES ({})"
_REJECTION_SQL = ("INSERT INTO tenure_rejections (job_id, op, owner, token, current_owner, current_token,"
                  " at, reason, kind, resource) VALUES ({})")


class _Inserts(dict[tuple[str, tuple[bool, ...]], str]):
    """An INSERT (``_SAVE_SQL``...) with ``NULL`` written in for each value that is None, by
    the statement and which of its values are present. sqlite3 binds an int,
    float or str as it is, but looks for an adapter for any other value, None and bytes
    included, at the cost of a failed attribute lookup and its AttributeError each (17 a
    claim + complete: 56 k instructions of its 790 k; docs/performance.md). At most one
    statement per pattern of missing values (a few dozen in use; the connection's statement
    cache, ``_STATEMENTS``, keeps them prepared)."""

    def __missing__(self, key: tuple[str, tuple[bool, ...]]) -> str:
        insert, present = key
        self[key] = sql = insert.format(", ".join("?" if value else "NULL" for value in present))
        return sql


_INSERTS = _Inserts()
_is_not = operator.is_not
_NONES = (None,) * 32  # more than any table has columns


def _insert(db: sqlite3.Connection, insert: str, values: tuple[Any, ...]) -> sqlite3.Cursor:
    """``insert`` (``_SAVE_SQL``...) of ``values``, each None written as NULL (``_Inserts``)."""
    present = tuple(map(_is_not, values, _NONES))  # in C: which of them are present
    return db.execute(_INSERTS[insert, present], tuple(itertools.compress(values, present)))
_STATEMENTS = 512  # prepared statements a connection keeps (sqlite3's default, 128, fits fewer patterns)
_TRIM_EVERY = 256  # trim audit tables once per this many inserts, not on every write
_NO_BOOT_ID = "clock_offset:no-boot-id"  # value: "<offset> <highest boot clock reading seen>"


@contextlib.contextmanager
def _mapped_errors(path: str) -> Iterator[None]:
    """The one place where sqlite3 errors become tenure errors."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        raise BackendUnavailable(f"SQLite store {path}: {exc}") from exc
    except sqlite3.DatabaseError as exc:
        raise BackendUnavailable(f"SQLite store {path} is not usable: {exc}") from exc


def _utf8(data: bytes | None) -> bool:
    """Whether text's bytes are UTF-8 (SQL's ``tenure_utf8``): SQLite stores whatever bytes it is
    given as text, and Python cannot read text that is not (lone surrogates included)."""
    try:
        (data or b"").decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _lenient(data: bytes) -> str:
    """Text tenure did not write, read anyway: bytes that are not UTF-8 become lone surrogates,
    which the codec refuses in a job id (CORRUPT) and ``quoted`` escapes."""
    return data.decode("utf-8", "surrogateescape")


def _after(job_id: Any) -> tuple[str, Any]:
    """The keyset condition and its argument for the page after ``job_id``: text read leniently
    goes back as its bytes, cast to text, so it compares as stored."""
    if isinstance(job_id, str) and not job_id.isascii() and not _utf8(job_id.encode("utf-8", "surrogateescape")):
        return "job_id > CAST(? AS TEXT)", job_id.encode("utf-8", "surrogateescape")
    return "job_id > ?", job_id


def _decode(row: tuple[Any, ...], key: str | None = None) -> JobRecord:
    """``key``: the row's key for a CorruptRecord, when the caller knows it (a row read by a
    caller's job id, already checked); else worked out from the stored id."""
    return codec.job_record(key or codec.key_of("tenure_jobs", row[0]), *row)


class _SQLiteTransaction(Transaction):
    def __init__(self, backend: SQLiteBackend) -> None:
        self._backend = backend
        self._db = backend._db
        self.now = backend.now()

    def load(self, job_id: str, op: Op, lease: Lease | None = None) -> JobRecord | None:
        row = self._db.execute(_LOAD_SQL, (job_id,)).fetchone()
        return None if row is None else _decode(row, f"tenure_jobs/{job_id}")

    def save(self, r: JobRecord, op: Op, e: HistoryEvent | None) -> None:
        # A pending job queues when it becomes claimable: now, or at its claimable_at if it is
        # scheduled (as memory's queue: a requeue queues the job again).
        queued = None if r.state is not JobState.PENDING else self.now if r.claimable_at is None else r.claimable_at
        db = self._db
        values = (r.job_id, r.state.value, r.owner, r.token, r.lease_until, r.ttl, r.submitted_at, r.claimed_at,
                  r.renewed_at, r.completed_at, r.runs, r.result, r.attempts, r.max_attempts, r.last_error,
                  r.claimable_at, r.failed_at, queued)
        _insert(db, _SAVE_SQL, values)
        if e is None:
            return
        claim = replaced(e)
        if claim is not None:  # its claim's earlier renewal event goes (tenure_events_job)
            db.execute("DELETE FROM tenure_events WHERE job_id = ? AND token = ? AND op = ?", (*claim, e.op.value))
        fields = (e.job_id, e.op.value, e.owner, e.token, e.at, e.expires_at)
        cur = _insert(db, _EVENT_SQL, fields)
        self._backend._trim("tenure_events", cur.lastrowid)

    def next_claimables(self, n: int) -> list[str]:
        # One statement of three index probes (_QUEUE), n of each one's best, merged by the
        # core. A row that is not tenure's (_VALID), or whose token no claim can follow, is
        # passed over, as the other stores pass over one they cannot read: it never blocks
        # the queue behind it. Claims this transaction makes are written as they are made,
        # so a later read skips them.
        return claimable(self._db.execute(CLAIM_NEXT_SQL, {"now": self.now, "n": n}), n)

    def add_rejection(self, r: Rejection) -> None:
        values = (r.job_id, r.op.value, r.owner, r.token, r.current_owner, r.current_token, r.at, r.reason,
                  r.kind.value, r.resource)
        cur = _insert(self._db, _REJECTION_SQL, values)
        self._backend._trim("tenure_rejections", cur.lastrowid)


def file_of(url: StoreURL) -> Path | None:
    """The file a ``sqlite://`` URL names (None for ``:memory:``), as the store opens it."""
    if url.hosts or not url.path.strip("/"):
        raise InvalidArgument("SQLite URLs look like sqlite:///relative.db or sqlite:////abs/path.db")
    path = url.path[1:]  # one slash separates the empty host from the path
    return None if path == ":memory:" else Path(path).expanduser()


def _connect(path: str, timeout: float, create: bool) -> sqlite3.Connection:
    """A connection to ``path``; with ``create`` false, only to a file that holds a tenure
    store already: opened read-write without creating it, and checked before anything is written."""
    if create or path == ":memory:":  # a store in memory is new whatever create says: nothing outlives it
        return sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False,
                               cached_statements=_STATEMENTS)
    try:
        db = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=rw", timeout=timeout, isolation_level=None,
                             check_same_thread=False, uri=True, cached_statements=_STATEMENTS)
    except sqlite3.OperationalError:
        db = None  # raised below, outside this block: "no such store" needs no sqlite3 cause
    if db is None:
        raise StoreNotFound(f"no such store: {path} does not exist (create=false: nothing was created)")
    try:
        tables = db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'tenure_meta'")
        if tables.fetchone()[0] == 0:
            raise StoreNotFound(f"no such store: {path} holds no tenure store (create=false: nothing was written)")
    except BaseException:
        db.close()
        raise
    return db


class SQLiteBackend(RecordBackend):
    characteristics = Characteristics(
        name="sqlite",
        store_clock="the machine's boot clock (shared by every process on the machine)",
        durability=Durability.FSYNC,  # synchronous=FULL or EXTRA; NORMAL only when told it may lose writes
        min_ttl=0.05,  # a held lease renews every TTL/3, each renewal a commit that waits for fsync
        max_result_bytes=64 * 1024 * 1024,  # far below SQLite's 1 GB blob limit
        tls_options=None,
        clock_resolution=RESOLUTION,
        create_option=True,
    )

    CLAIMS_IN_BATCHES = True  # next_claimables: n jobs from the indexes, claimed in one transaction

    def __init__(self, path: str, *, clock: Clock | None = None, timeout: float = 5.0,
                 retention: int = 10_000, synchronous: str = "FULL",
                 power_loss_may_reuse_tokens: bool = False, machine_clock: MachineClock | None = None,
                 create: bool = True) -> None:
        if synchronous not in ("FULL", "EXTRA") and not (synchronous == "NORMAL" and power_loss_may_reuse_tokens):
            raise InvalidArgument(
                f"synchronous={synchronous} can lose acknowledged claims on power loss, and a claim "
                "lost that way is handed out again with the same token (which fences admit); use FULL "
                "or EXTRA, or accept it with power_loss_may_reuse_tokens=true")
        if path != ":memory:":
            refuse_network_filesystem(path)
        self.path = path
        self._lock = threading.RLock()
        self._machine = (machine_clock or MachineClock()) if clock is None else None
        self._clock: Clock = clock or self._machine  # type: ignore[assignment]
        self.retention = retention
        with _mapped_errors(path):
            self._db = _connect(path, timeout, create)
            try:
                self._db.create_function("tenure_utf8", 1, _utf8, deterministic=True)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute(f"PRAGMA synchronous={synchronous}")
                self._db.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
                self._setup()
            except BaseException:
                self._db.close()
                raise

    def _setup(self) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    self._db.execute(statement)
                self._upgrade()
                if self._machine is not None:
                    self._machine.offset = self._boot_offset(self._machine)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _upgrade(self) -> None:
        """Bring a store an older version made up to this schema, in place: the columns it
        lacks (rows read with their defaults), the queue's indexes. Idempotent, and inside
        ``_setup``'s transaction, so concurrent openers upgrade once."""
        version = self._meta("schema_version")
        if version is not None and version != SCHEMA_VERSION and version not in _UPGRADES_FROM:
            raise InvalidArgument(f"{self.path} has tenure schema {version}, this version reads {SCHEMA_VERSION}")
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(tenure_jobs)")}
        for name, kind in _ADDED_COLUMNS:
            if name not in columns:
                self._db.execute(f"ALTER TABLE tenure_jobs ADD COLUMN {name} {kind}")
        for statement in filter(str.strip, _QUEUE.split(";")):
            self._db.execute(statement)
        if version != SCHEMA_VERSION:
            self._db.execute("INSERT OR REPLACE INTO tenure_meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))

    def _boot_offset(self, machine: MachineClock) -> float:
        """One epoch offset per boot, shared by every process through the file.

        Without a boot id (no ``/proc``) a new boot shows in the boot clock reading below the
        highest one any opener saw: then the old offset is not reused. A reboot whose first
        open comes later than that reading is not recognised; the store's time then lags the
        wall clock, which delays expiries (never advances them) until the file is recreated.
        """
        now = machine.uptime()
        if machine.boot_id is not None:
            key = f"clock_offset:{machine.boot_id}"
            stored = self._meta(key)
            if stored is None:
                stored = repr(machine.epoch_offset())
                self._db.execute("INSERT INTO tenure_meta VALUES (?, ?)", (key, stored))
            return float(stored)
        stored = self._meta(_NO_BOOT_ID)
        if stored is not None and now >= float(stored.split()[1]):
            offset = float(stored.split()[0])  # the boot clock has not gone back: the same boot
        else:
            offset = machine.epoch_offset()  # the first open, or the clock went back: a new boot
        self._db.execute("INSERT OR REPLACE INTO tenure_meta VALUES (?, ?)", (_NO_BOOT_ID, f"{offset!r} {now!r}"))
        return offset

    def _meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM tenure_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _trim(self, table: str, last_id: int | None) -> None:
        # The newest ``retention`` rows by count, not by id: a renewal's event replaces a row,
        # so ids run ahead of the rows kept.
        if last_id is not None and last_id % _TRIM_EVERY == 0:
            self._db.execute(f"DELETE FROM {table} WHERE id <= (SELECT id FROM {table} ORDER BY id DESC"
                             " LIMIT 1 OFFSET ?)", (self.retention,))

    @classmethod
    def from_url(cls, url: StoreURL, options: Options, clock: Clock | None) -> SQLiteBackend:
        file = file_of(url)
        path = ":memory:"
        if file is not None:
            parent = file.resolve().parent
            if not parent.is_dir():
                raise InvalidArgument(f"SQLite store directory does not exist: {parent}")
            path = str(file)
        kwargs: dict[str, Any] = {
            "timeout": options.number("timeout", 5.0, low=0.0, high=3600.0, low_open=True),
            "retention": options.integer("retention", 10_000, low=1),
            "synchronous": options.text("synchronous", "FULL", choices=("FULL", "NORMAL", "EXTRA")),
            "power_loss_may_reuse_tokens": options.boolean("power_loss_may_reuse_tokens", False),
            "create": options.boolean("create", True),
        }
        options.finish()
        return cls(path, clock=clock, **kwargs)

    @contextlib.contextmanager
    def transaction(self, fresh: bool = False) -> Iterator[Transaction]:  # locked: always fresh
        with self._lock, _mapped_errors(self.path):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield _SQLiteTransaction(self)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _query(self, sql: str, args: tuple[Any, ...] | dict[str, Any] = ()) -> list[Any]:
        with self._lock, _mapped_errors(self.path):
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.OperationalError as exc:
                if "decode to UTF-8" not in str(exc):
                    raise
            # Text that is not UTF-8 (written by something else): read again, leniently. Only
            # then: a text factory in Python costs every read.
            self._db.text_factory = _lenient
            try:
                return self._db.execute(sql, args).fetchall()
            finally:
                self._db.text_factory = str

    def _status(self, row: tuple[Any, ...], now: float) -> JobStatus:
        try:
            return status(_decode(row), now)
        except CorruptRecord as exc:
            return corrupt_status(row[0], exc.key, exc)

    def get(self, job_id: str) -> JobStatus | None:
        rows = self._query(f"SELECT {_JOB_COLUMNS} FROM tenure_jobs WHERE job_id = ?", (job_id,))
        return self._status(rows[0], self.now()) if rows else None

    def jobs(self) -> Iterator[JobStatus]:
        # Pages by primary key so a listing of 100,000 jobs never holds them all at once
        # and never holds the lock across the caller's loop.
        rows = self._query(f"SELECT {_JOB_COLUMNS} FROM tenure_jobs ORDER BY job_id LIMIT 2000")
        while rows:
            now = self.now()
            for row in rows:
                yield self._status(row, now)
            # Keyset paging on the primary key: each page is an index seek, not a rescan.
            after, last = _after(rows[-1][0])
            rows = self._query(f"SELECT {_JOB_COLUMNS} FROM tenure_jobs WHERE {after} ORDER BY job_id LIMIT 2000",
                               (last,))

    def rejections(self, since: float | None, limit: int | None) -> list[Rejection]:
        return self._rejections(None, since, limit)

    def job_rejections(self, job_id: str, since: float | None, limit: int | None) -> list[Rejection]:
        return self._rejections(job_id, since, limit)  # through tenure_rejections_job

    def _rejections(self, job_id: str | None, since: float | None, limit: int | None) -> list[Rejection]:
        rows = self._query(
            "SELECT * FROM (SELECT job_id, op, owner, token, current_owner, current_token, at, reason,"
            f" kind, resource, id FROM tenure_rejections WHERE {_of_job(job_id)}at >= ?"
            " ORDER BY id DESC LIMIT ?) ORDER BY id",
            (*_job_arg(job_id), -1e300 if since is None else since, -1 if limit is None else limit))
        return [Rejection(r[0], Op(r[1]), r[2], r[3], r[4], r[5], r[6], r[7],
                          RejectionKind(r[8]), r[9]) for r in rows]

    def history(self, job_id: str | None, since: float | None, limit: int | None) -> list[HistoryEvent]:
        rows = self._query(
            "SELECT * FROM (SELECT job_id, op, owner, token, at, expires_at, id FROM tenure_events"
            f" WHERE {_of_job(job_id)}at >= ? ORDER BY id DESC LIMIT ?) ORDER BY id",
            (*_job_arg(job_id), -1e300 if since is None else since, -1 if limit is None else limit))
        return [HistoryEvent(r[0], Op(r[1]), r[2], r[3], r[4], r[5]) for r in rows]

    def now(self) -> float:
        return self._clock.time()

    def next_due(self) -> float | None:
        now = self.now()
        ((at,),) = self._query(_DUE_SQL, {"now": now})
        # (A row that is not tenure's may hold text there, which SQLite orders after numbers.)
        return at - now if isinstance(at, (int, float)) else None

    def health(self) -> dict[str, Any]:
        size = sum(os.path.getsize(p) for p in (self.path, self.path + "-wal") if os.path.exists(p))
        counts = dict(self._query("SELECT state, count(*) FROM tenure_jobs GROUP BY state"))
        return {"backend": "sqlite", "file": os.path.abspath(self.path), "bytes": size,
                "jobs": sum(counts.values()), "store_clock": self.characteristics.store_clock}

    def close(self) -> None:
        with self._lock:
            self._db.close()
            if self._machine is not None:
                self._machine.close()

    # -- operator queries: aggregated in SQL, one page at a time ------------------------------
    def summary(self, now: float, soon: float) -> Summary:
        with self._lock, _mapped_errors(self.path):
            counts = dict(self._db.execute(_SUMMARY_SQL, {"now": now, "soon": now + soon}).fetchall())
            (rejected,) = self._db.execute("SELECT count(*) FROM tenure_rejections WHERE at >= ?",
                                           (now - 3600.0,)).fetchone()
        return Summary(now=now, pending=counts.get("pending", 0),
                       leased=counts.get("leased", 0) + counts.get("soon", 0),
                       expiring_soon=counts.get("soon", 0), expired=counts.get("expired", 0),
                       completed=counts.get("completed", 0), corrupt=counts.get("corrupt", 0),
                       rejections_last_hour=int(rejected), scheduled=counts.get("scheduled", 0),
                       parked=counts.get("parked", 0))

    def page(self, now: float, states: frozenset[JobState] | None, job: str | None,
             owner: str | None, order: str, offset: int, limit: int) -> JobPage:
        where, args = ["1"], {"now": now, "job": job, "owner": owner}
        if states is not None:
            if states and states <= {JobState.LEASED, JobState.EXPIRED}:
                where.append("state = 'leased'")  # lets SQLite walk the partial index by expiry
            where.append("(" + (" OR ".join(_STATE_SQL[s] for s in sorted(states)) or "0") + ")")
        if job is not None:
            where.append("instr(lower(job_id), lower(:job)) > 0")
        if owner is not None:
            where.append("instr(lower(owner), lower(:owner)) > 0")
        cond = " AND ".join(where)
        by = "lease_until IS NULL, lease_until, job_id" if order == "expiry" else "job_id"
        with self._lock:  # the count and the page between the same writes of this process
            ((total,),) = self._query(f"SELECT count(*) FROM tenure_jobs WHERE {cond}", args)
            rows = self._query(f"SELECT {_JOB_COLUMNS} FROM tenure_jobs WHERE {cond} ORDER BY {by}"
                               f" LIMIT {int(limit)} OFFSET {int(offset)}", args)
        return JobPage([self._status(r, now) for r in rows], int(total), offset, limit)


# A row _decode() would accept, as far as SQL can tell; anything else counts as corrupt.
# The rule of codec.job_record in SQL, so queries pass over what load() would refuse. Times are
# finite numbers or NULL (SQLite stores an infinity; codec refuses it; NaN is stored as NULL).
_TIMES = ("lease_until", "ttl", "submitted_at", "claimed_at", "renewed_at", "completed_at", "claimable_at",
          "failed_at")
_FINITE = " AND ".join(f"({c} IS NULL OR (typeof({c}) IN ('real', 'integer') AND abs({c}) <= 1.7976931348623157e308))"
                       for c in _TIMES)
# A job id a caller could name (codec.job_id_problem): text (not a blob) of 1 to 256 characters
# (length() stops at a NUL, so instr() looks for one), none refused: printable ASCII, the common
# case, is told by the first GLOB alone; any other must be UTF-8 (tenure_utf8: lone surrogates
# are not, and SQL text cannot carry them into the class) without a refused character.
_REFUSED_GLOB = refused_class(chr)
_GOOD_ID = (f"typeof(job_id) = 'text' AND length(job_id) BETWEEN 1 AND {MAX_JOB_ID} AND instr(job_id, char(0)) = 0"
            " AND (job_id NOT GLOB '*[^ -~]*'"
            f" OR (tenure_utf8(CAST(job_id AS BLOB)) AND job_id NOT GLOB '*[{_REFUSED_GLOB}]*'))")
# The life cycle's columns as codec.life checks them (a NULL attempts is a row from before it).
_GOOD_LIFE = ("(attempts IS NULL OR (typeof(attempts) = 'integer' AND attempts >= 0))"
              " AND (max_attempts IS NULL OR (typeof(max_attempts) = 'integer' AND max_attempts >= 1))"
              " AND typeof(last_error) IN ('text', 'null')")
_VALID = (f"(typeof(token) = 'integer' AND token BETWEEN 0 AND {LAST_TOKEN}"
          " AND typeof(runs) = 'integer' AND runs >= 0"
          " AND typeof(owner) IN ('text', 'null') AND typeof(result) IN ('blob', 'null')"
          f" AND {_FINITE} AND {_GOOD_ID} AND {_GOOD_LIFE}"
          " AND (state IN ('pending', 'completed', 'parked') OR (state = 'leased' AND owner IS NOT NULL"
          " AND lease_until IS NOT NULL AND ttl IS NOT NULL)))")
# What claim_next may take (transitions.is_next): a valid row whose token a claim can follow.
_NEXT = f"token < {LAST_TOKEN} AND {_VALID}"
# claim_next's one statement (public: tests read its plan): the first :n candidates of each
# index of _QUEUE as keys (``order.Expired``, ``order.Queued`` with the rowid as the place:
# INSERT OR REPLACE gives a row written later a higher one, so it is the order of queueing),
# merged by ``claimable``. Each probe's WHERE repeats its index's, and INDEXED BY makes a plan
# without it an error rather than a scan.
CLAIM_NEXT_SQL = (
    "SELECT * FROM (SELECT 0, lease_until, 0, job_id FROM tenure_jobs INDEXED BY tenure_jobs_ending"
    f" WHERE state = 'leased' AND {_NOT_SPENT} AND lease_until <= :now AND {_NEXT} ORDER BY lease_until, job_id"
    " LIMIT :n)"
    " UNION ALL SELECT * FROM (SELECT 1, coalesce(queued_at, submitted_at), rowid, job_id FROM tenure_jobs"
    " INDEXED BY tenure_jobs_ready WHERE state = 'pending' AND claimable_at IS NULL"
    f" AND {_NEXT} ORDER BY coalesce(queued_at, submitted_at), rowid LIMIT :n)"
    " UNION ALL SELECT * FROM (SELECT 2, claimable_at, rowid, job_id FROM tenure_jobs INDEXED BY tenure_jobs_scheduled"
    " WHERE state = 'pending' AND claimable_at IS NOT NULL AND claimable_at <= :now"
    f" AND {_NEXT} ORDER BY claimable_at, rowid LIMIT :n)")


def claimable(rows: Iterable[tuple[int, float | None, int, str]], n: int) -> list[str]:
    """The first ``n`` job ids of CLAIM_NEXT_SQL's rows in claim_next's order (``order.ordered``)."""
    parts: tuple[list[Any], list[Any], list[Any]] = ([], [], [])
    for part, at, place, job_id in rows:
        at = -math.inf if at is None else at  # a row with no time (not tenure's): first, as SQL sorts NULL
        parts[part].append(Expired(at, str(job_id)) if part == 0 else Queued(at, place, str(job_id)))
    return list(itertools.islice(order.job_ids(order.ordered(*(sorted(found) for found in parts))), n))


# When the next candidate comes after :now (Backend.next_due): two index seeks.
_DUE_SQL = (
    "SELECT min(at) FROM (SELECT min(lease_until) AS at FROM tenure_jobs INDEXED BY tenure_jobs_ending"
    f" WHERE state = 'leased' AND {_NOT_SPENT} AND lease_until > :now"
    " UNION ALL SELECT min(claimable_at) FROM tenure_jobs INDEXED BY tenure_jobs_scheduled"
    " WHERE state = 'pending' AND claimable_at IS NOT NULL AND claimable_at > :now)")
# How a valid row is judged at :now (transitions.judged), as SQL.
_OVER = "state = 'leased' AND lease_until <= :now"
_STATE_SQL = {
    JobState.PENDING: f"(state = 'pending' AND (claimable_at IS NULL OR claimable_at <= :now) AND {_VALID})",
    JobState.SCHEDULED: f"(state = 'pending' AND claimable_at > :now AND {_VALID})",
    JobState.LEASED: f"(state = 'leased' AND lease_until > :now AND {_VALID})",
    JobState.EXPIRED: f"({_OVER} AND {_NOT_SPENT} AND {_VALID})",
    JobState.PARKED: f"((state = 'parked' OR ({_OVER} AND NOT {_NOT_SPENT})) AND {_VALID})",
    JobState.COMPLETED: f"(state = 'completed' AND {_VALID})",
    JobState.CORRUPT: f"(NOT {_VALID})",
}
# One pass, one class per row: the validity test is evaluated once per row, not per count.
_SUMMARY_SQL = (
    f"SELECT CASE WHEN NOT {_VALID} THEN 'corrupt'"
    f" WHEN {_OVER} THEN CASE WHEN {_NOT_SPENT} THEN 'expired' ELSE 'parked' END"
    " WHEN state = 'leased' AND lease_until <= :soon THEN 'soon'"
    " WHEN state = 'pending' AND claimable_at > :now THEN 'scheduled' ELSE state END AS class,"
    " count(*) FROM tenure_jobs GROUP BY class")


def _of_job(job_id: str | None) -> str:
    """The condition on a table's job_id, only when a job is given: then the planner searches
    the (job_id, id) index, where ``? IS NULL OR job_id = ?`` would scan the whole table."""
    return "" if job_id is None else "job_id = ? AND "


def _job_arg(job_id: str | None) -> tuple[str, ...]:
    return () if job_id is None else (job_id,)
