"""Suspend, as a holder sees it: its boot clock jumps ahead of its monotonic clock.

A suspended machine or VM stops every process, and CLOCK_MONOTONIC with them; CLOCK_BOOTTIME
keeps counting. The nemesis cannot suspend the machine the run shares, so it does the same to
one worker: it stops the process (SIGSTOP) and, before resuming it, adds the pause to the
worker's *hidden* seconds, which the worker's ``time.monotonic()`` subtracts. On resume the
worker's monotonic clock reads as if no time had passed, exactly as after a suspend, while
its boot clock shows the whole pause. A holder that trusted ``time.monotonic()`` would go on
working under a lease the store gave away meanwhile.

The hidden seconds live in an 8-byte file the worker maps, so it reads them with no system
call and the nemesis writes them while the worker is stopped.
"""

from __future__ import annotations

import mmap
import struct
import time
from pathlib import Path

_FORMAT = "d"


def create(path: Path) -> None:
    path.write_bytes(struct.pack(_FORMAT, 0.0))


def hide(path: Path, seconds: float) -> None:
    """Add ``seconds`` (a pause of the stopped worker) to the time its monotonic clock misses."""
    with path.open("r+b") as f, mmap.mmap(f.fileno(), 8) as m:
        (hidden,) = struct.unpack(_FORMAT, m[:8])
        m[:8] = struct.pack(_FORMAT, hidden + seconds)


def install(path: Path) -> None:
    """In the worker: from now on ``time.monotonic()`` misses every pause hidden in ``path``."""
    with path.open("r+b") as f:
        hidden = mmap.mmap(f.fileno(), 8)  # kept mapped for the life of the process
    real = time.monotonic
    unpack = struct.Struct(_FORMAT).unpack_from

    def monotonic() -> float:
        return real() - unpack(hidden, 0)[0]

    time.monotonic = monotonic
