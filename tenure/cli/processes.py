"""Every process a command started, found, stopped and reaped, even one that left its group.

A command's children can leave its process group (``setsid``, a double fork, a daemon), so
signalling the group does not reach them. On Linux ``subreaper()`` makes this process a child
subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): an orphan among its descendants is re-parented
here instead of to init, so a walk of ``/proc`` from this process finds every process the
command started, whatever group or session it is in. Without ``/proc`` or the prctl (another
system) only what is still below this process in the tree, or in the command's own group, is
found; an orphan re-parented to init is not.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
_DEAD = ("Z", "X")  # a zombie only waits for its parent to reap it: it runs nothing


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    name: str  # the kernel's command name (``comm``), at most 15 characters
    state: str  # R, S, D (uninterruptible: a signal waits until it leaves), T, Z ...
    # Clock ticks after boot when it started (``/proc``'s starttime), None if not known: with
    # the pid it names one process, whose pid may go to another once it is reaped.
    start: int | None = None

    def __str__(self) -> str:
        return f"{self.pid} ({self.name})"

    @property
    def running(self) -> bool:
        return self.state not in _DEAD


def running(pid: int) -> bool:
    """Whether ``pid`` runs now (not a zombie); False without ``/proc``."""
    try:
        return _parse((PROC / str(pid) / "stat").read_text()).running
    except (OSError, ValueError, IndexError):
        return False


@contextlib.contextmanager
def subreaper() -> Iterator[bool]:
    """Adopt this process's orphaned descendants while inside (yields whether it could); the
    previous setting comes back on leaving."""
    prctl = _prctl()
    previous = ctypes.c_int(0)
    if prctl is None or prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(previous), 0, 0, 0) != 0 \
            or prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        yield False
        return
    try:
        yield True
    finally:
        prctl(PR_SET_CHILD_SUBREAPER, previous.value, 0, 0, 0)


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None).prctl  # the C library this Python runs on
        return prctl
    except (OSError, AttributeError):
        return None


def table() -> dict[int, Process]:
    """Every process ``/proc`` shows (empty without ``/proc``)."""
    found: dict[int, Process] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(PROC):
            if entry.name.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    found[int(entry.name)] = _parse(Path(entry.path, "stat").read_text())
    return found


def _parse(stat: str) -> Process:
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split at the last ")".
    head, _, rest = stat.rpartition(")")
    pid, _, name = head.partition(" (")
    fields = rest.split()
    return Process(int(pid), int(fields[1]), name, fields[0], int(fields[19]))  # fields 3 to 22 of stat


def visible() -> bool:
    """Whether ``/proc`` shows processes here (Linux), so descendants can be found."""
    return (PROC / str(os.getpid()) / "stat").exists()


class Descendants:
    """The processes below ``root`` that were not there before: those of the command.

    Children ``root`` already had when this was made (a test runner's servers, say) are left
    out with everything below them."""

    def __init__(self, root: int | None = None) -> None:
        self.root = os.getpid() if root is None else root
        self._before = {p.pid for p in table().values() if p.ppid == self.root}

    def all(self) -> list[Process]:
        """The command's processes, zombies included, parents before children."""
        below: dict[int, list[Process]] = {}
        for p in table().values():
            below.setdefault(p.ppid, []).append(p)
        found: list[Process] = []
        todo = [p for p in below.get(self.root, []) if p.pid not in self._before]
        while todo:
            p = todo.pop()
            found.append(p)
            todo.extend(below.get(p.pid, []))
        return found

    def living(self, reap_except: int | None = None) -> list[Process]:
        """The command's processes that still run; the dead among this process's own children
        are reaped on the way, all but ``reap_except`` (the one ``subprocess`` waits for).

        A walk of ``/proc`` is not one snapshot: a process that exits and is reaped between the
        listing and the read of its stat is missed, and so are its children, read before they
        were re-parented here. So "none left" takes two walks that find none."""
        return self._running(reap_except) or self._running(reap_except)

    def _running(self, reap_except: int | None) -> list[Process]:
        procs = self.all()
        reap(p.pid for p in procs if p.ppid == self.root and not p.running and p.pid != reap_except)
        return [p for p in procs if p.running]


def reap(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def send(procs: Iterable[Process], signum: int) -> None:
    """Signal each process; one that is gone, or another user's, is passed over (it is still
    seen alive, and reported if it outlives the stop).

    A pid read from ``/proc`` goes to another process once its parent reaps it. Where the
    system has pidfds (Linux 5.3+), the process is pinned by one (``os.pidfd_open``) and
    signalled through it only if ``/proc`` then shows the start time that was walked (its
    parent may differ: an orphan is re-parented here); one that started since is passed over.
    Elsewhere (no pidfd, or no start time known) ``os.kill``, which may reach a process that
    took the pid since the walk."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            _signal(p, signum)


def _signal(p: Process, signum: int) -> None:
    pidfd = _pidfd(p)
    if pidfd is None:
        os.kill(p.pid, signum)
        return
    try:
        # Checked after pinning: a process that took the pid later is not the pidfd's.
        if _parse((PROC / str(p.pid) / "stat").read_text()).start == p.start:
            signal.pidfd_send_signal(pidfd, signum)
    except (FileNotFoundError, ValueError, IndexError):
        pass  # gone since it was pinned
    finally:
        os.close(pidfd)


def _pidfd(p: Process) -> int | None:
    """A pidfd of the process that has ``p``'s pid now; None where pidfds cannot be had
    (ProcessLookupError if no process has it)."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if p.start is None or pidfd_open is None or not hasattr(signal, "pidfd_send_signal"):
        return None
    try:
        pidfd: int = pidfd_open(p.pid)
    except (ProcessLookupError, PermissionError):
        raise
    except OSError:  # ENOSYS (a kernel before 5.3), or a sandbox that forbids the call
        return None
    return pidfd


def send_group(pgid: int, signum: int) -> None:
    """Signal a process group, if any of it is left (all a system without ``/proc`` reaches)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)
