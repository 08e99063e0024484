"""One shared view of a store for everyone who looks at it: dashboard sessions, metrics scrapes.

Every query goes through ``Snapshot``: a result read from the store is kept for ``max_age``
seconds and handed to every caller that asks for the same thing meanwhile, and callers that
ask at the same moment wait for one read (single flight). N browser sessions on one
dashboard server therefore cost the store the reads of one.

Where the backend has a native watch (etcd, ZooKeeper, PostgreSQL), a ``Mirror`` keeps every
job current from ``store.watch()`` in a background thread; counts, pages and single jobs are
then computed from memory (``tenure.core.queries``, the same code as the backends' defaults)
and cost the store nothing per refresh. History and the audit are always read from the store,
cached like the rest: a watch does not carry history, and the audit's retention is the store's.
Until the mirror has seen every job, and whenever its watch fails, queries go to the store.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

from tenure.core import queries, store_rules
from tenure.core.backend import Backend
from tenure.core.clock import SYSTEM_CLOCK, Clock
from tenure.core.errors import InvalidArgument, LeaseError, quoted
from tenure.core.records import HistoryEvent, JobPage, JobState, JobStatus, Rejection, Summary
from tenure.core.store import Store
from tenure.core.store_rules import MAX_PAGE

log = logging.getLogger("tenure.snapshot")
T = TypeVar("T")
HELD_CAP = 5_000  # leases read for the per-worker and stuck views, soonest expiry first
_STALE_ENTRIES = 10  # cached entries older than this many max_age are dropped
MAX_RETRY_WAIT = 120.0  # seconds between starts of a mirror's watch that keeps failing
# A mirror holds every job in the server's memory, and some watches cost the store per job
# (ZooKeeper's sets a data watch on each job znode: at 100,000 jobs its session drowned in
# them). Above this many jobs the snapshot reads the store instead, once per interval.
MIRROR_LIMIT = 50_000


def has_native_watch(backend: Backend) -> bool:
    """True where the backend overrides ``watch()`` (the default polls every job)."""
    return type(backend).watch is not Backend.watch


class Snapshot:
    """The store as operators see it, read at most once per ``max_age`` seconds per query.

    ``follow``: keep a mirror of every job from the store's watch; None (the default) follows
    where the backend has a native watch, and only while the store holds at most ``mirror_limit``
    jobs when the mirror starts. ``background``: once a query has a result, answer it
    at once and read it again in a background thread when it is older than ``max_age`` (a
    page then never waits for a slow store; what it shows is at most one read behind).
    Thread-safe.
    """

    def __init__(self, store: Store, *, max_age: float, follow: bool | None = None,
                 background: bool = False, mirror_limit: int = MIRROR_LIMIT,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        if isinstance(max_age, bool) or not isinstance(max_age, (int, float)) or not 0 <= max_age <= 3600:
            raise InvalidArgument(f"max_age must be from 0 to 3600 seconds, got {quoted(max_age)}")
        self.store = store
        self.max_age = float(max_age)
        self.clock = clock
        self.background = background
        self._lock = threading.Lock()
        self._rereading: set[Hashable] = set()
        self._cache: dict[Hashable, tuple[float, Any]] = {}
        self._flights: dict[Hashable, threading.Lock] = {}
        wanted = has_native_watch(store.backend) if follow is None else follow
        self.mirror = Mirror(store, max(self.max_age, 0.5), mirror_limit) if wanted else None

    # -- the cache -------------------------------------------------------------------------
    def _cached(self, key: Hashable, read: Callable[[], T]) -> T:
        if self.background:
            with self._lock:
                hit = self._cache.get(key)
                age = None if hit is None else self.clock.monotonic() - hit[0]
                if age is not None and age >= self.max_age * _STALE_ENTRIES:
                    hit = None  # nobody asked for a long while: too old to show, read it now
                start = hit is not None and age is not None and age >= self.max_age \
                    and key not in self._rereading
                if start:
                    self._rereading.add(key)
            if hit is not None:
                if start:
                    threading.Thread(target=self._reread, args=(key, read), daemon=True,
                                     name="tenure-snapshot-read").start()
                value: T = hit[1]
                return value
        return self._read_once(key, read)

    def _reread(self, key: Hashable, read: Callable[[], object]) -> None:
        try:
            self._read_once(key, read)
        except Exception:  # the next page asking reads it itself, and shows the error
            log.warning("reading %r for the snapshot failed", key, exc_info=True)
            with self._lock:
                self._cache.pop(key, None)
        finally:
            with self._lock:
                self._rereading.discard(key)

    def _read_once(self, key: Hashable, read: Callable[[], T]) -> T:
        with self._lock:
            flight = self._flights.setdefault(key, threading.Lock())
        with flight:  # one read per key at a time; the others wait and take its result
            now = self.clock.monotonic()
            with self._lock:
                hit = self._cache.get(key)
            if hit is not None and now - hit[0] < self.max_age:
                value: T = hit[1]
                return value
            value = read()
            with self._lock:
                self._cache[key] = (self.clock.monotonic(), value)
                self._forget_old(now)
            return value

    def _forget_old(self, now: float) -> None:
        horizon = now - max(self.max_age, 1.0) * _STALE_ENTRIES
        for key in [k for k, (at, _) in self._cache.items() if at < horizon]:
            del self._cache[key]
            self._flights.pop(key, None)

    def _mirrored(self) -> Mirror | None:
        return self.mirror if self.mirror is not None and self.mirror.ready() else None

    # -- queries -----------------------------------------------------------------------------
    def now(self) -> float:
        """The store's clock, read once per ``max_age`` and advanced by ours in between."""
        read_at, store_now = self._cached("now", lambda: (self.clock.monotonic(), self.store.now()))
        return store_now + (self.clock.monotonic() - read_at)

    def summary(self, soon: float = 30.0) -> Summary:
        mirror = self._mirrored()
        if mirror is None:
            return self._cached(("summary", soon), lambda: self.store.summary(soon))
        now = self.now()
        hour = len(self.rejections(3600.0))
        return self._cached(("summary", soon, "mirror"),
                            lambda: queries.summarize(mirror.jobs(), now, float(soon), hour))

    def page(self, *, states: Iterable[JobState | str] | None = None, job: str | None = None,
             owner: str | None = None, order: str = "expiry", offset: int = 0, limit: int = 50) -> JobPage:
        """``Store.page``, validated alike."""
        args = store_rules.page(states, job, owner, order, offset, limit)
        mirror = self._mirrored()
        if mirror is None:
            return self._cached(("page", args), lambda: self.store.page(
                states=args[0], job=args[1], owner=args[2], order=args[3], offset=args[4], limit=args[5]))
        now = self.now()
        return self._cached(("page", args, "mirror"), lambda: queries.select_page(mirror.jobs(), now, *args))

    def get(self, job_id: str) -> JobStatus | None:
        mirror = self._mirrored()
        if mirror is not None:
            return mirror.get(job_id)
        return self._cached(("get", job_id), lambda: self.store.get(job_id))

    def held(self, cap: int = HELD_CAP) -> list[JobStatus]:
        """Leased and expired-unclaimed jobs, soonest expiry first, at most ``cap`` of them."""
        found: list[JobStatus] = []
        while len(found) < cap:
            page = self.page(states=[JobState.LEASED, JobState.EXPIRED], order="expiry", offset=len(found),
                             limit=min(MAX_PAGE, cap - len(found)))
            found += page.jobs
            if not page.jobs or len(found) >= page.total:
                break
        return found

    def rejections(self, window: float | None, limit: int | None = None,
                   job_id: str | None = None) -> list[Rejection]:
        """Audited rejections of the last ``window`` seconds (None: all kept), oldest first."""
        def read() -> list[Rejection]:
            since = None if window is None else self.store.now() - window
            return self.store.rejections(since=since, limit=limit, job_id=job_id)
        return self._cached(("rejections", window, limit, job_id), read)

    def history(self, window: float | None = None, job_id: str | None = None) -> list[HistoryEvent]:
        """Accepted changes of the last ``window`` seconds (None: all kept), oldest first."""
        def read() -> list[HistoryEvent]:
            since = None if window is None else self.store.now() - window
            return self.store.history(job_id, since=since)
        return self._cached(("history", window, job_id), read)

    def health(self) -> dict[str, Any]:
        return self._cached("health", self.store.health)

    def close(self) -> None:
        if self.mirror is not None:
            self.mirror.close()


class Mirror:
    """Every job, kept current from ``store.watch()`` by a daemon thread.

    Ready once it holds as many jobs as the store had when it started, or once the watch has
    been quiet for ``quiet`` seconds after its first job (jobs removed meanwhile). A watch
    that fails is started again after ``quiet`` seconds; the mirror is not ready meanwhile.
    """

    def __init__(self, store: Store, quiet: float, limit: int = MIRROR_LIMIT) -> None:
        self._store = store
        self._quiet = quiet
        self._limit = limit
        self.declined = False  # the store held more than ``limit`` jobs: no mirror
        self._lock = threading.Lock()
        self._jobs: dict[str, JobStatus] = {}
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tenure-snapshot-mirror", daemon=True)
        self._thread.start()

    def ready(self) -> bool:
        return self._ready.is_set()

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def jobs(self) -> list[JobStatus]:
        with self._lock:
            return list(self._jobs.values())

    def get(self, job_id: str) -> JobStatus | None:
        with self._lock:
            return self._jobs.get(job_id)

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set() and not self.declined:
            try:
                self._follow()
            except LeaseError as exc:
                log.warning("the snapshot's watch stopped (%s: %s); reading the store directly for now",
                            type(exc).__name__, exc)
            except Exception:  # a record or a library that failed: keep the dashboard serving
                log.exception("the snapshot's watch failed; reading the store directly for now")
            failures = 0 if self._ready.is_set() else failures + 1
            self._ready.clear()
            # Each start lists every job: a watch that keeps failing must not keep the store busy.
            self._stop.wait(min(MAX_RETRY_WAIT, self._quiet * 2 ** failures))

    def _follow(self) -> None:
        expected = self._store.page(limit=1).total
        if expected > self._limit:
            log.info("%d jobs, more than the %d a snapshot mirrors: reading the store instead",
                     expected, self._limit)
            self.declined = True
            return
        with self._lock:
            self._jobs.clear()
        if expected == 0:
            self._ready.set()
        quiet_timer: threading.Timer | None = None
        try:
            for change in self._store.watch(self._stop, interval=self._quiet):
                with self._lock:
                    if change.job is not None:
                        self._jobs[change.job.job_id] = change.job
                    elif change.removed is not None:
                        self._jobs.pop(change.removed, None)
                    count = len(self._jobs)
                if self._ready.is_set():
                    continue
                if count >= expected:
                    self._ready.set()
                else:  # the watch's first listing may end below ``expected``: jobs removed since
                    if quiet_timer is not None:
                        quiet_timer.cancel()
                    quiet_timer = threading.Timer(self._quiet, self._ready.set)
                    quiet_timer.daemon = True
                    quiet_timer.start()
        finally:
            if quiet_timer is not None:
                quiet_timer.cancel()
