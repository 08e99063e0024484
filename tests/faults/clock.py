"""The one clock every process of a run agrees on, whatever ``faketime`` does to it.

Worker processes may run under Debian's ``faketime``, which fakes ``time.time()`` *and*
``time.monotonic()`` through libc. The history must still be ordered in real time, so it
reads CLOCK_MONOTONIC with a raw system call, which the preloaded library does not see
(the reader the SQLite store's clock uses for CLOCK_BOOTTIME).
"""

from __future__ import annotations

import time

from tenure.backends.sqlite_clock import kernel_clock

_CLOCK_MONOTONIC = 1

# No system call number known for this machine: faketime runs are not supported there.
_read = kernel_clock(_CLOCK_MONOTONIC) or time.monotonic


def true_now() -> float:
    """Seconds on the machine's monotonic clock, the same in every process of the machine."""
    return _read()
