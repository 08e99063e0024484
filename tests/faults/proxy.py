"""A loopback TCP proxy whose behaviour changes at run time: the network faults of the suite.

Modes: ``pass``; ``delay`` (each chunk waits ``delay`` seconds, order kept); ``blackhole``
(bytes are read and thrown away, connections stay open, so clients see only timeouts);
``drop`` (every connection is reset and new ones are closed at once). One proxy per worker
and server lets a fault cut off one worker while the others still reach the store.
"""

from __future__ import annotations

import socket
import threading
import time

from tests.faults.splice import Splice, close_quietly

CHUNK = 65536


class Proxy(Splice):
    def __init__(self, target: tuple[str, int]) -> None:
        self.mode = "pass"
        self.delay = 0.0
        super().__init__(target, "proxy")

    def set(self, mode: str, delay: float = 0.0) -> None:
        assert mode in ("pass", "delay", "blackhole", "drop"), mode
        self.mode, self.delay = mode, delay
        if mode == "drop":
            for s in self.connections():
                close_quietly(s)

    def admits(self) -> bool:
        return self.mode != "drop"

    def join(self, client: socket.socket, server: socket.socket) -> None:
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
            self.release(src, dst)

    def close(self) -> None:
        self.set("drop")
        super().close()
