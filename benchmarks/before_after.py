"""``python -m benchmarks.before_after [--baseline REV] [--backends S] [--n N] [--runs N] [--claimers N]
[--no-renew] [--aio]``

Did a refactor make the protocol's hot path slower? This runs the client of ``--baseline`` (a
git revision; default: the commit before etcd and ZooKeeper became record backends of the
core's transaction) and this tree's side by side on one private server per backend, each in a
process of its own, alternating slices of claim, renew, complete cycles so that a change in
the machine's load falls on both alike. It reports per cycle the wall time and the client
process's CPU time (every thread of it, gRPC's and kazoo's included): CPU time moves far
less with the load of a shared machine than wall time does. With ``--claimers N``, each slice
is instead N threads of one process taking ``--n`` / 10 queued jobs with ``claim_next`` and
completing them (jobs per second). ``--no-renew`` times claim + complete cycles (issue 27's
measure); ``--aio`` times tenure.aio's ``AsyncStore`` in one event loop instead (claimers are
tasks); ``--backends`` takes memory, sqlite, postgres, etcd and zk (default: etcd,zk). Round
trips per operation are ``benchmarks/round_trips.py``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

from benchmarks.dashboard_scale import served_store
from benchmarks.processes import ROOT, LineProcess, archived

BEFORE_PORTS = "c843c60"  # main before etcd and ZooKeeper became RecordBackends (issue 14)

WORKER = textwrap.dedent("""
    import sys, threading, time
    import tenure
    store, claimers, renew = tenure.connect(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "renew"
    done = 0
    print("ready", flush=True)

    def drain():
        while (lease := store.claim_next(owner="bench", ttl=30.0)) is not None:
            store.complete(lease)

    for line in sys.stdin:
        n = int(line)
        if claimers:
            store.submit_many([f"q-{i}" for i in range(done, done + n)])
        cpu, wall = time.process_time(), time.perf_counter()
        if claimers:
            threads = [threading.Thread(target=drain) for _ in range(claimers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        for i in range(done, done + n) if not claimers else ():
            lease = store.claim(f"c-{i}", owner="bench", ttl=30.0)
            store.complete(store.renew(lease) if renew else lease, result=b"done")
        done += n
        print(time.process_time() - cpu, time.perf_counter() - wall, flush=True)
""")

# The same, awaited: one event loop, claimers as tasks; stdin is read off the loop, between slices.
AIO_WORKER = textwrap.dedent("""
    import asyncio, sys, time
    import tenure.aio

    async def main():
        store, claimers, renew = await tenure.aio.connect(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "renew"
        done = 0
        print("ready", flush=True)

        async def drain():
            while (lease := await store.claim_next(owner="bench", ttl=30.0)) is not None:
                await store.complete(lease)

        while line := await asyncio.to_thread(sys.stdin.readline):
            n = int(line)
            if claimers:
                await store.submit_many([f"q-{i}" for i in range(done, done + n)])
            cpu, wall = time.process_time(), time.perf_counter()
            if claimers:
                await asyncio.gather(*(drain() for _ in range(claimers)))
            for i in range(done, done + n) if not claimers else ():
                lease = await store.claim(f"c-{i}", owner="bench", ttl=30.0)
                await store.complete(await store.renew(lease) if renew else lease, result=b"done")
            done += n
            print(time.process_time() - cpu, time.perf_counter() - wall, flush=True)
        await store.close()

    asyncio.run(main())
""")


@contextlib.contextmanager
def served(backend: str, tmp: Path) -> Iterator[str]:
    """A store URL: a private server's, or memory's (each worker process has its own)."""
    if backend == "memory":
        yield "memory://"
        return
    with served_store(backend, tmp) as url:
        yield url


class Worker(LineProcess):
    """A tenure client from ``tree`` in a process of its own."""

    def __init__(self, tree: Path, url: str, claimers: int, renew: bool, aio: bool = False) -> None:
        super().__init__(str(tree), [sys.executable, "-c", AIO_WORKER if aio else WORKER, url, str(claimers),
                                     "renew" if renew else "-"], dict(os.environ, PYTHONPATH=str(tree)), cwd=tree)

    def cycles(self, n: int) -> tuple[float, float]:
        """CPU and wall seconds of ``n`` cycles (or jobs claimed and completed)."""
        cpu, wall = self.ask(str(n)).split()
        return float(cpu), float(wall)


def compare(backend: str, baseline: Path, url: str, n: int, runs: int, label: str, claimers: int,
            renew: bool, aio: bool = False) -> None:
    # "_": a suffix every backend takes in a prefix (a PostgreSQL schema name has no "-")
    before = Worker(baseline, url + "_before", claimers, renew, aio)
    after = Worker(ROOT, url + "_after", claimers, renew, aio)
    for worker in (before, after):
        worker.cycles(max(10, n // 10))  # warm up connections and pools
    totals: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
    for _ in range(runs):
        sums = {"before": [0.0, 0.0], "after": [0.0, 0.0]}
        for _ in range(10):  # alternating slices
            for name, worker in (("before", before), ("after", after)):
                cpu, wall = worker.cycles(n // 10)
                sums[name][0] += cpu
                sums[name][1] += wall
        for name in sums:
            totals[name].append((sums[name][0] / n * 1e3, sums[name][1] / n * 1e3))
    for worker in (before, after):
        worker.close()

    def ratio(i: int) -> float:
        """The median of each run's after / before: a run's two sides shared its load."""
        return statistics.median(y[i] / x[i] for x, y in zip(totals["before"], totals["after"], strict=True))

    subject = f"{backend} (tenure.aio)" if aio else backend
    if claimers:  # jobs a second: the inverse of ms a job
        pairs = ", ".join(f"{1e3 / x[1]:.1f}/{1e3 / y[1]:.1f}"
                          for x, y in zip(totals["before"], totals["after"], strict=True))
        print(f"{subject}: {claimers} {'tasks' if aio else 'threads'} taking {n} jobs with claim_next + complete, "
              f"{runs} runs, "
              f"before = {label}: after / before {1 / ratio(1):.2f} x in jobs/s (runs before/after: {pairs})")
        return
    print(f"{subject}: claim+{'renew+' if renew else ''}complete, {runs} runs of {n} cycles, before = {label}")
    for i, what in ((0, "client CPU"), (1, "wall")):
        runs_text = ", ".join(f"{x[i]:.3f}/{y[i]:.3f}" for x, y in zip(totals["before"], totals["after"], strict=True))
        print(f"  {what} per cycle: after / before {ratio(i):.2f} x (runs before/after, ms: {runs_text})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default=BEFORE_PORTS, help="git revision to compare against")
    parser.add_argument("--backends", default="etcd,zk")
    parser.add_argument("--n", type=int, default=300, help="cycles per run")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--claimers", type=int, default=0, help="threads taking queued jobs (0: cycles)")
    parser.add_argument("--no-renew", dest="renew", action="store_false", help="claim + complete cycles")
    parser.add_argument("--aio", action="store_true", help="tenure.aio in one event loop (claimers: tasks)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tenure-before-after-") as tmp:
        baseline = archived(args.baseline, Path(tmp) / "baseline")
        for backend in args.backends.split(","):
            with served(backend, Path(tmp)) as url:
                compare(backend, baseline, url, args.n, args.runs, args.baseline, args.claimers, args.renew,
                        args.aio)
    return 0


if __name__ == "__main__":
    sys.exit(main())
