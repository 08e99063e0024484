"""``python -m benchmarks.studies.wire_trace [--store etcd|zk] [--rtt MS] [--n N] [--peer]``: a cycle on the wire.

Runs N claim+complete cycles of tenure, N of the floor's two transactions (etcd: on tenure's
own ``Connection``, as ``etcd_peers.floor`` makes them; ZooKeeper: two kazoo multis, as
``zk_peers.floor``) and, with ``--peer``, N acquire+release cycles of the Lock recipe
(cslab-etcd3's, in its own process; kazoo's), on a private server through a delay relay in its
own process (benchmarks/relay.py, as ``benchmarks.run --rtt`` uses it), in slices taken in
turn as ``benchmarks.rtt.alternate`` takes them. The relay keeps every chunk it passes on;
this reads them as HTTP/2 frames (etcd) or ZooKeeper packets and prints, per subject:

- chunks and frames per cycle each way (what each request costs on the wire);
- for the subjects in this process, the client's CPU per cycle (all threads, and the calling
  thread alone), each thread's context switches per cycle, and the garbage collector's time;
- for tenure and the floor, where each cycle's time went, from the relay's clock: the client
  before its first request left, etcd on each request (its answer's arrival at the relay less
  the request's arrival and the one-way hold), the client between the first answer and the
  second request, and the client after the last answer;
- the first K cycles chunk by chunk (ms from the cycle's start at the relay, way, size, frames).

Counts (chunks, frames, switches, CPU) move little with the machine's load; the times do.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import itertools
import json
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import tenure
from benchmarks import etcd_peers
from benchmarks.network import Network
from benchmarks.servers import private_etcd
from tenure.backends.etcd import client as ec

TYPES = {0: "DATA", 1: "HEADERS", 2: "PRIORITY", 3: "RST_STREAM", 4: "SETTINGS", 5: "PUSH_PROMISE",
         6: "PING", 7: "GOAWAY", 8: "WINDOW_UPDATE", 9: "CONTINUATION"}
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


@dataclass
class Chunk:
    at: float
    up: bool
    conn: int
    size: int
    frames: list[str] = field(default_factory=list)
    request: bool = False  # up: carries a request (HTTP/2 HEADERS; a ZooKeeper packet that is no ping)
    answer: bool = False  # down: ends a request's answer (HEADERS with END_STREAM; a ZooKeeper reply)


def frame_text(kind: int, flags: int, stream: int, payload: bytes) -> str:
    name = TYPES.get(kind, f"type{kind}")
    extra = ""
    if kind in (4, 6) and flags & 1:
        extra = " ACK"
    if kind == 6:
        extra += f" {payload.hex()[-4:]}"
    elif kind == 8:
        extra = f" +{int.from_bytes(payload[:4], 'big') & 0x7FFFFFFF}"
    elif kind in (0, 1):
        extra = f" {len(payload)}B" + (" END_STREAM" if flags & 1 else "")
    return f"{name}(s{stream}{extra})"


def _chunks(rows: list[dict[str, object]], split: Callable[[bytes, Chunk], bytes]) -> list[Chunk]:
    """Each logged chunk, its bytes joined to what its connection and way left over before;
    ``split`` reads what ends in it into the chunk and returns the rest."""
    buffers: dict[tuple[int, bool], bytes] = collections.defaultdict(bytes)
    chunks = []
    for row in rows:
        data = bytes.fromhex(str(row["data"]))
        key = (int(str(row["conn"])), bool(row["up"]))
        chunk = Chunk(float(str(row["at"])), key[1], key[0], len(data))
        buffers[key] = split(buffers[key] + data, chunk)
        chunks.append(chunk)
    return chunks


def frames_of(rows: list[dict[str, object]]) -> list[Chunk]:
    """Each logged chunk with the HTTP/2 frames that end in it, per connection and way."""
    def split(buf: bytes, chunk: Chunk) -> bytes:
        if buf.startswith(PREFACE):
            buf = buf[len(PREFACE):]
            chunk.frames.append("PREFACE")
        while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
            length = int.from_bytes(buf[:3], "big")
            chunk.frames.append(frame_text(buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF,
                                           buf[9:9 + length]))
            buf = buf[9 + length:]
        chunk.request = chunk.up and any(f.startswith("HEADERS") for f in chunk.frames)
        chunk.answer = not chunk.up and any(f.startswith("HEADERS") and "END_STREAM" in f for f in chunk.frames)
        return buf

    return _chunks(rows, split)


ZK_OPS = {-11: "close", 1: "create", 2: "delete", 4: "getData", 5: "setData", 8: "getChildren", 11: "ping",
          12: "getChildren2", 13: "check", 14: "multi", 15: "create2", 22: "multiRead"}


def packets_of(rows: list[dict[str, object]]) -> list[Chunk]:
    """Each logged chunk with the ZooKeeper packets that end in it, per connection and way: a
    request names its xid and operation, a reply its xid (-2: a ping's, -1: a watch event)."""
    def split(buf: bytes, chunk: Chunk) -> bytes:
        while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
            length = int.from_bytes(buf[:4], "big")
            body = buf[4:4 + length]
            xid = int.from_bytes(body[:4], "big", signed=True)
            if chunk.up:
                op = int.from_bytes(body[4:8], "big", signed=True)
                chunk.frames.append(f"{ZK_OPS.get(op, op)}(x{xid} {length}B)")
                chunk.request = chunk.request or op != 11
            else:
                chunk.frames.append(f"reply(x{xid} {length}B)")
                chunk.answer = chunk.answer or xid >= 0
            buf = buf[4 + length:]
        return buf

    return _chunks(rows, split)


def switches() -> dict[int, tuple[str, int, int]]:
    """Each thread of this process: (name, voluntary, involuntary context switches so far)."""
    found = {}
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            fields = dict(line.split(":", 1) for line in (task / "status").read_text().splitlines() if ":" in line)
            found[int(task.name)] = (fields["Name"].strip(), int(fields["voluntary_ctxt_switches"]),
                                     int(fields["nonvoluntary_ctxt_switches"]))
    return found


def waited() -> tuple[float, float]:
    """Seconds this thread, and every other thread of the process, spent runnable but waiting
    for a core so far (the kernel's schedstat): what the machine's load adds to CPU work."""
    mine = other = 0.0
    me = threading.get_native_id()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            wait = int((task / "schedstat").read_text().split()[1]) / 1e9
            if int(task.name) == me:
                mine += wait
            else:
                other += wait
    return mine, other


@dataclass
class Subject:
    """One side of the comparison: ``run(n)`` makes n cycles and gives each one's (start, end),
    or only the first's start and the last's end when it runs in another process."""

    name: str
    run: Callable[[int], list[tuple[float, float]]]
    local: bool  # in this process: its CPU and context switches are counted
    spans: list[tuple[float, float]] = field(default_factory=list)
    slices: list[tuple[float, float]] = field(default_factory=list)
    cpu: float = 0.0
    own_cpu: float = 0.0
    own_wait: float = 0.0  # the calling thread runnable, waiting for a core
    others_wait: float = 0.0
    gc_seconds: float = 0.0
    gc_runs: collections.Counter[int] = field(default_factory=collections.Counter)
    switched: collections.Counter[str] = field(default_factory=collections.Counter)


def in_process(name: str, cycle: Callable[[int], None]) -> Subject:
    done = itertools.count()

    def run(n: int) -> list[tuple[float, float]]:
        spans = []
        for _ in range(n):
            start = time.monotonic()
            cycle(next(done))
            spans.append((start, time.monotonic()))
        return spans

    return Subject(name, run, True)


class GcClock:
    """Seconds this process spent in the cyclic garbage collector, and its runs by generation."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.runs: collections.Counter[int] = collections.Counter()
        self._began = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began
            self.runs[info["generation"]] += 1


def alternate(net: Network, subjects: list[Subject], n: int, slices: int,
              parse: Callable[[list[dict[str, object]]], list[Chunk]]) -> list[Chunk]:
    """Each subject's n cycles in slices taken in turn (as ``benchmarks.rtt.alternate``), the
    relay keeping every chunk meanwhile."""
    relay = net.relays[0]
    clock = GcClock()
    assert relay.ask("log") == "ok"
    for turn in range(slices):
        for s in subjects[turn % len(subjects):] + subjects[:turn % len(subjects)]:
            before, cpu, own = switches(), time.process_time(), time.thread_time()
            collected, runs = clock.seconds, clock.runs.copy()
            own_wait, others_wait = waited()
            spans = s.run(max(1, n // slices))
            own_wait, others_wait = (now - then for now, then in zip(waited(), (own_wait, others_wait), strict=True))
            s.own_wait += own_wait
            s.others_wait += others_wait
            s.gc_seconds += clock.seconds - collected
            s.gc_runs += clock.runs - runs
            s.own_cpu += time.thread_time() - own
            s.cpu += time.process_time() - cpu
            after = switches()
            for tid, (name, voluntary, involuntary) in after.items():
                _, v0, i0 = before.get(tid, (name, 0, 0))
                s.switched[f"{name} voluntary"] += voluntary - v0
                s.switched[f"{name} involuntary"] += involuntary - i0
            s.spans += spans
            s.slices.append((min(b for b, _ in spans), max(e for _, e in spans)))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.jsonl"
        relay.ask(f"dump {path}")
        rows = [json.loads(line) for line in path.read_text().splitlines()]
    return parse(rows)


def report(s: Subject, chunks: list[Chunk], show: int, one_way: float) -> None:
    mine = [c for c in chunks if any(start <= c.at <= end + one_way * 1.5 for start, end in s.slices)]
    local = s.spans if s.local else []
    n = len(s.spans)
    total = sum(end - start for start, end in s.slices)
    print(f"\n## {s.name}: {n} cycles, {total * 1000 / n:.2f} ms per cycle"
          + (f" (median {statistics.median(e - b for b, e in local) * 1000:.2f} ms)" if local else ""))
    if s.local:
        print(f"  client CPU per cycle {s.cpu * 1000 / n:.3f} ms ({s.own_cpu * 1000 / n:.3f} ms in the calling "
              "thread); context switches per cycle: "
              + ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(s.switched.items()) if v))
        print(f"  waiting for a core (runnable): {s.own_wait * 1000 / n:.3f} ms per cycle the calling thread, "
              f"{s.others_wait * 1000 / n:.3f} ms the others")
        print(f"  garbage collector: {s.gc_seconds * 1000 / n:.3f} ms per cycle, runs by generation "
              f"{dict(sorted(s.gc_runs.items()))}")
    up = [c for c in mine if c.up]
    down = [c for c in mine if not c.up]
    print(f"  per cycle: {len(up) / n:.2f} chunks up ({sum(c.size for c in up) / n:.0f} B), "
          f"{len(down) / n:.2f} down ({sum(c.size for c in down) / n:.0f} B)")
    kinds: collections.Counter[tuple[bool, str]] = collections.Counter()
    for c in mine:
        for f in c.frames:
            kinds[(c.up, f.split("(")[0] + (" ACK" if " ACK" in f else ""))] += 1
    print("  frames per cycle: " + ", ".join(f"{'up' if way else 'down'} {kind} {count / n:.2f}"
                                           for (way, kind), count in sorted(kinds.items())))
    phases: dict[str, list[float]] = collections.defaultdict(list)
    for start, end in local:
        window = [c for c in mine if start <= c.at < end]
        requests = [c for c in window if c.request]
        answers = [c for c in window if c.answer]
        if len(requests) != 2 or len(answers) != 2:
            continue
        phases["client before request 1"].append(requests[0].at - start)
        phases["server on request 1"].append(answers[0].at - requests[0].at - one_way)
        phases["client between"].append(requests[1].at - answers[0].at - one_way)
        phases["server on request 2"].append(answers[1].at - requests[1].at - one_way)
        phases["client after answer 2"].append(end - answers[1].at - one_way)
    for phase, values in phases.items():
        print(f"    {phase:<24} median {statistics.median(values) * 1000:.3f} ms, "
              f"mean {statistics.fmean(values) * 1000:.3f} ms ({len(values)} cycles)")
    for i, (start, end) in enumerate(local[:show]):
        print(f"  cycle {i}: {(end - start) * 1000:.2f} ms")
        for c in mine:
            if start <= c.at < end + one_way * 1.5:
                print(f"    {(c.at - start) * 1000:7.3f}  {'up  ' if c.up else 'down'} c{c.conn} {c.size:5d} B  "
                      + " ".join(c.frames))
        print(f"    {(end - start) * 1000:7.3f}  (returned)")


def etcd_subjects(endpoint: str, peer: bool, closing: contextlib.ExitStack) -> list[Subject]:
    store = closing.enter_context(tenure.connect(f"etcd://{endpoint}/trace-{uuid.uuid4().hex[:6]}"))
    prefix = uuid.uuid4().hex[:6]

    def ours(i: int) -> None:
        store.complete(store.claim(f"{prefix}-{i}", owner="trace", ttl=30))

    host, _, port = endpoint.rpartition(":")
    conn = ec.Connection([(host, int(port))], timeout=10)
    closing.callback(conn.close)
    root = f"/floor-{uuid.uuid4().hex[:8]}"
    lease, _ = conn.grant(60)
    record = json.dumps({"state": "leased", "owner": "bench", "ttl": 30}).encode()

    def floor(i: int) -> None:  # etcd_peers.floor's cycle, on one connection throughout
        job, held, end = (f"{root}/{name}/{i}".encode() for name in ("job", "lease", "end"))
        claimed = conn.txn([ec.compare(held, "create", "==", 0)],
                           [ec.put(job, record), ec.put(held, record, lease), ec.delete(end),
                            ec.put(f"{root}/history/{uuid.uuid4().hex}".encode(), record)], [])
        conn.txn([ec.compare(held, "create", "==", claimed.revision)],
                 [ec.put(end, record), ec.delete(held),
                  ec.put(f"{root}/history/{uuid.uuid4().hex}".encode(), record)], [])

    subjects = [in_process("tenure claim+complete", ours), in_process("floor (two bare Txns)", floor)]
    if peer:
        label, venv, requirement, env = etcd_peers.PEERS[1]
        lock = etcd_peers.LockPeer(label, venv, requirement, env, endpoint)
        closing.callback(lock.close)
        subjects.append(Subject(label, lambda n: _elsewhere(lock.cycles, n), False))
    return subjects


def zk_subjects(hosts: str, peer: bool, closing: contextlib.ExitStack, n: int) -> list[Subject]:
    from kazoo.client import KazooClient

    from benchmarks import zk_peers

    store = closing.enter_context(tenure.connect(f"zk://{hosts}/trace-{uuid.uuid4().hex[:6]}"))
    prefix = uuid.uuid4().hex[:6]

    def ours(i: int) -> None:
        store.complete(store.claim(f"{prefix}-{i}", owner="trace", ttl=30))

    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=15)
    closing.callback(client.close)
    closing.callback(client.stop)
    root = f"/floor-{uuid.uuid4().hex[:8]}"
    for path in (f"{root}/jobs", f"{root}/gen", f"{root}/events"):
        client.ensure_path(path)
    record = json.dumps({"state": "leased", "owner": "bench", "ttl": 30}).encode()
    for i in range(n + 10):  # before any cycle, as zk_peers.floor makes them before its timer starts
        client.create(f"{root}/jobs/j{i}", record)
        client.create(f"{root}/gen/j{i}", b"")

    def floor(i: int) -> None:  # zk_peers.floor's cycle, on one client throughout
        zk_peers.floor_cycle(client, root, record, i)

    subjects = [in_process("tenure claim+complete", ours), in_process("floor (two bare multis)", floor)]
    if peer:
        # Timed as a whole, with the client it connects for each call (zk_peers' way).
        subjects.append(Subject("kazoo Lock", lambda n: _elsewhere(lambda k: zk_peers.kazoo_lock(hosts, k), n), False))
    return subjects


def _elsewhere(cycles: Callable[[int], float], n: int) -> list[tuple[float, float]]:
    """n cycles timed as a whole (another process's, or a recipe's): only the slice's ends."""
    start = time.monotonic()
    cycles(n)
    return [(start, time.monotonic())] + [(start, start)] * (n - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["etcd", "zk"], default="etcd")
    parser.add_argument("--rtt", type=float, default=1.0, help="ms")
    parser.add_argument("--n", type=int, default=150, help="cycles of each subject")
    parser.add_argument("--slices", type=int, default=10)
    parser.add_argument("--show", type=int, default=2, help="cycles whose chunks are printed one by one")
    parser.add_argument("--peer", action="store_true",
                        help="the Lock recipe too: cslab-etcd3's (its virtualenv, made by pip), or kazoo's")
    args = parser.parse_args()
    net = Network()
    try:
        with contextlib.ExitStack() as closing:
            if args.store == "etcd":
                cluster = closing.enter_context(private_etcd("tenure-trace-"))
                endpoint = net.route(cluster.endpoints)
                net.set_rtt(args.rtt / 1000)
                subjects, parse = etcd_subjects(endpoint, args.peer, closing), frames_of
            else:
                from devservers.zookeeper import running

                tmp = closing.enter_context(tempfile.TemporaryDirectory(prefix="tenure-trace-zk-"))
                server = closing.enter_context(running(Path(tmp) / "zk"))
                hosts = net.route(server.hosts)
                net.set_rtt(args.rtt / 1000)
                subjects, parse = zk_subjects(hosts, args.peer, closing, args.n), packets_of
            for s in subjects:  # connections and caches warm
                s.run(5)
            chunks = alternate(net, subjects, args.n, args.slices, parse)
            for s in subjects:
                report(s, chunks, args.show, args.rtt / 2000)
    finally:
        net.close()


if __name__ == "__main__":
    main()
