"""Stopping every process of a command: a signal first, SIGKILL after the grace period.

``Stop.step`` is called with the processes still alive, again and again until none is: each
new one gets the first signal (and SIGCONT, so a stopped process can act on it), every one
gets SIGKILL from the end of the grace period on, and ``KILL_WAIT`` seconds after that the
ones still alive are given up on (a process in uninterruptible sleep, ``D``, dies only when
it leaves the system call it is in; another user's cannot be signalled).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence

from tenure.cli.processes import Process, send, send_group

KILL_WAIT = 5.0  # seconds SIGKILL gets to end a process before it is reported as unkillable


class Stop:
    def __init__(self, signum: int, grace: float, group: int | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.signum = signum
        self.group = group  # the command's process group, where /proc cannot show its processes
        self._clock = clock
        self.kill_at = clock() + grace
        self.give_up_at = self.kill_at + KILL_WAIT
        self._told: set[int] = set()
        self._killed: set[int] = set()
        self._started = self._killing = False

    def step(self, living: Sequence[Process]) -> list[Process]:
        """Signal what is due now; returns the processes given up on (none while time is left)."""
        now = self._clock()
        if now >= self.kill_at:
            if not self._killing and self.group is not None:
                send_group(self.group, signal.SIGKILL)
            self._killing = True
            new = [p for p in living if p.pid not in self._killed]  # once each: SIGKILL cannot be ignored
            send(new, signal.SIGKILL)
            self._killed.update(p.pid for p in new)
        else:
            if not self._started and self.group is not None:
                send_group(self.group, self.signum)
                send_group(self.group, signal.SIGCONT)
            self._started = True
            new = [p for p in living if p.pid not in self._told]
            send(new, self.signum)
            send(new, signal.SIGCONT)
            self._told.update(p.pid for p in new)
        return list(living) if now >= self.give_up_at else []
