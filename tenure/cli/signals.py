"""Signals a command catches while it claims, so an interrupted claim never leaves a lease behind.

Ctrl-C that lands while a claim is on its way to the store would otherwise end the process
after the store granted the lease but before anyone learnt its token: the job stays blocked
for a whole TTL. While ``Interrupts.catching()`` runs, SIGINT, SIGTERM, SIGHUP and SIGQUIT are
only noted; ``claim`` waits in short slices so a signal ends the wait promptly, and gives back a
lease that was granted after the signal came.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TypeVar

import tenure

CAUGHT = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
WAIT_SLICE = 0.5  # a blocking claim is made of waits this long, so a signal ends it promptly
T = TypeVar("T")


class Interrupts:
    """The first of ``CAUGHT`` to arrive, kept in ``signalled``."""

    def __init__(self) -> None:
        self.signalled: int | None = None
        self.announce: str | None = None  # printed on stderr if a claim has to wait, once

    @contextlib.contextmanager
    def catching(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # only the main thread may set handlers (a command called in-process)
            return
        previous = {signum: signal.signal(signum, self._caught) for signum in CAUGHT}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _caught(self, signum: int, frame: FrameType | None) -> None:
        if self.signalled is None:
            self.signalled = signum

    def claim(self, attempt: Callable[[float | None], T | None], wait: float,
              give_back: Callable[[T], None]) -> T | None:
        """``attempt(wait)`` until it gives a lease, ``wait`` seconds are over or a signal came.

        An attempt that finds nothing (None) or a job held by another (AlreadyClaimed) is tried
        again while time is left; after that it is the answer. A lease granted after a signal
        is handed to ``give_back`` and None returned."""
        end = time.monotonic() + wait
        first = True  # tried without blocking: a claim that needs no wait says nothing of one
        while self.signalled is None:
            remaining = end - time.monotonic()
            try:
                got = attempt(None if first or remaining <= 0 else min(remaining, WAIT_SLICE))
            except tenure.AlreadyClaimed:
                if remaining <= 0 and self.signalled is None:
                    raise
                first = self._waiting(first)
                continue
            if self.signalled is not None:
                if got is not None:
                    give_back(got)  # the signal came while the claim was on its way
                return None
            if got is not None or remaining <= 0:
                return got
            first = self._waiting(first)
        return None

    def _waiting(self, first: bool) -> bool:
        if first and self.announce:
            print(self.announce, file=sys.stderr, flush=True)
        return False
