"""A loopback TCP proxy whose behaviour changes at run time: the network faults of the suite.

Modes: ``pass``; ``delay`` (each chunk waits ``delay`` seconds, order kept); ``blackhole``
(bytes are read and thrown away, connections stay open, so clients see only timeouts);
``drop`` (every connection is reset and new ones are closed at once). One proxy per worker
and server lets a fault cut off one worker while the others still reach the store.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

CHUNK = 65536


class Proxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.mode = "pass"
        self.delay = 0.0
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._closed = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name=f"proxy-{self.port}", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def set(self, mode: str, delay: float = 0.0) -> None:
        assert mode in ("pass", "delay", "blackhole", "drop"), mode
        with self._lock:
            self.mode, self.delay = mode, delay
            doomed = list(self._conns) if mode == "drop" else []
        for s in doomed:
            _close(s)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            if self.mode == "drop":
                _close(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=2)
            except OSError:  # the server is down: so is the connection through us
                _close(client)
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.settimeout(None)
            with self._lock:
                self._conns.update((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(CHUNK)
                if not data:
                    break
                mode, delay = self.mode, self.delay
                if mode == "blackhole":
                    continue
                if mode == "delay":
                    time.sleep(delay)
                if self.mode == "drop":
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
            _close(src)
            _close(dst)

    def close(self) -> None:
        self._closed = True
        self.set("drop")
        _close(self._listener)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
