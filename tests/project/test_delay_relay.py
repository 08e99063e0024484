"""The benchmarks' delay relay is a link with the RTT asked, or the figures taken through it
(benchmarks.run --rtt) would measure something else.

These tests sleep on purpose: the relay's job is real time on a real socket. Its RTT here is
300 ms, far above a busy machine's scheduling noise (the tests tell 1.0 from 1.4 RTTs), and
each test takes a few RTTs.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from benchmarks.relay import Relay

RTT = 0.3  # at 60 ms a run at load 15-25 took 94 ms where 72 ms was the bound


@pytest.fixture
def relay() -> Iterator[Relay]:
    server = socket.create_server(("127.0.0.1", 0))

    def echo() -> None:
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(1024):
                conn.sendall(data)

    threading.Thread(target=echo, daemon=True).start()
    r = Relay(server.getsockname())
    r.one_way = RTT / 2
    yield r
    r.close()
    server.close()


def _connect(relay: Relay) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _read(s: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        data += s.recv(size - len(data))
    return data


def test_a_round_trip_takes_the_rtt(relay: Relay) -> None:
    with _connect(relay) as s:
        start = time.monotonic()
        s.sendall(b"ping")
        assert _read(s, 4) == b"ping"
        assert RTT <= time.monotonic() - start < 2 * RTT


def test_chunks_sent_apart_each_wait_once_and_keep_their_order(relay: Relay) -> None:
    """A delay that waits behind the one before (a sleep per chunk on the reading thread, as the
    fault proxy's delay does) holds a chunk that arrives early in another's wait for most of
    that wait too: chunks spaced like that come back about 1.4 RTTs after they were sent."""
    one_way = RTT / 2
    with _connect(relay) as s:
        s.sendall(b"0")
        time.sleep(one_way / 5)
        for i in range(1, 4):
            if i > 1:
                time.sleep(one_way)  # each arrives early in the wait of the one before
            s.sendall(str(i).encode())
            sent = time.monotonic()
        assert _read(s, 4) == b"0123"
        assert time.monotonic() - sent < 1.2 * RTT


def test_turns_count_the_round_trips_a_client_waited_for(relay: Relay) -> None:
    with _connect(relay) as s:
        s.sendall(b"a")
        s.sendall(b"b")  # pipelined: one wait for both answers
        assert _read(s, 2) == b"ab"
        for _ in range(2):
            s.sendall(b"c")
            assert _read(s, 1) == b"c"
    assert relay.take_turns() == 3
    assert relay.take_turns() == 0  # taken: counted anew from here
