"""The SQLite store's clock: the machine's boot clock, the same in every process that opens it.

Every process on one machine reads the same kernel clock, so a worker whose wall clock is
skewed (``faketime``, a stepped clock) can neither steal a live lease nor keep a dead one.
On Linux the clock is CLOCK_BOOTTIME read with a raw system call: nanoseconds (``/proc/uptime``
moves in 10 ms steps), counting suspend, and out of reach of libraries preloaded to fake
``clock_gettime`` in one process. A process in a time namespace reads its namespace's boot
clock; its offset (``/proc/self/timens_offsets``) is taken off, so it reads the machine's.

What no process can share: the boot clock of another machine. A database on a network
filesystem is refused (SQLite's WAL mode does not work there either, and two machines would
each judge leases by their own clock).
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tenure.core.clock import boot_clock
from tenure.core.errors import InvalidArgument

RESOLUTION = 1e-6  # epoch seconds as a float near 1.7e9 keep about a quarter microsecond
_CLOCK_BOOTTIME = 7
_SYS_CLOCK_GETTIME = {"x86_64": 228, "aarch64": 113}.get(platform.machine())
# Filesystems whose files other machines (or a VM's host) can open: their boot clocks differ.
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "9p", "virtiofs", "afs", "ceph", "glusterfs",
    "lustre", "gpfs", "ocfs2", "gfs2", "fuse.sshfs", "fuse.glusterfs", "fuse.s3fs", "fuse.rclone",
    "fuse.gcsfuse", "fuse.juicefs", "fuse.cephfs", "fuse.davfs", "davfs", "fuse.vmhgfs-fuse",
    "vboxsf", "prl_fs", "beegfs", "orangefs", "pvfs2",
})


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


def kernel_clock(clock_id: int) -> Callable[[], float] | None:
    """A reader of ``clock_id`` in seconds by the ``clock_gettime`` system call itself (no
    preloaded fake can move it), or None where that is not available (not Linux, an unknown
    architecture)."""
    if not sys.platform.startswith("linux") or _SYS_CLOCK_GETTIME is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    number, byref = _SYS_CLOCK_GETTIME, ctypes.byref

    def read() -> float:
        # A timespec per call: ctypes lets go of the GIL during the call, so one shared by
        # threads could be read half-written by another thread's call (seconds of one, nanos
        # of the other).
        ts = _Timespec()
        if syscall(number, clock_id, byref(ts)) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        return float(ts.sec + ts.nsec / 1e9)

    try:
        read()
    except OSError:
        return None
    return read


def timens_boottime_offset(path: str = "/proc/self/timens_offsets") -> float:
    """How far this process's time namespace moves CLOCK_BOOTTIME (0 outside one)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return 0.0  # no time namespaces in this kernel (or no /proc): nothing moved
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0] in ("boottime", str(_CLOCK_BOOTTIME)):
            return int(fields[1]) + int(fields[2]) / 1e9
    return 0.0


def boot_id(path: str = "/proc/sys/kernel/random/boot_id") -> str | None:
    """The kernel's name for this boot, the same in every process and container of it."""
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def filesystem_type(path: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The type of the filesystem holding ``path`` (its directory), or None if unknown."""
    try:
        lines = Path(mountinfo).read_text().splitlines()
    except OSError:
        return None
    where = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    best, kind = -1, None
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if not sep or len(fields) < 5 or not rest:
            continue
        mount = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
        inside = where == mount or where.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) > best:
            best, kind = len(mount), rest[0]
    return kind


def refuse_network_filesystem(path: str, mountinfo: str = "/proc/self/mountinfo") -> None:
    kind = filesystem_type(path, mountinfo)
    if kind in NETWORK_FILESYSTEMS or (kind or "").split(".")[0] in NETWORK_FILESYSTEMS:
        raise InvalidArgument(
            f"SQLite store {path} is on a {kind} filesystem: processes on other machines would open "
            "it with another boot clock (and SQLite's WAL needs shared memory on one machine); "
            "use a local path, or etcd, ZooKeeper or PostgreSQL for workers on several machines")


class MachineClock:
    """The machine's boot clock as epoch seconds; immune to per-process wall-clock fakes.

    ``offset`` (epoch seconds at boot) is fixed once per boot and shared through the database.
    """

    def __init__(self, *, boot_id_path: str = "/proc/sys/kernel/random/boot_id",
                 reader: Callable[[], float] | None = None, namespace_offset: float | None = None) -> None:
        self.offset = 0.0
        self.boot_id = boot_id(boot_id_path)
        raw = kernel_clock(_CLOCK_BOOTTIME) if reader is None else reader
        # Without a raw system call: the process's own suspend-proof clock (a preloaded fake
        # could move it; see docs/protocol.md).
        self._read = raw or boot_clock
        self._shift = timens_boottime_offset() if namespace_offset is None else namespace_offset
        self.resolution = RESOLUTION

    def uptime(self) -> float:
        """Seconds on the machine's boot clock (this process's time namespace taken off)."""
        return self._read() - self._shift

    def time(self) -> float:
        return self._read() - self._shift + self.offset  # uptime() + offset: read on every operation

    def monotonic(self) -> float:
        return self.uptime()

    def epoch_offset(self) -> float:
        """This process's estimate of the wall clock at boot (what a first opener stores)."""
        return time.time() - self.uptime()

    def close(self) -> None:
        """Nothing held open; kept so that closing the backend reads the same for every clock."""
