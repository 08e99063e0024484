"""The one clock every process of a run agrees on, whatever ``faketime`` does to it.

Worker processes may run under Debian's ``faketime``, which fakes ``time.time()`` *and*
``time.monotonic()`` through libc. The history must still be ordered in real time, so it
reads CLOCK_MONOTONIC with a raw system call, which the preloaded library does not see.
"""

from __future__ import annotations

import ctypes
import os
import platform
import time

_SYS_CLOCK_GETTIME = {"x86_64": 228, "aarch64": 113}.get(platform.machine())
_CLOCK_MONOTONIC = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


_libc = ctypes.CDLL(None, use_errno=True)


def true_now() -> float:
    """Seconds on the machine's monotonic clock, the same in every process of the machine."""
    if _SYS_CLOCK_GETTIME is None:  # no syscall number known: faketime runs are not supported
        return time.monotonic()
    ts = _Timespec()
    if _libc.syscall(_SYS_CLOCK_GETTIME, _CLOCK_MONOTONIC, ctypes.byref(ts)) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return ts.sec + ts.nsec / 1e9
