"""Threads for background work: a pool in which a task never waits long behind tasks that hang
(``ElasticPool``), and one worker that runs renewals before queued claims (``OneWorker``).

``concurrent.futures.ThreadPoolExecutor`` with four workers lets four requests that hang
(a store that stopped answering, up to the backend's timeout) hold up every other task. This
pool runs ``keep`` threads that are not stuck: while tasks wait, ``unstall()`` starts one
more thread for each that has been running one task for ``patience`` seconds (without
``progress()``), up to ``limit``. A burst of quick tasks is absorbed by the threads it has, however long it queues;
threads beyond ``keep`` exit after ``idle_for`` seconds without work.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

log = logging.getLogger("tenure.renewal")
T = TypeVar("T")


class ElasticPool:
    def __init__(self, name: str, *, keep: int, limit: int, patience: float = 0.1,
                 idle_for: float = 10.0) -> None:
        self._name = name
        self._keep = keep
        self._limit = limit
        self._patience = patience
        self._idle_for = idle_for
        self._cond = threading.Condition()
        self._tasks: collections.deque[Callable[[], None]] = collections.deque()
        self._threads = 0
        self._idle = 0
        self._running: dict[int, float] = {}  # thread ident: when it started its current task
        self._numbers = itertools.count(1)
        self._closed = False
        self._warned = False

    @property
    def threads(self) -> int:
        with self._cond:
            return self._threads

    def submit(self, task: Callable[[], None]) -> bool:
        """Run ``task`` soon; False (nothing run) once the pool is closed."""
        with self._cond:
            if self._closed:
                return False
            self._tasks.append(task)
            if self._idle >= len(self._tasks):
                self._cond.notify()
            elif self._threads < self._keep:
                self._start()
            return True

    def unstall(self) -> float | None:
        """Start a thread if tasks wait while threads are stuck; seconds until the next look
        is due (None: nothing queued). The owner calls it whenever it wakes."""
        with self._cond:
            if self._closed or not self._tasks:
                return None
            now = time.monotonic()
            stuck = sum(1 for started in self._running.values() if now - started >= self._patience)
            if self._threads - stuck < self._keep:
                if self._threads < self._limit:
                    self._start()
                elif not self._warned:
                    self._warned = True
                    log.warning("%s: all %d threads are stuck; tasks wait for one", self._name, self._limit)
            return self._patience

    def progress(self) -> None:
        """Called by a task of many requests (a batch of renewals, a request per part) after
        each: it is not stuck, so tasks waiting behind it start no thread yet."""
        with self._cond:
            if threading.get_ident() in self._running:
                self._running[threading.get_ident()] = time.monotonic()

    def _start(self) -> None:
        self._threads += 1
        name = f"{self._name}-{next(self._numbers)}"
        threading.Thread(target=self._work, name=name, daemon=True).start()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._tasks and not self._closed:
                    self._idle += 1
                    woken = self._cond.wait(self._idle_for if self._threads > self._keep else None)
                    self._idle -= 1
                    if not woken and not self._tasks and self._threads > self._keep:
                        self._threads -= 1
                        return
                if self._closed:
                    self._threads -= 1
                    return
                task = self._tasks.popleft()
                self._running[threading.get_ident()] = time.monotonic()
            try:
                task()
            except Exception:  # a task's bug must not take a thread of the pool with it
                log.exception("unexpected error in %s", self._name)
            finally:
                with self._cond:
                    del self._running[threading.get_ident()]

    def close(self) -> None:
        """Drop tasks not started; threads end after the task they run."""
        with self._cond:
            self._closed = True
            self._tasks.clear()
            self._cond.notify_all()


class OneWorker:
    """One thread running calls in the order they came, with the urgent ones first: a renewal
    waits behind the call that runs, never behind the claims of many tasks queued before it
    (``tenure.aio.ThreadedBackend``). Started at the first call; it ends once shut down and
    its queue is drained (calls queued then still run: the caller decides what they do)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._cond = threading.Condition()
        self._urgent: collections.deque[tuple[concurrent.futures.Future[Any], Callable[[], Any]]] = collections.deque()
        self._rest: collections.deque[tuple[concurrent.futures.Future[Any], Callable[[], Any]]] = collections.deque()
        self._thread: threading.Thread | None = None
        self._shut = False

    def submit(self, fn: Callable[[], T], *, urgent: bool = False) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._cond:
            if self._shut:
                raise RuntimeError(f"{self._name} is shut down")
            (self._urgent if urgent else self._rest).append((future, fn))
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()
        return future

    def _work(self) -> None:
        while True:
            with self._cond:
                while not (self._urgent or self._rest or self._shut):
                    self._cond.wait()
                if not (self._urgent or self._rest):
                    return  # shut down, and nothing left
                future, fn = (self._urgent or self._rest).popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to whoever waits
                future.set_exception(exc)

    def shutdown(self) -> None:
        """No more calls; the thread ends after those queued (it may be in one that hangs)."""
        with self._cond:
            self._shut = True
            self._cond.notify_all()
