"""The command the ``run-term`` fault runs under ``tenure run``: a leader that dies of SIGTERM
and two children that ignore it, one of them double-forked into a session of its own.

    python held_command.py EFFECTS_FILE run|exit

Every process appends effects to EFFECTS_FILE, one line each, ``job token pid n``, with one
``write`` on a file opened with O_APPEND: lines never mix and their order in the file is the
order they were written. ``run`` goes on until killed; ``exit`` makes the leader exit 0 after
a moment, leaving its children running (``tenure run`` must stop them before completing).
"""

from __future__ import annotations

import os
import signal
import sys
import time

PERIOD = 0.02  # seconds between one process's effects
LEADER_EFFECTS = 25  # effects before the leader exits in ``exit`` mode


def effects(fd: int, tag: str, limit: int | None = None) -> None:
    n = 0
    while limit is None or n < limit:
        os.write(fd, f"{tag} {os.getpid()} {n}\n".encode())
        n += 1
        time.sleep(PERIOD)


def child(fd: int, tag: str, own_session: bool) -> None:
    """Fork a child that ignores SIGTERM and writes effects until it is killed."""
    if os.fork():
        return
    if own_session:
        os.setsid()
        if os.fork():
            os._exit(0)  # the grandchild is orphaned: tenure run, a subreaper, adopts it
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    effects(fd, tag)
    os._exit(0)


def main() -> None:
    path, mode = sys.argv[1], sys.argv[2]
    tag = f"{os.environ['TENURE_JOB']} {os.environ['TENURE_TOKEN']}"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    child(fd, tag, own_session=False)
    child(fd, tag, own_session=True)
    effects(fd, tag, LEADER_EFFECTS if mode == "exit" else None)


if __name__ == "__main__":
    main()
