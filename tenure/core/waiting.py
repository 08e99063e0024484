"""The pauses of a blocking claim (``claim(..., wait=)``, ``claim_next(..., wait=)``).

Between attempts a waiting claim sleeps until the store's watch reports a change (a release,
a completion, a new job), the lease it ran into is due to end, or a backoff delay passes,
whichever comes first. Backends with a native watch (etcd, ZooKeeper) wake it at once; the
others (memory, SQLite) are polled, starting at 50 ms and doubling up to one second, so an
idle waiter costs the store about one claim attempt a second.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from types import TracebackType

from tenure.core.backend import Backend
from tenure.core.errors import InvalidArgument

log = logging.getLogger("tenure.waiting")

FIRST_DELAY = 0.05
MAX_POLL_DELAY = 1.0  # without a watch: also how late an expiry nobody announces is noticed
MAX_WATCH_DELAY = 2.0  # with a watch: a fallback for changes a watch does not report (expiry)
WATCH_INTERVAL = 0.5  # how often the watch thread looks at its stop flag


def seconds(wait: object) -> float:
    """A validated wait: None and 0 mean "do not wait"."""
    if wait is None:
        return 0.0
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait < math.inf:
        raise InvalidArgument(f"wait must be a non-negative number of seconds, got {wait!r}")
    return float(wait)


def has_native_watch(backend: Backend) -> bool:
    """Whether the backend overrides the polling watch with one the store pushes."""
    return type(backend).watch is not Backend.watch


class Waiter:
    """Paces the attempts of one blocking claim; use it as a context manager."""

    def __init__(self, backend: Backend, wait: float) -> None:
        # The wait is the caller's real time (like the sleeps between attempts), not the
        # store's clock: an injected test clock must not stretch or shrink it.
        self._backend = backend
        self._end = time.monotonic() + wait
        self._delay = FIRST_DELAY
        self._woken = threading.Event()
        self._stop = threading.Event()
        self._watching = False
        self._native = has_native_watch(backend)

    def pause(self, due_in: float | None = None) -> bool:
        """Sleep before the next attempt; False once the wait is over (do not try again).

        ``due_in``: seconds until the obstacle ends by itself (a lease's expiry), if known.
        """
        remaining = self._end - time.monotonic()
        if remaining <= 0:
            return False
        if self._native and not self._watching:
            self._start_watch()
        if self._native:  # changes are announced: sleep until the lease is due, or the cap
            timeout = min(MAX_WATCH_DELAY, self._delay if due_in is None else max(due_in, FIRST_DELAY))
        else:  # a release is seen only by trying: back off, but not past the lease's end
            timeout = self._delay if due_in is None else min(self._delay, max(due_in, FIRST_DELAY))
        timeout = min(timeout, remaining)
        self._woken.wait(timeout)
        self._woken.clear()
        self._delay = min(self._delay * 2, MAX_WATCH_DELAY if self._native else MAX_POLL_DELAY)
        return True

    def _start_watch(self) -> None:
        self._watching = True
        threading.Thread(target=self._follow, name="tenure-claim-wait", daemon=True).start()

    def _follow(self) -> None:
        try:
            for _ in self._backend.watch(self._stop, WATCH_INTERVAL):
                self._woken.set()
        except Exception as exc:  # the backoff goes on without it; a closed store ends it too
            if not self._stop.is_set():
                log.info("watch for a waiting claim ended: %s", exc)

    def __enter__(self) -> Waiter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._woken.set()
