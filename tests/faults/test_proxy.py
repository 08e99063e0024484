"""The fault proxy does what each mode says, or the network faults would prove nothing."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.faults.proxy import Proxy


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    server = socket.create_server(("127.0.0.1", 0))

    def echo() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=conn: [c.sendall(d) for d in iter(lambda: c.recv(1024), b"")],
                             daemon=True).start()

    threading.Thread(target=echo, daemon=True).start()
    p = Proxy(server.getsockname())
    yield p
    p.close()
    server.close()


def _roundtrip(p: Proxy, timeout: float = 2.0) -> bytes:
    with socket.create_connection(("127.0.0.1", p.port), timeout=timeout) as s:
        s.sendall(b"ping")
        return s.recv(1024)


def test_pass_forwards(proxy: Proxy) -> None:
    assert _roundtrip(proxy) == b"ping"


def test_delay_delays(proxy: Proxy) -> None:
    proxy.set("delay", 0.3)
    started = time.monotonic()
    assert _roundtrip(proxy) == b"ping"
    assert time.monotonic() - started >= 0.5  # both directions wait


def test_blackhole_answers_nothing(proxy: Proxy) -> None:
    proxy.set("blackhole")
    with pytest.raises(TimeoutError):
        _roundtrip(proxy, timeout=0.5)
    proxy.set("pass")
    assert _roundtrip(proxy) == b"ping"


def test_drop_cuts_open_connections_and_refuses_new_ones(proxy: Proxy) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as s:
        s.sendall(b"a")
        assert s.recv(16) == b"a"
        proxy.set("drop")
        assert _closed(s)  # under the client
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as s:
        assert _closed(s)


def _closed(s: socket.socket) -> bool:
    try:
        return s.recv(16) == b""
    except ConnectionResetError:
        return True
