"""What is measured, the same way on every backend: cycles, listing, claim_next, held leases."""

from __future__ import annotations

import multiprocessing
import resource
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import tenure
from benchmarks.measure import Latencies

TTL = 30.0


def cycles(store: tenure.Store, n: int, tag: str = "") -> Latencies:
    """n claim-renew-complete cycles on fresh jobs, timing each operation."""
    lat = Latencies()
    prefix = f"cycle-{tag}-{uuid.uuid4().hex[:8]}"
    for i in range(n):
        lease = lat.timed("claim", lambda i=i: store.claim(f"{prefix}-{i}", owner="bench", ttl=TTL))
        lease = lat.timed("renew", lambda lease=lease: store.renew(lease))  # type: ignore[assignment]
        lat.timed("complete", lambda lease=lease: store.complete(lease))  # type: ignore[arg-type]
    return lat


def claim_complete_seconds(store: tenure.Store, n: int) -> float:
    """n claim+complete pairs: the same round trips as the floor."""
    prefix = f"pair-{uuid.uuid4().hex[:8]}"
    start = time.perf_counter()
    for i in range(n):
        store.complete(store.claim(f"{prefix}-{i}", owner="bench", ttl=TTL))
    return time.perf_counter() - start


def threaded_claim_complete_seconds(store: tenure.Store, n: int, clients: int) -> float:
    """n claim+complete pairs shared by ``clients`` threads on one store (its pool)."""
    share = max(1, n // clients)
    threads = [threading.Thread(target=claim_complete_seconds, args=(store, share)) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def threaded_cycles(store: tenure.Store, clients: int, n: int) -> tuple[float, Latencies]:
    """Cycles per second with ``clients`` threads sharing one store."""
    results: list[Latencies] = []
    start = time.perf_counter()
    threads = [threading.Thread(target=lambda i=i: results.append(cycles(store, n, f"t{i}")))
               for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    merged = Latencies()
    for r in results:
        merged.merge(r)
    return clients * n / elapsed, merged


def _process_client(url: str, n: int, options: dict[str, Any], barrier: Any, out: Any) -> None:
    with tenure.connect(url, **options) as store:
        barrier.wait()
        start = time.perf_counter()
        lat = cycles(store, n)
        out.put((time.perf_counter() - start, lat.samples))


def process_cycles(url: str, clients: int, n: int, options: dict[str, Any]) -> float:
    """Cycles per second with ``clients`` processes, each with its own connection."""
    elapsed, _ = in_processes(_process_client, (url, n, options), clients)
    return clients * n / elapsed


def in_processes(target: Callable[..., None], args: tuple[Any, ...], count: int,
                 timeout: float = 600.0) -> tuple[float, list[Any]]:
    """``count`` processes each running ``target(*args, barrier, out)``: the seconds from the
    barrier they all pass once ready to the last one's ``out.put(...)``, and what each put."""
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(count + 1), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, barrier, out)) for _ in range(count)]
    for p in procs:
        p.start()
    barrier.wait()
    start = time.perf_counter()
    found = [out.get(timeout=timeout) for _ in procs]
    elapsed = time.perf_counter() - start
    for p in procs:
        p.join()
    return elapsed, found


def seed(store: tenure.Store, have: int, total: int, batch: int = 2000) -> None:
    """Grow the pending pool from ``have`` to ``total`` jobs, in batches."""
    for start in range(have, total, batch):
        store.submit_many(f"scale-{i:07d}" for i in range(start, min(total, start + batch)))


def claim_next_latency(store: tenure.Store, samples: int) -> float:
    """Median claim_next latency; each claimed job is completed so the pool stays near its size."""
    lat = Latencies()
    for _ in range(samples):
        lease = lat.timed("claim_next", lambda: store.claim_next(owner="bench", ttl=TTL))
        assert lease is not None
        store.complete(lease)  # type: ignore[arg-type]
    return lat.pct("claim_next", 0.5)


def query_seconds(store: tenure.Store) -> tuple[float, float]:
    """The dashboard's two queries: summary(), and the first page of live leases by expiry."""
    start = time.perf_counter()
    store.summary()
    middle = time.perf_counter()
    store.page(states=["leased", "expired"], order="expiry", limit=50)
    return middle - start, time.perf_counter() - middle


def listing_seconds(store: tenure.Store) -> tuple[float, int]:
    start = time.perf_counter()
    count = sum(1 for _ in store.jobs())
    return time.perf_counter() - start, count


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _hold_many(url: str, options: dict[str, Any], count: int, ttl: float, seconds: float, out: Any) -> None:
    with tenure.connect(url, **options) as store:
        store.get("warm-up")  # the client library starts its own threads here
        base_threads = threading.active_count()
        prefix = f"held-{uuid.uuid4().hex[:8]}"
        held = [store.hold(f"{prefix}-{i}", owner="holder", ttl=ttl) for i in range(count)]
        time.sleep(seconds)  # the measurement: renewals must keep every lease alive meanwhile
        lost = sum(h.lost.is_set() or h.remaining() <= 0 for h in held)
        renewed = sum(h.lease.expires_at > store.now() for h in held)
        out.put({"rss_mb": _rss_mb(), "threads": threading.active_count() - base_threads, "lost": lost,
                 "alive": renewed, "count": count})
        for h in held:
            h.complete()


def hold_many(url: str, options: dict[str, Any], count: int, ttl: float, seconds: float) -> dict[str, Any]:
    """One fresh worker process holding ``count`` leases through hold() for ``seconds``."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_hold_many, args=(url, options, count, ttl, seconds, out))
    p.start()
    result: dict[str, Any] = out.get(timeout=600)
    p.join()
    return result
