"""Clocks, passed in so that expiry and skew are testable without sleeping.

A worker uses ``monotonic()`` for its safe local deadline; embedded stores use ``time()``
as the store's clock. ``ManualClock`` moves only when a test says so.

Every local deadline tenure trusts (a holder's safe deadline, the renewal schedule, the
etcd and ZooKeeper backends' bounds) is read from ``boot_clock()``, a clock that keeps
counting while the machine or VM is suspended: a holder suspended past its TTL must find its
deadline passed when it wakes. ``time.monotonic()`` stops during suspend on Linux
(CLOCK_MONOTONIC) and during sleep on macOS (``mach_absolute_time``, CPython issue 86273).
"""

from __future__ import annotations

import functools
import math
import sys
import threading
import time
from collections.abc import Callable
from typing import Protocol


def _suspend_proof_clock() -> tuple[Callable[[], float], str]:
    """The platform's clock that counts suspend, and its name for the docs and health."""
    # functools.partial over the C function: a clock read costs no Python frame (it is taken
    # several times in every operation).
    if hasattr(time, "CLOCK_BOOTTIME"):  # Linux: CLOCK_MONOTONIC plus time suspended
        return functools.partial(time.clock_gettime, time.CLOCK_BOOTTIME), "CLOCK_BOOTTIME"
    if sys.platform == "darwin":  # Apple's clock_gettime(3): CLOCK_MONOTONIC increments while asleep
        return functools.partial(time.clock_gettime, time.CLOCK_MONOTONIC), "CLOCK_MONOTONIC (darwin)"
    # Windows, the BSDs: not known to count suspend; docs/protocol.md says so.
    return time.monotonic, "time.monotonic (may stop while suspended)"


# Seconds on this machine's clock that never goes back and counts suspend.
boot_clock, BOOT_CLOCK_NAME = _suspend_proof_clock()


class Clock(Protocol):
    def time(self) -> float:
        """Seconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back and keeps counting while suspended."""
        ...


class SystemClock:
    """The process's wall clock and the machine's suspend-proof ``boot_clock()``."""

    time = staticmethod(time.time)
    monotonic = staticmethod(boot_clock)


class ManualClock:
    """A clock for tests: both readings advance together, only through ``advance``."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def time(self) -> float:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go back")
        with self._lock:
            self._now += seconds


SYSTEM_CLOCK = SystemClock()


def deadline_runs(deadline: float, injected: Clock | None) -> bool:
    """Whether a holder's safe deadline (``Lease.deadline``) is still ahead, so its lease cannot
    have ended by the store's clock and a backend may skip judging expiry (its one-round-trip
    paths). The one place this is decided. ``injected``: the clock a caller gave ``connect``
    (tests), None for the machine's own; deadlines on an injected clock need not follow real
    time, so they vouch for nothing."""
    return injected is None and math.isfinite(deadline) and boot_clock() < deadline
