"""Free loopback ports for test servers and proxies."""

from __future__ import annotations

import os
import socket
import threading


def _worker_slot() -> tuple[int, int]:
    """(this pytest-xdist worker's index, the number of workers); (0, 1) outside xdist."""
    name, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if name.startswith("gw") and name[2:].isdigit() and count.isdigit() and int(count) > 0:
        return int(name[2:]) % int(count), int(count)
    return 0, 1


# Ports this process handed out: the kernel may offer a port again once its socket is closed,
# and a cluster given one port twice does not start ("initial cluster ... has duplicate url").
_given: set[int] = set()
_lock = threading.Lock()


def free_port() -> int:
    """A port nothing listens on now; the kernel does not hand it out again soon.

    A server binds its port a while after this returns (a JVM takes a second): the kernel could
    hand the same port to another test process meanwhile. Each pytest-xdist worker therefore
    takes only ports of its own class: ``port // 2`` modulo the number of workers is its index
    (not ``port`` itself: Linux hands out odd ports to ``bind()``, keeping even ones for
    ``connect()``).
    """
    index, count = _worker_slot()
    for _ in range(1000):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        with _lock:
            if port // 2 % count == index and port not in _given:
                _given.add(port)
                return port
    raise RuntimeError(f"the kernel offered no free port of worker class {index} of {count}")
