"""One kazoo client: its connection state, this client's clock znode and the leader's time
that writing it stamps. Every other module talks to ZooKeeper through a ``Session``, never
through the backend.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable
from typing import TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.security import OPEN_ACL_UNSAFE

from tenure.backends.zookeeper import calls
from tenure.backends.zookeeper import layout as zl
from tenure.backends.zookeeper.calls import Answer, Client, ZkIo
from tenure.backends.zookeeper.config import Config
from tenure.backends.zookeeper.errors import mapped_errors
from tenure.core import io_drivers
from tenure.core.backend import Link
from tenure.core.clock import boot_clock
from tenure.core.errors import BackendUnavailable

T = TypeVar("T")
FRESH = 1.0  # seconds a stamp of the leader's clock serves for ``bound_now``
log = logging.getLogger("tenure.zookeeper")

RATE = 1.1  # the leader's clock may run this much faster than ours over that second


class Session:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.layout = zl.Layout(config.root)
        self.clock_path = f"{self.layout.clocks}/{uuid.uuid4().hex}"
        self._lock = threading.Lock()
        self._link = Link()
        self._last_time = (0.0, boot_clock())  # (store time, our monotonic) of the last stamp
        self._bound: tuple[float, float, int] | None = None  # (store time, our send time, epoch)
        self.last_zxid = 0
        # Tidying running in the background (``tidy``), by what it tidies: whether it is due again.
        self._tidying: dict[str, bool] = {}
        self._tidied = threading.Condition()
        self.client: Client = KazooClient(**config.client_kwargs())
        self.acl = self.client.default_acl or OPEN_ACL_UNSAFE  # of the znodes a multi creates
        self.client.add_listener(self._on_state)
        with mapped_errors("connecting"):
            try:
                self.client.start(timeout=config.timeout)
            except KazooTimeoutError as exc:
                raise BackendUnavailable(f"cannot connect to ZooKeeper at {config.hosts} within "
                                         f"{config.timeout:g}s") from exc

    # -- connection ----------------------------------------------------------------------
    def _on_state(self, state: str) -> None:
        # Called on kazoo's connection thread: only bookkeeping here, never a request.
        with self._lock:
            link = self._link
            if state == KazooState.SUSPENDED:
                self._link = Link(link.epoch + 1, False, link.lost_epoch)
            elif state == KazooState.LOST:
                self._link = Link(link.epoch + 1, False, link.epoch + 1)
            else:
                self._link = Link(link.epoch, True, link.lost_epoch)

    def link(self) -> Link:
        with self._lock:
            return self._link

    def wait(self, answer: Answer[T]) -> T:
        return answer.get(timeout=self.config.timeout)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing is best effort and idempotent
            self.client.stop()
            self.client.close()

    # -- tidying ------------------------------------------------------------------------------
    def tidy(self, what: str, io: Callable[[], ZkIo[None]]) -> None:
        """Run ``io()`` in the background (``calls.detached``): tidying that the request it
        follows must not wait for. An audit trim inline held a renewal's answer for 18 s on a
        loaded machine, and the leases it renewed were lost meanwhile. One per ``what`` at a
        time; due again while it runs, it runs once more after."""
        with self._tidied:
            if what in self._tidying:
                self._tidying[what] = True
                return
            self._tidying[what] = False
        self._start_tidying(what, io)

    def _start_tidying(self, what: str, io: Callable[[], ZkIo[None]]) -> None:
        def ended(error: BaseException | None) -> None:
            if error is not None:  # tidying only: the next one does it
                log.info("tidying %s failed: %s", what, error)
            with self._tidied:
                again = self._tidying.pop(what)
                if again:
                    self._tidying[what] = False
                else:
                    self._tidied.notify_all()
            if again:
                self._start_tidying(what, io)

        calls.detached(io(), ended)

    def settled(self, timeout: float) -> bool:
        """Wait until no tidying runs; False if some still did after ``timeout`` seconds."""
        with self._tidied:
            return self._tidied.wait_for(lambda: not self._tidying, timeout)

    # -- the leader's clock ------------------------------------------------------------------
    def run(self, io: ZkIo[T]) -> T:
        """``io`` (``calls``), waited for in this thread with the session's timeout (``calls.run``
        without its frame and a lambda per wait)."""
        return io_drivers.run(io, self.wait)

    def clock_creating(self) -> ZkIo[None]:
        with mapped_errors("creating the clock znode"), contextlib.suppress(NodeExistsError):
            yield self.client.create_async(self.clock_path, b"", ephemeral=True)

    def with_clock(self, attempt: Callable[[bool], ZkIo[T | None]]) -> ZkIo[T]:
        """``attempt(first)``, which writes our clock znode and answers None when it found it
        gone (with an expired session); once more after creating it again."""
        for first in (True, False):
            found = yield from attempt(first)
            if found is not None:
                return found
            yield from self.clock_creating()
        raise BackendUnavailable("ZooKeeper keeps losing this client's clock znode")

    def stamp(self, stat: ZnodeStat, sent: float | None = None) -> float:
        """The leader's clock from a write of our clock znode; ``sent``: our monotonic time
        before that write was sent, which makes it a bound (``bound``)."""
        now = float(stat.mtime) / 1000.0
        with self._lock:
            self._last_time = (now, boot_clock())
            self.last_zxid = int(stat.mzxid)
            if sent is not None:
                self._bound = (now, sent, int(stat.mzxid) >> 32)
        return now

    def bound_now(self) -> tuple[float, int, bool] | None:
        """An upper bound of the leader's clock now, without a request: the last stamp plus our
        monotonic time since its write was sent, with room for the leader's clock running
        ``RATE`` times as fast; its epoch; and whether the stamp is old enough to take a new
        one. None when the stamp is older than ``FRESH`` (the bound would grow loose)."""
        with self._lock:
            bound = self._bound
        if bound is None:
            return None
        at, sent, epoch = bound
        elapsed = boot_clock() - sent
        return None if elapsed > FRESH else (at + elapsed * RATE, epoch, elapsed > FRESH / 2)

    def stamping(self) -> ZkIo[tuple[float, int]]:
        def attempt(_: bool) -> ZkIo[tuple[float, int] | None]:
            sent = boot_clock()
            with mapped_errors("reading the store's clock"):
                try:
                    stat = yield self.client.set_async(self.clock_path, b"")
                except NoNodeError:
                    return None
            return self.stamp(stat, sent), stat.mzxid >> 32

        return (yield from self.with_clock(attempt))

    def now(self) -> float:
        """The leader's clock now, from a write of our clock znode."""
        return self.run(self.stamping())[0]

    def estimated_now(self) -> float:
        """The last store time read plus our monotonic time since: for display, never decisions."""
        with self._lock:
            at, mono = self._last_time
        return at + boot_clock() - mono
