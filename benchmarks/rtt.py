"""``python -m benchmarks.run --rtt 0,0.5,1,2``: every store, its floor and its peers behind a
link with each round-trip time (milliseconds), side by side in one run.

Each server gets a delay relay (benchmarks/relay.py) and every client of it, tenure's store,
the floor and each peer, connects through that relay. At each RTT the subjects take turns
(ten slices per run, the order rotated each slice) so a change in the machine's load falls on
all of them alike; the spread is over the runs. The relay also counts request/response turns
per cycle. SQLite has no network: it is measured at RTT 0 only, without a relay.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import tenure
from benchmarks import workloads
from benchmarks.measure import Targets
from benchmarks.network import Direct, EchoLink, Network, median_ms, round_trip_seconds
from benchmarks.round_trips import EtcdCounter, ZooKeeperCounter
from benchmarks.subjects import SUBJECTS, Subject

# At 1 ms: (store, peer label prefix, tenure's claim+complete at least this many times as fast)
TARGETS_AT_1MS = (("etcd", "cslab-etcd3", 1.45), ("zk", "kazoo Lock", 2.5))
TURN_SAMPLES = (10, 40)  # cycles counted twice: the difference leaves out connecting and set-up
LINK = "link: one 100-byte round trip"
COUNTERS: dict[str, type[EtcdCounter] | type[ZooKeeperCounter]] = {"etcd": EtcdCounter, "zk": ZooKeeperCounter}


@dataclass
class Row:
    store: str
    rtt_ms: float
    subject: str
    cycle_ms: list[float]  # per run: milliseconds per claim+complete (acquire+release)
    ratios: list[float]  # per run: this subject's time / tenure's (through the relay) in the same run
    turns: float | None = None  # request/response turns per cycle counted by the relay
    relay_cpu_ms: float | None = None  # CPU the relay process spent per cycle
    waited: float | None = None  # tenure: requests its client waited for per cycle (round_trips.py)


def spread(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def link_lines(rtts: list[float], n: int = 400) -> list[str]:
    """What a round trip through a relay costs at each RTT asked, beside loopback alone."""
    lines = [f"loopback alone: {median_ms(round_trip_seconds(None, n)):.3f} ms per 100-byte round trip (median)"]
    for rtt in rtts:
        samples = sorted(round_trip_seconds(rtt / 1000, n))
        lines.append(f"relay at RTT {rtt:g} ms: {median_ms(samples):.3f} ms (10-90 %: "
                     f"{samples[n // 10] * 1000:.3f}-{samples[n * 9 // 10] * 1000:.3f})")
    return lines


def alternate(subjects: list[tuple[str, Callable[[int], float]]], n: int, runs: int) -> dict[str, list[float]]:
    """Seconds per cycle of each subject, per run; each run is ten slices of n/10 cycles each."""
    found: dict[str, list[float]] = {name: [] for name, _ in subjects}
    for _ in range(runs):
        spent = dict.fromkeys(found, 0.0)
        for turn in range(10):
            for name, cycles in subjects[turn % len(subjects):] + subjects[:turn % len(subjects)]:
                spent[name] += cycles(max(1, n // 10))
        for name in found:
            found[name].append(spent[name] / (10 * max(1, n // 10)))
    return found


def count(net: Network, row: Row, cycles: Callable[[int], float], waited: Callable[[], int] | None) -> None:
    """The relay's turns and CPU per cycle, and the requests tenure's client waited for (as
    benchmarks/round_trips.py counts them): each counted over ``few`` and over ``many`` cycles,
    the difference per cycle, so what each call does once (connecting, set-up) is left out."""
    def counts(n: int) -> tuple[float, float, float]:
        net.turns()  # from zero
        cpu, requests = net.cpu_seconds(), waited() if waited else 0
        cycles(n)
        return net.turns(), net.cpu_seconds() - cpu, (waited() if waited else 0) - requests

    few, many = TURN_SAMPLES
    (turns, cpu, requests), (more_turns, more_cpu, more_requests) = counts(few), counts(many)
    row.turns = (more_turns - turns) / (many - few)
    row.relay_cpu_ms = (more_cpu - cpu) * 1000 / (many - few)
    if waited:
        row.waited = (more_requests - requests) / (many - few)


class Requests:
    """round_trips.py's counter on tenure's connection, read as a call."""

    def __init__(self, counter: EtcdCounter | ZooKeeperCounter) -> None:
        self._counter = counter

    def requests(self) -> int:
        return self._counter.count


@contextlib.contextmanager
def _store(url: str, options: dict[str, object]) -> Iterator[tenure.Store]:
    with tenure.connect(url, **options) as store:
        workloads.claim_complete_seconds(store, 5)  # connections and caches warm
        yield store


def _cycles(store: tenure.Store) -> Callable[[int], float]:
    return lambda n: workloads.claim_complete_seconds(store, n)


def _subjects(s: Subject, ours: Callable[[int], float]) -> list[tuple[str, Callable[[int], float]]]:
    floor = [("floor", s.floor)] if s.floor is not None else []
    for missing in s.missing:  # the others are measured all the same
        print(f"  {s.name}: not measured: {missing}", flush=True)
    return [("tenure", ours), *floor, *s.peers]


def bench_store(name: str, rtts: list[float], args: argparse.Namespace) -> list[Row]:
    if name == "sqlite":  # no network to put a link into
        with SUBJECTS[name](Direct()) as s, _store(s.url, s.options) as store:
            rows = [Row(name, 0.0, subject, [x * 1000 for x in seconds], [])
                    for subject, seconds in alternate(_subjects(s, _cycles(store)), args.n, args.runs).items()]
        _ratios(rows)
        return rows
    rows = []
    net = Network()
    try:
        with SUBJECTS[name](net) as s, _store(s.url, s.options) as store, \
                _store(net.unrouted(s.url), s.options) as loopback, contextlib.closing(EchoLink(net)) as link:
            subjects = [*_subjects(s, _cycles(store)), (LINK, link.seconds)]
            counter = Requests(COUNTERS[name](store)) if name in COUNTERS else None
            for rtt in rtts:
                net.set_rtt(rtt / 1000)
                extra = [("tenure over loopback", _cycles(loopback))] if rtt == 0 else []
                measured = alternate(subjects + extra, args.n, args.runs)
                at = [Row(name, rtt, subject, [x * 1000 for x in seconds], [])
                      for subject, seconds in measured.items()]
                for row, (_, cycles) in zip(at, subjects[:-1], strict=False):
                    waited = counter.requests if counter is not None and row.subject == "tenure" else None
                    count(net, row, cycles, waited)
                _ratios(at)
                for row in at:
                    print(format_row(row), flush=True)
                rows += at
    finally:
        net.close()
    return rows


def _ratios(rows: list[Row]) -> None:
    """Each row's time over tenure's, run by run (the runs took turns, so they pair up)."""
    ours = next(r for r in rows if r.subject == "tenure").cycle_ms
    for row in rows:
        row.ratios = [theirs / mine for theirs, mine in zip(row.cycle_ms, ours, strict=True)]


def format_row(row: Row) -> str:
    turns = f"{row.turns:.1f}" if row.turns is not None else ""
    if row.waited is not None:
        turns += f" ({row.waited:.1f} requests waited for)"
    cpu = f"{row.relay_cpu_ms:.2f}" if row.relay_cpu_ms is not None else ""
    ratio = "1" if row.subject == "tenure" else spread(row.ratios)
    return f"| {row.store} | {row.rtt_ms:g} | {row.subject} | {spread(row.cycle_ms)} | {ratio} | {turns} | {cpu} |"


def check(rows: list[Row], targets: Targets) -> None:
    """The issue's targets at 1 ms: tenure against the Lock recipes, and against its own floor."""
    for row in rows:
        if row.rtt_ms != 1 or row.subject == "tenure":
            continue
        ratio = statistics.median(row.ratios)
        if row.subject == "floor":
            targets.check(ratio >= 0.9, f"{row.store} at 1 ms: claim+complete at {ratio:.2f} x the floor (>= 0.9)")
        for store, peer, need in TARGETS_AT_1MS:
            if row.store == store and row.subject.startswith(peer):
                targets.check(ratio >= need, f"{store} at 1 ms: {ratio:.2f} x {row.subject} (>= {need})")
                if (bound := floor_bound(rows, row)) is not None:
                    print(f"  {store} at 1 ms: the floor's own cycle is {bound:.2f} x as fast as {row.subject}'s: "
                          "what tenure reaches at its floor's speed", flush=True)


def floor_bound(rows: list[Row], peer: Row) -> float | None:
    """The peer's time over the floor's, run by run (median): the ratio to the peer that tenure
    would reach with nothing but the floor's requests. A request costs a fixed time beside the
    RTT (the store's commit, the client library's threads, the link), so at a small RTT this,
    not 3/2, bounds what two requests against three can show."""
    floor = next((r for r in rows if r.store == peer.store and r.rtt_ms == peer.rtt_ms and r.subject == "floor"), None)
    if floor is None:
        return None
    return statistics.median(theirs / base for theirs, base in zip(peer.cycle_ms, floor.cycle_ms, strict=True))


def main(args: argparse.Namespace, targets: Targets) -> None:
    rtts = [float(x) for x in args.rtt.split(",")]
    print("\n## The link (benchmarks/relay.py)")
    for line in link_lines(rtts):
        print(f"  {line}", flush=True)
    print("\n## claim+complete against each peer's acquire+release, through the link\n")
    print("| store | RTT ms | subject | ms per cycle, median (range) | x tenure's time, median (range) "
          "| turns per cycle | relay CPU ms per cycle |")
    print("|---|---|---|---|---|---|---|", flush=True)
    rows: list[Row] = []
    for name in args.backends.split(","):
        if name == "memory":
            print("| memory | - | (in the process: no network, not measured) | | | | |", flush=True)
        else:
            store_rows = bench_store(name, rtts, args)
            if name == "sqlite":
                for row in store_rows:
                    print(format_row(row), flush=True)
            rows += store_rows
    check(rows, targets)
