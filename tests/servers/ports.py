"""Free loopback ports for test servers and proxies."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now; the kernel does not hand it out again soon."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
