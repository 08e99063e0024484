"""Operators' queries at scale: summary(), page() and a whole listing at 1,000 to 100,000 jobs.

    PYTHONPATH=. python -m benchmarks.queries [--backends sqlite,etcd,zk,postgres] [--sizes 1000,10000,100000]
                                              [--leases N] [--profile]

Each store is a private server started like the tests start theirs (etcd 3.4, ZooKeeper with
a 1 GB heap; PostgreSQL: a schema of its own on the test server) and grown to each size with
the same mix (issue 15): per 1,000 jobs, 10 live leases (TTL 600 s), 2 expired ones (claimed
with the smallest TTL and left to run out), 20 completed, the rest pending. Each figure is the
best of three. Targets: summary() and each page() at most 0.25 s at the largest size and at
most twice their time at the smallest (flat: with this mix the leases grow with the jobs, and
telling a live lease from an expired one reads each, so only the part that depends on the
number of jobs can be flat; see docs/performance.md); the listing at most 2 s at 100,000.
``--leases N``: N live leases and N/5 expired ones at every size instead (workers, not jobs,
bound the leases a store holds), the completed and pending jobs as above: what grows then is
only what depends on the number of jobs.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import tenure
from benchmarks.measure import Targets

PER_1000 = {"leased": 10, "expired": 2, "completed": 20}
QUERY_TARGET, LISTING_TARGET = 0.25, 2.0
LONG_TTL = 600.0


@contextlib.contextmanager
def store_url(name: str) -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix=f"tenure-queries-{name}-") as tmp:
        if name == "sqlite":
            yield f"sqlite:///{tmp}/bench.db"
        elif name == "etcd":
            from devservers.etcd import EtcdCluster

            cluster = EtcdCluster(Path(tmp), size=1)
            cluster.start()
            try:
                yield f"etcd://{cluster.endpoints}/bench-{uuid.uuid4().hex[:8]}"
            finally:
                cluster.close()
        elif name == "postgres":
            from devservers.postgres import running as pg_running

            with pg_running() as pg:
                yield f"{pg.url}?schema=bench_{uuid.uuid4().hex[:8]}"
        elif name == "zk":
            from devservers.zookeeper import running

            with running(Path(tmp) / "zk", heap="1g") as server:
                yield f"zk://{server.hosts}/bench-{uuid.uuid4().hex[:8]}"
        else:
            raise SystemExit(f"unknown backend {name!r}")


def grow(store: tenure.Store, have: int, total: int, leases: int | None = None) -> None:
    """From ``have`` to ``total`` jobs with the mix above (``leases``: that many live leases
    and a fifth as many expired ones, all claimed at the first size); expired leases are left
    to run out."""
    names = [f"job-{i:07d}" for i in range(have, total)]
    for start in range(0, len(names), 2000):
        store.submit_many(names[start:start + 2000])
    ttl = store.backend.characteristics.min_ttl or 1.0
    wanted = {state: (total - have) * per // 1000 for state, per in PER_1000.items()}
    if leases is not None:
        wanted["leased"], wanted["expired"] = (0, 0) if have else (leases, leases // 5)
    picked = iter(names[::max(1, len(names) // max(1, sum(wanted.values())))])
    for state, count in wanted.items():
        for _ in range(count):
            job = next(picked)
            lease = store.claim(job, owner=f"worker-{hash(job) % 50}", ttl=ttl if state == "expired" else LONG_TTL)
            if state == "completed":
                store.complete(lease, b"ok")
    time.sleep(ttl + 1.5)  # the expired leases run out by the store's clock (etcd: up to 1 s late)


def best(runs: int, call: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def best_cpu(runs: int, call: Callable[[], object]) -> float:
    """This process's CPU time (all its threads): what a busy machine inflates least."""
    times = []
    for _ in range(runs):
        start = time.process_time()
        call()
        times.append(time.process_time() - start)
    return min(times)


def queries(store: tenure.Store, size: int) -> dict[str, float]:
    return {
        "summary()": best(3, store.summary),
        "page(leased, by expiry)": best(3, lambda: store.page(states=["leased"], order="expiry", limit=50)),
        "page(expired, by expiry)": best(3, lambda: store.page(states=["expired"], order="expiry", limit=50)),
        "page(by job, offset N/2)": best(3, lambda: store.page(order="job", offset=size // 2, limit=50)),
        "page(pending, by job)": best(3, lambda: store.page(states=["pending"], order="job", limit=50)),
        "whole jobs() listing": best(3, lambda: sum(1 for _ in store.jobs())),
        "listing, client CPU": best_cpu(3, lambda: sum(1 for _ in store.jobs())),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sqlite,etcd,zk,postgres")
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--leases", type=int, help="this many live leases at every size (see above)")
    parser.add_argument("--profile", action="store_true", help="cProfile one listing at the largest size")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.leases is not None and not 0 <= args.leases * 1.4 <= sizes[0]:
        parser.error(f"--leases: at most {int(sizes[0] / 1.4)} for {sizes[0]} jobs (they and the mix's others)")
    targets = Targets()
    for name in args.backends.split(","):
        print(f"\n## {name}", flush=True)
        with store_url(name) as url, tenure.connect(url) as store:
            have = 0
            results: dict[int, dict[str, float]] = {}
            for size in sizes:
                start = time.perf_counter()
                grow(store, have, size, args.leases)
                have = size
                summary = store.summary()
                print(f"  seeded {size:,} jobs in {time.perf_counter() - start:.1f} s: {summary}; "
                      f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
                if args.leases is not None and summary.leased != args.leases:  # a slow seeding outlived them
                    raise SystemExit(f"{summary.leased} live leases, not {args.leases}: measure again")
                results[size] = queries(store, size)
                for what, seconds in results[size].items():
                    print(f"  {size:>7,} jobs  {what:<26} {seconds:8.3f} s", flush=True)
            if args.profile:
                prof = cProfile.Profile()
                prof.runcall(lambda: sum(1 for _ in store.jobs()))
                pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
            first, last = results[sizes[0]], results[sizes[-1]]
            for what, seconds in last.items():
                if what == "listing, client CPU":
                    continue
                if what == "whole jobs() listing":
                    targets.check(seconds <= LISTING_TARGET * sizes[-1] / 100_000,
                                  f"{name}: listing {sizes[-1]:,} jobs in {seconds:.2f} s")
                else:
                    targets.check(seconds <= QUERY_TARGET and seconds <= 2 * max(first[what], 0.005),
                                  f"{name}: {what} {seconds:.3f} s at {sizes[-1]:,} "
                                  f"({first[what]:.3f} s at {sizes[0]:,})")
    print()
    for ok, text in targets.lines:
        print(f"  {'MET    ' if ok else 'NOT MET'}  {text}")
    print(targets.summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
