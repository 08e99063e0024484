"""``python -m benchmarks.before_after [--baseline REV] [--backends etcd,zk] [--n N] [--runs N] [--claimers N]``

Did a refactor make the protocol's hot path slower? This runs the client of ``--baseline`` (a
git revision; default: the commit before etcd and ZooKeeper became record backends of the
core's transaction) and this tree's side by side on one private server per backend, each in a
process of its own, alternating slices of claim, renew, complete cycles so that a change in
the machine's load falls on both alike. It reports per cycle the wall time and the client
process's CPU time (every thread of it, gRPC's and kazoo's included): CPU time moves far
less with the load of a shared machine than wall time does. With ``--claimers N``, each slice
is instead N threads of one process taking ``--n`` / 10 queued jobs with ``claim_next`` and
completing them (jobs per second). Round trips per operation are ``benchmarks/round_trips.py``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

from benchmarks.processes import ROOT, LineProcess, archived

BEFORE_PORTS = "c843c60"  # main before etcd and ZooKeeper became RecordBackends (issue 14)

WORKER = textwrap.dedent("""
    import sys, threading, time
    import tenure
    store, claimers = tenure.connect(sys.argv[1]), int(sys.argv[2])
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
            store.complete(store.renew(lease), result=b"done")
        done += n
        print(time.process_time() - cpu, time.perf_counter() - wall, flush=True)
""")


class Worker(LineProcess):
    """A tenure client from ``tree`` in a process of its own."""

    def __init__(self, tree: Path, url: str, claimers: int) -> None:
        super().__init__(str(tree), [sys.executable, "-c", WORKER, url, str(claimers)],
                         dict(os.environ, PYTHONPATH=str(tree)), cwd=tree)

    def cycles(self, n: int) -> tuple[float, float]:
        """CPU and wall seconds of ``n`` cycles (or jobs claimed and completed)."""
        cpu, wall = self.ask(str(n)).split()
        return float(cpu), float(wall)


@contextlib.contextmanager
def server(backend: str, tmp: Path) -> Iterator[str]:
    """A private server, started as the tests start theirs (fsync on): its URL base."""
    if backend == "etcd":
        from tests.servers.etcd import EtcdCluster

        cluster = EtcdCluster(tmp / "etcd", size=1)
        cluster.start()
        try:
            yield f"etcd://{cluster.endpoints}/ba-{uuid.uuid4().hex[:6]}"
        finally:
            cluster.close()
    elif backend == "zk":
        from tests.servers.zookeeper import running

        with running(tmp / "zk") as zk:
            yield f"zk://{zk.hosts}/ba-{uuid.uuid4().hex[:6]}"
    else:
        tmp.mkdir()
        yield f"sqlite:///{tmp}/ba.db"


def compare(backend: str, baseline: Path, url: str, n: int, runs: int, label: str, claimers: int) -> None:
    before, after = Worker(baseline, url + "-before", claimers), Worker(ROOT, url + "-after", claimers)
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

    def med(name: str, i: int) -> float:
        return statistics.median(run[i] for run in totals[name])

    if claimers:
        rates = {name: [1e3 / run[1] for run in totals[name]] for name in totals}  # run[1]: ms a job
        b, a = (statistics.median(rates[name]) for name in ("before", "after"))
        pairs = ", ".join(f"{x:.0f}/{y:.0f}" for x, y in zip(rates["before"], rates["after"], strict=True))
        print(f"{backend}: {claimers} threads taking {n} jobs with claim_next + complete, {runs} runs, "
              f"before = {label}: before {b:,.0f} jobs/s, after {a:,.0f} jobs/s, after / before {a / b:.2f} x "
              f"(runs before/after: {pairs})")
        return
    print(f"{backend}: claim+renew+complete, {runs} runs of {n} cycles, before = {label}")
    for i, what in ((0, "client CPU"), (1, "wall")):
        b, a = med("before", i), med("after", i)
        runs_text = ", ".join(f"{x[i]:.2f}/{y[i]:.2f}" for x, y in zip(totals["before"], totals["after"], strict=True))
        print(f"  {what} per cycle: before {b:.2f} ms, after {a:.2f} ms, after / before {a / b:.2f} x "
              f"(runs before/after: {runs_text})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default=BEFORE_PORTS, help="git revision to compare against")
    parser.add_argument("--backends", default="etcd,zk")
    parser.add_argument("--n", type=int, default=300, help="cycles per run")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--claimers", type=int, default=0, help="threads taking queued jobs (0: cycles)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tenure-before-after-") as tmp:
        baseline = archived(args.baseline, Path(tmp) / "baseline")
        for backend in args.backends.split(","):
            with server(backend, Path(tmp) / backend) as url:
                compare(backend, baseline, url, args.n, args.runs, args.baseline, args.claimers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
