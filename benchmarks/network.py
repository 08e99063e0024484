"""Delay relays between the benchmarks' clients and servers (benchmarks/relay.py), and what a
round trip through one costs."""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import sys
import threading
import time

from benchmarks.processes import ROOT, LineProcess


class RelayProcess(LineProcess):
    """One relay in its own process, in front of ``target`` (``host:port``)."""

    def __init__(self, target: str) -> None:
        super().__init__(f"relay to {target}", [sys.executable, "-m", "benchmarks.relay", target],
                         {**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
        self.address = f"127.0.0.1:{self.first}"
        self.target = target

    def set_rtt(self, seconds: float) -> None:
        assert self.ask(f"rtt {seconds!r}") == "ok"

    def turns(self) -> int:
        return int(self.ask("turns"))

    def cpu_seconds(self) -> float:
        return float(self.ask("cpu"))


class Network:
    """The relays of one store's server: clients are pointed at ``route(endpoint)``."""

    def __init__(self) -> None:
        self.relays: list[RelayProcess] = []

    def route(self, endpoint: str) -> str:
        """The address to use instead of ``host:port`` (a list separated by commas: each)."""
        routed = []
        for target in endpoint.split(","):
            relay = RelayProcess(target)
            self.relays.append(relay)
            routed.append(relay.address)
        return ",".join(routed)

    def unrouted(self, text: str) -> str:
        """``text`` (a URL) with each relay's address replaced by its server's: no relay."""
        for relay in self.relays:
            text = text.replace(relay.address, relay.target)
        return text

    def set_rtt(self, seconds: float) -> None:
        for relay in self.relays:
            relay.set_rtt(seconds)

    def turns(self) -> int:
        return sum(relay.turns() for relay in self.relays)

    def cpu_seconds(self) -> float:
        return sum(relay.cpu_seconds() for relay in self.relays)

    def close(self) -> None:
        for relay in self.relays:
            relay.close()


class Direct:
    """No relay: the loopback the other benchmarks use."""

    def route(self, endpoint: str) -> str:
        return endpoint


def _echo(server: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn, _ = server.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while data := conn.recv(4096):
                conn.sendall(data)


class EchoLink:
    """An echo server, through a relay of ``net`` (or straight, with ``Direct``): the link alone."""

    def __init__(self, net: Network | Direct) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=_echo, args=(self._server,), daemon=True).start()
        host, _, port = net.route(f"127.0.0.1:{self._server.getsockname()[1]}").rpartition(":")
        self._conn = socket.create_connection((host, int(port)))
        self._conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def pings(self, n: int) -> list[float]:
        """The seconds of each of n 100-byte round trips."""
        samples = []
        for _ in range(n):
            start = time.perf_counter()
            self._conn.sendall(b"x" * 100)
            got = 0
            while got < 100:
                data = self._conn.recv(4096)
                if not data:
                    raise ConnectionError("the echo link closed")
                got += len(data)
            samples.append(time.perf_counter() - start)
        return samples

    def seconds(self, n: int) -> float:
        return sum(self.pings(n))

    def close(self) -> None:
        self._conn.close()
        self._server.close()


def round_trip_seconds(rtt: float | None, n: int) -> list[float]:
    """Each of n 100-byte ping-pongs to an echo server, through a relay set to ``rtt`` seconds
    (``None``: straight over loopback, no relay)."""
    net = Network() if rtt is not None else Direct()
    link = EchoLink(net)
    try:
        if isinstance(net, Network):
            net.set_rtt(rtt or 0.0)
        return link.pings(n)
    finally:
        link.close()
        if isinstance(net, Network):
            net.close()


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000
