"""``python -m benchmarks.aio_scale [--backends memory,sqlite,postgres] [--leases 1000] [--clients 16]``

tenure.aio at scale in one event loop, against the sync API, on the same store in one run:

- held leases: ``--leases`` leases held by one loop for 2.5 TTLs; each renewed in time (the
  smallest margin left before a safe deadline, sampled across all of them), none lost, and
  the threads and resident memory that took (no tracing: it would slow the loop it measures);
- concurrent claimers: ``--clients`` tasks in one loop, then the same number of threads on a
  sync store, each claiming (claim_next) and completing jobs until none is left;
- with ``--sync-hold``: the same held leases on the sync store (its renewal threads) in a
  process of its own, right after the loop's, for a side-by-side on the same machine load.

Figures in docs/performance.md come from this command.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import threading
import time
from typing import Any

import tenure
import tenure.aio
from benchmarks import workloads
from benchmarks.measure import Targets
from benchmarks.subjects import SUBJECTS, Subject


def rss() -> int:
    """The process's resident memory now, in bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def section(title: str) -> None:
    print(f"\n## {title}", flush=True)


async def hold_many(s: Subject, leases: int, ttl: float, targets: Targets) -> None:
    section(f"{s.name}: {leases:,} leases held in one event loop, ttl {ttl:g} s, for 2.5 TTLs")
    # Retention above the events this makes, so every renewal is counted from the history.
    async with tenure.aio.connect(s.url, **{**s.options, "retention": 100_000}) as store:
        ids = [f"held-{i:05d}" for i in range(leases)]
        await store.submit_many(ids)
        threads_before, rss_before = threading.active_count(), rss()
        started = time.perf_counter()
        held = [await store.hold(job, owner="bench", ttl=ttl) for job in ids]
        took = time.perf_counter() - started
        lowest = ttl
        threads = threading.active_count()
        cpu, load = time.process_time(), os.getloadavg()[0]
        end = time.monotonic() + 2.5 * ttl
        while time.monotonic() < end:
            await asyncio.sleep(0.25)  # real time: the renewals happen meanwhile
            lowest = min(lowest, min(h.remaining() for h in held))
            threads = max(threads, threading.active_count())
        grown = rss() - rss_before
        cpu = time.process_time() - cpu
        lost = sum(h.lost.is_set() for h in held)
        renewals = sum(1 for e in await store.history(limit=None) if e.op is tenure.Op.RENEW)
        started = time.perf_counter()
        for h in held:
            await h.release()  # one after another, while the others are still being renewed
        released = time.perf_counter() - started
        lost_later = sum(h.lost.is_set() for h in held) - lost
        print(f"  claimed and held in {took:.2f} s; {renewals:,} renewals in {2.5 * ttl:g} s "
              f"({renewals / leases:.1f} per lease; the task renews every ttl/3)")
        print(f"  smallest margin before a safe deadline: {lowest:.2f} s of {ttl * 0.95:.2f} s; lost: {lost}")
        print(f"  released one by one in {released:.2f} s; lost meanwhile: {lost_later}")
        print(f"  this process's CPU while holding: {cpu:.1f} s in {2.5 * ttl:g} s; machine load average "
              f"{load:.1f} before, {os.getloadavg()[0]:.1f} after (the loop is one thread: on a busy machine it "
              "gets one thread's share)")
        print(f"  threads: {threads_before} before, {threads} at most while holding; "
              f"resident memory {grown / 2**20:+.1f} MiB ({grown / leases / 1024:.1f} KiB a lease)")
        targets.check(lost == lost_later == 0 and lowest > 0,
                      f"{s.name}: {leases:,} leases renewed in time in one loop")
        targets.check(threads - threads_before <= 8, f"{s.name}: threads bounded "
                      f"({threads - threads_before} more while holding {leases:,} leases)")


def sync_hold(s: Subject, leases: int, ttl: float) -> None:
    found = workloads.hold_many(s.url, s.options, leases, ttl, 2.5 * ttl)
    print(f"  the sync store, same leases and TTL, in a process of its own: lost {found['lost']}, "
          f"+{found['threads']} threads, {found['rss_mb']:.0f} MB resident")


async def async_claimers(url: str, options: dict[str, Any], clients: int, jobs: list[str]) -> float:
    async with tenure.aio.connect(url, **options) as store:
        await store.submit_many(jobs)

        async def claimer() -> None:
            while (lease := await store.claim_next(owner="bench", ttl=30.0)) is not None:
                await store.complete(lease)

        started = time.perf_counter()
        await asyncio.gather(*(claimer() for _ in range(clients)))
        return time.perf_counter() - started


def sync_claimers(url: str, options: dict[str, Any], clients: int, jobs: list[str]) -> float:
    with tenure.connect(url, **options) as store:
        store.submit_many(jobs)

        def claimer() -> None:
            while (lease := store.claim_next(owner="bench", ttl=30.0)) is not None:
                store.complete(lease)

        threads = [threading.Thread(target=claimer) for _ in range(clients)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - started


def claimers(s: Subject, clients: int, n: int, runs: int) -> None:
    section(f"{s.name}: {clients} concurrent claimers, {n:,} jobs claimed and completed, {runs} runs each")
    rates: dict[str, list[float]] = {"tenure.aio, tasks in one loop": [], "tenure, threads": []}
    for run in range(runs):  # alternated, so a change in the machine's load falls on both
        jobs = [f"c{run}-{i:06d}" for i in range(n)]
        rates["tenure.aio, tasks in one loop"].append(n / asyncio.run(async_claimers(s.url, s.options, clients, jobs)))
        jobs = [f"t{run}-{i:06d}" for i in range(n)]
        rates["tenure, threads"].append(n / sync_claimers(s.url, s.options, clients, jobs))
    for label, values in rates.items():
        print(f"  {label:<31} {sorted(values)[len(values) // 2]:>8,.0f} jobs/s   (runs: "
              + ", ".join(f"{v:,.0f}" for v in values) + ")")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="memory,sqlite,postgres")
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--ttl", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("-n", type=int, default=2000, help="jobs claimed per claimers run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sync-hold", action="store_true", help="hold the same leases on the sync store too")
    parser.add_argument("--no-claimers", action="store_true", help="only the held leases")
    parser.add_argument("--no-hold", action="store_true", help="only the claimers")
    args = parser.parse_args()
    print(f"# tenure.aio at scale; maxrss at start {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    targets = Targets()
    for name in args.backends.split(","):
        with SUBJECTS[name]() as subject:
            if not args.no_hold:
                asyncio.run(hold_many(subject, args.leases, args.ttl, targets))
            if args.sync_hold:
                sync_hold(subject, args.leases, args.ttl)
            if not args.no_claimers:
                claimers(subject, args.clients, args.n, args.runs)
    print(f"\nmaxrss at the end {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB; "
          + targets.summary())


if __name__ == "__main__":
    main()
