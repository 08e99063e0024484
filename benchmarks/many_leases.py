"""``python -m benchmarks.many_leases [--stores sqlite,postgres] [--flavours sync,aio] [--leases 10000]``

Many leases held by ONE process (issue 29, "coalesced renewals"): ``--leases`` leases claimed
and held at ``--ttl`` seconds, then watched for ``--ttls`` TTLs while the store renews them.
Each store and flavour runs in a process of its own (so its threads and memory are its own),
against a private server started like the tests start theirs (fsync on). Reported:

- lost: leases whose ``lost`` was set (the target: 0);
- threads added: the most threads alive while holding, less those of the connected store
  before the first claim (the target: at most 4);
- renewal round trips a second over the watched TTLs, counted at the client boundary: SQLite
  and memory transactions, PostgreSQL statements, kazoo requests, etcd requests (the target:
  at most 10 per store);
- resident memory (RSS) at its highest, and its growth from before the claims (the target:
  under 250 MB);
- CPU: this process's CPU seconds over the watched time, as a share of one core; the machine's
  load average before and after (other work on the machine shows there).

Not a timed test: figures for docs/performance.md ("Many leases in one process").
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import json
import logging
import os
import resource
import subprocess
import sys
import threading
import time
from typing import Any

from benchmarks.subjects import bare

TARGETS = {"lost": 0, "threads_added": 4, "round_trips_per_s": 10.0, "rss_mb": 250.0}


def rss() -> int:
    """Resident memory now, in bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


class Requests:
    """Requests to the store, counted where the backend hands them to its client."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def _add(self) -> None:
        with self._lock:
            self.count += 1

    def wrap(self, target: Any, name: str) -> None:
        method = getattr(target, name)
        if inspect.iscoroutinefunction(method):
            async def awaited(*args: Any, **kwargs: Any) -> Any:
                self._add()
                return await method(*args, **kwargs)

            setattr(target, name, functools.wraps(method)(awaited))
            return

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._add()
            return method(*args, **kwargs)

        setattr(target, name, functools.wraps(method)(counted))


def count_requests(backend: Any, store: str) -> Requests:
    """Every request of ``backend`` (the store's, sync or async) from now on."""
    requests = Requests()
    sync = getattr(backend, "sync", backend)  # tenure.aio's ThreadedBackend serves a sync one
    if store in ("memory", "sqlite"):
        requests.wrap(sync, "transaction")  # one BEGIN IMMEDIATE ... COMMIT each
    elif store == "postgres":
        requests.wrap(backend, "execute")  # one statement each (sync pool or asyncio pool)
    elif store == "zk":
        requests.wrap(sync.client, "_call")  # every request kazoo sends, a multi one
    else:
        from tenure.backends.etcd.client import AioConnection

        # Requests waited for and those started beside them (a keep-alive, a grant, a read).
        for name in ("txn", "range", "grant", "time_to_live", "txn_started", "grant_started", "keepalive_started"):
            requests.wrap(sync._conn, name)
            if hasattr(AioConnection, name):
                requests.wrap(AioConnection, name)
    return requests


def measure(url: str, options: dict[str, Any], store_name: str, flavour: str, leases: int, ttl: float,
            ttls: float) -> dict[str, Any]:
    """In this process: hold ``leases`` leases, watch them for ``ttls`` TTLs."""
    if flavour == "aio":
        return asyncio.run(_measure_aio(url, options, store_name, leases, ttl, ttls))
    import tenure

    store = tenure.connect(url, **options)
    ids = [f"held-{os.getpid()}-{i:05d}" for i in range(leases)]  # a store a run before used holds its own
    store.submit_many(ids)
    before = threading.active_count(), rss()
    started = time.perf_counter()
    held = [store.hold(job, owner="bench", ttl=ttl) for job in ids]
    claimed = time.perf_counter() - started
    return _watch(store.backend, store_name, held, before, claimed, ttl, ttls)


async def _measure_aio(url: str, options: dict[str, Any], store_name: str, leases: int, ttl: float,
                       ttls: float) -> dict[str, Any]:
    import tenure.aio

    store = await tenure.aio.connect(url, **options)
    ids = [f"held-{os.getpid()}-{i:05d}" for i in range(leases)]  # a store a run before used holds its own
    await store.submit_many(ids)
    before = threading.active_count(), rss()
    started = time.perf_counter()
    held = [await store.hold(job, owner="bench", ttl=ttl) for job in ids]
    claimed = time.perf_counter() - started
    return await _watch_async(store.backend, store_name, held, before, claimed, ttl, ttls)


def _sample(held: list[Any]) -> tuple[int, float]:
    return sum(h.lost.is_set() for h in held), min(h.remaining() for h in held)


def _report(store_name: str, held: list[Any], before: tuple[int, int], claimed: float, ttl: float, ttls: float,
            requests: int, threads: int, peak: int, cpu: float, lowest: float, loads: tuple[float, float]
            ) -> dict[str, Any]:
    lost = sum(h.lost.is_set() for h in held)
    window = ttl * ttls
    return {"store": store_name, "leases": len(held), "ttl": ttl, "watched_s": window,
            "claimed_in_s": round(claimed, 1), "lost": lost, "threads_added": threads - before[0],
            "round_trips_per_s": round(requests / window, 2), "rss_mb": round(peak / 2**20, 1),
            "rss_growth_mb": round((peak - before[1]) / 2**20, 1), "cpu_share": round(cpu / window, 3),
            "smallest_margin_s": round(lowest, 2), "load_before": loads[0], "load_after": loads[1]}


class _Watch:
    """What both flavours measure while their leases are held: requests, threads, RSS, CPU and
    the smallest safe-deadline margin; the caller sleeps between ``sample()``s its own way."""

    def __init__(self, backend: Any, store_name: str, ttl: float, ttls: float) -> None:
        self.requests = count_requests(backend, store_name)
        self.load, self.cpu = os.getloadavg()[0], time.process_time()
        self.threads, self.peak, self.lowest = threading.active_count(), rss(), ttl
        self.end = time.monotonic() + ttl * ttls

    def sample(self, held: list[Any]) -> bool:
        """Record one sample; False once the watched time is over."""
        self.lowest = min(self.lowest, _sample(held)[1])
        self.threads, self.peak = max(self.threads, threading.active_count()), max(self.peak, rss())
        return time.monotonic() < self.end

    def report(self, store_name: str, held: list[Any], before: tuple[int, int], claimed: float, ttl: float,
               ttls: float) -> dict[str, Any]:
        return _report(store_name, held, before, claimed, ttl, ttls, self.requests.count, self.threads, self.peak,
                       time.process_time() - self.cpu, self.lowest, (self.load, os.getloadavg()[0]))


def _watch(backend: Any, store_name: str, held: list[Any], before: tuple[int, int], claimed: float, ttl: float,
           ttls: float) -> dict[str, Any]:
    watch = _Watch(backend, store_name, ttl, ttls)
    while True:
        time.sleep(0.25)  # real time: the renewals happen meanwhile
        if not watch.sample(held):
            return watch.report(store_name, held, before, claimed, ttl, ttls)


async def _watch_async(backend: Any, store_name: str, held: list[Any], before: tuple[int, int], claimed: float,
                       ttl: float, ttls: float) -> dict[str, Any]:
    watch = _Watch(backend, store_name, ttl, ttls)
    while True:
        await asyncio.sleep(0.25)  # real time: the renewals happen meanwhile
        if not watch.sample(held):
            return watch.report(store_name, held, before, claimed, ttl, ttls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1] if __doc__ else None)
    parser.add_argument("--stores", default="sqlite,postgres", help="of memory, sqlite, postgres, zk, etcd")
    parser.add_argument("--flavours", default="sync,aio")
    parser.add_argument("--leases", type=int, default=10_000)
    parser.add_argument("--ttl", type=float, default=10.0)
    parser.add_argument("--ttls", type=float, default=5.0, help="TTLs watched after the last claim")
    parser.add_argument("--logs", help="a directory for each run's log (tenure's INFO messages)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # JSON: one measurement, in this process
    args = parser.parse_args()
    if args.child:
        if os.environ.get("TENURE_BENCH_LOG"):  # what the renewals met, on stderr
            logging.basicConfig(level=logging.INFO, format="%(relativeCreated)d %(name)s %(message)s")
        task = json.loads(args.child)
        found = measure(**task)
        print(json.dumps(found), flush=True)
        os._exit(0)  # not releasing 10,000 leases one by one: they run out by themselves
    print(f"# {args.leases:,} leases held by one process, TTL {args.ttl:g} s, watched {args.ttls:g} TTLs")
    print(f"# targets: {json.dumps(TARGETS)}; machine: {os.cpu_count()} cores")
    for name in args.stores.split(","):
        with bare(name) as subject:
            for flavour in args.flavours.split(","):
                task = {"url": subject.url, "options": subject.options, "store_name": name, "flavour": flavour,
                        "leases": args.leases, "ttl": args.ttl, "ttls": args.ttls}
                env = {**os.environ, "TENURE_BENCH_LOG": "1"} if args.logs else None
                ran = subprocess.run([sys.executable, "-m", "benchmarks.many_leases", "--child", json.dumps(task)],
                                     capture_output=True, text=True, check=False, env=env)
                if args.logs:
                    with open(os.path.join(args.logs, f"{name}-{flavour}.log"), "w") as log:
                        log.write(ran.stderr)
                lines = [line for line in ran.stdout.splitlines() if line.startswith("{")]
                if ran.returncode or not lines:
                    print(f"{name} {flavour}: failed\n{ran.stderr[-2000:]}", flush=True)
                    continue
                found = json.loads(lines[-1])
                met = (found["lost"] <= TARGETS["lost"] and found["threads_added"] <= TARGETS["threads_added"]
                       and found["round_trips_per_s"] <= TARGETS["round_trips_per_s"]
                       and found["rss_mb"] < TARGETS["rss_mb"])
                print(f"{name} {flavour}: {json.dumps({**found, 'targets_met': met})}", flush=True)


if __name__ == "__main__":
    main()
