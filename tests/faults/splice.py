"""A loopback TCP listener that joins each connection it accepts to a new one to a target.

What the fault proxy (tests/faults/proxy.py) and the benchmarks' delay relay
(benchmarks/relay.py) share: each subclass says, in ``join``, what flows between the two.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class Splice:
    def __init__(self, target: tuple[str, int], name: str) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._closed = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name=f"{name}-{self.port}", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def admits(self) -> bool:
        """Whether a new connection is joined to the target (or closed at once)."""
        return True

    def join(self, client: socket.socket, server: socket.socket) -> None:
        """Start moving bytes between the two; ``release`` them when either side ends."""
        raise NotImplementedError

    def connections(self) -> list[socket.socket]:
        with self._lock:
            return list(self._conns)

    def release(self, *sockets: socket.socket) -> None:
        with self._lock:
            self._conns.difference_update(sockets)
        for s in sockets:
            close_quietly(s)

    def close(self) -> None:
        self._closed = True
        for s in self.connections():
            close_quietly(s)
        close_quietly(self._listener)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            if not self.admits():
                close_quietly(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=2)
            except OSError:  # the server is down: so is the connection through us
                close_quietly(client)
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.settimeout(None)
            with self._lock:
                self._conns.update((client, server))
            self.join(client, server)


def close_quietly(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
