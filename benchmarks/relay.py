"""A network link with a round-trip time, in a process of its own: ``python -m benchmarks.relay HOST:PORT``.

The machines here have no ``tc netem`` (their kernel has no netem qdisc), so the benchmarks put
this TCP relay between a client and its server. Each chunk read from one side is held until half
the RTT after it arrived, then written to the other side: chunks that arrive together leave
together (a reader and a writer thread per direction, so a delay never adds up behind another),
and in order. At RTT 0 the reader writes a chunk itself when nothing waits ahead of it: the
relay then costs one more loopback hop, which ``benchmarks/network.py`` measures.

It counts request/response turns: a chunk from the server after one from the client on the same
connection is one round trip the client waited through (a client that pipelines requests waits
once for all of them). Lines on stdin drive it; it prints its listening port first, then one
line per command:

- ``rtt SECONDS``: the round-trip time from now on; answers ``ok``;
- ``turns``: the turns counted since the last ``turns`` (and resets the count);
- ``cpu``: the CPU seconds this process has used;
- ``log``: from now on, keep every chunk (when it arrived, which way, on which connection, its
  bytes); ``dump PATH`` writes them to PATH, one JSON line each, and stops keeping them
  (``benchmarks/studies/h2_trace.py`` reads them as HTTP/2 frames).
"""

from __future__ import annotations

import collections
import ctypes
import itertools
import json
import socket
import sys
import threading
import time

from tests.faults.splice import Splice

CHUNK = 65536
PR_SET_TIMERSLACK = 29  # linux/prctl.h
LATE_STEP = 0.0002  # the most one sleep moves the estimate of how late sleeps wake


_ids = itertools.count()


class Connection:
    """Which way the last chunk went on one client's connection, for counting turns."""

    def __init__(self) -> None:
        self.last_up = False
        self.id = next(_ids)


class Relay(Splice):
    def __init__(self, target: tuple[str, int]) -> None:
        self.one_way = 0.0
        self.turns = 0
        self.late = 0.0  # how long a sleep overruns, of late: the writers wake that much earlier
        # (arrival, upstream, connection, bytes) of each chunk, when a list
        self.log: list[tuple[float, bool, int, bytes]] | None = None
        self._count_lock = threading.Lock()
        super().__init__(target, "relay")

    def join(self, client: socket.socket, server: socket.socket) -> None:
        conn = Connection()
        DelayLine(self, conn, client, server, upstream=True)
        DelayLine(self, conn, server, client, upstream=False)

    def saw(self, conn: Connection, upstream: bool, data: bytes) -> None:
        with self._count_lock:
            if self.log is not None:
                self.log.append((time.monotonic(), upstream, conn.id, data))
            if not upstream and conn.last_up:
                self.turns += 1
            conn.last_up = upstream

    def overslept(self, by: float) -> None:
        """A writer slept until ``by`` seconds after its chunk was due (< 0: before).

        It settles where sleeps end on time; one long preemption moves it little; at most half
        the hold, so a writer always sleeps and so keeps measuring."""
        step = 0.1 * max(-LATE_STEP, min(LATE_STEP, by))
        self.late = min(self.one_way / 2, max(0.0, self.late + step))

    def take_turns(self) -> int:
        with self._count_lock:
            turns, self.turns = self.turns, 0
        return turns


class DelayLine:
    """One direction of one connection: chunks held until their time, in order."""

    def __init__(self, relay: Relay, conn: Connection, src: socket.socket, dst: socket.socket,
                 upstream: bool) -> None:
        self._relay, self._conn, self._src, self._dst, self._upstream = relay, conn, src, dst, upstream
        self._queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self._ready = threading.Condition()
        self._busy = False  # the writer is writing a chunk it took: a newer one must queue behind it
        self._ended = False
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._write, daemon=True).start()

    def _read(self) -> None:
        try:
            while data := self._src.recv(CHUNK):
                due = time.monotonic() + self._relay.one_way
                self._relay.saw(self._conn, self._upstream, data)
                with self._ready:
                    if self._relay.one_way == 0 and not self._queue and not self._busy:
                        self._dst.sendall(data)  # nothing ahead of it and no wait: no thread hand-off
                        continue
                    self._queue.append((due, data))
                    self._ready.notify()
        except OSError:
            pass
        finally:
            with self._ready:
                self._ended = True
                self._ready.notify()

    def _write(self) -> None:
        try:
            while batch := self._next():
                self._dst.sendall(batch)
                with self._ready:
                    self._busy = False
        except OSError:
            pass
        self._relay.release(self._src, self._dst)

    def _next(self) -> bytes:
        """The chunks due first, joined, once their time has come; b"" when the source ended."""
        with self._ready:
            while not self._queue and not self._ended:
                self._ready.wait()
            if not self._queue:
                return b""
            due, _ = self._queue[0]
            self._busy = True
        early = self._relay.late
        wait = due - early - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        now = time.monotonic()
        if wait > 0:  # a chunk taken late (a backlog, a preempted writer) says nothing of sleeps
            self._relay.overslept(now - due)
        cutoff = max(due, now + early)  # the first chunk, and those due with it
        with self._ready:
            parts = []
            while self._queue and self._queue[0][0] <= cutoff:
                parts.append(self._queue.popleft()[1])
        return b"".join(parts)


def main() -> None:
    host, _, port = sys.argv[1].rpartition(":")
    # Linux lets a sleep overrun by the thread's timer slack (50 us by default): a tenth of the
    # shortest half-RTT measured. 1 ns keeps the hold as asked (threads inherit it).
    ctypes.CDLL(None).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    relay = Relay((host, int(port)))
    print(relay.port, flush=True)
    for line in sys.stdin:
        verb, *rest = line.split()
        if verb == "rtt":
            relay.one_way = float(rest[0]) / 2
            print("ok", flush=True)
        elif verb == "turns":
            print(relay.take_turns(), flush=True)
        elif verb == "cpu":
            print(time.process_time(), flush=True)
        elif verb == "log":
            relay.log = []
            print("ok", flush=True)
        elif verb == "dump":
            kept, relay.log = relay.log or [], None
            with open(rest[0], "w") as out:
                for at, upstream, conn, data in kept:
                    out.write(json.dumps({"at": at, "up": upstream, "conn": conn, "data": data.hex()}) + "\n")
            print(len(kept), flush=True)
    relay.close()


if __name__ == "__main__":
    main()
