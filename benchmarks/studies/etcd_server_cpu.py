"""``python -m benchmarks.studies.etcd_server_cpu [--n N] [--runs R]``: etcd's own CPU per cycle.

On a small machine the client and etcd share the cores, so a cycle's time is the client's
CPU, etcd's CPU and the fsync. This reads etcd's CPU time (``/proc/<pid>/stat``) around
tenure's claim+complete cycles, the floor's two bare transactions and each peer's Lock
recipe, alternating on one private etcd, to show which side a difference comes from.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import tenure
from benchmarks import etcd_peers


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200, help="cycles per slice")
    parser.add_argument("--runs", type=int, default=5, help="slices of each side")
    args = parser.parse_args()
    from devservers.etcd import EtcdCluster

    with tempfile.TemporaryDirectory(prefix="tenure-etcd-cpu-") as tmp:
        cluster = EtcdCluster(Path(tmp), size=1)
        cluster.start()
        peers: list[etcd_peers.LockPeer] = []
        try:
            proc = cluster.nodes[0].proc
            assert proc is not None
            endpoint = cluster.endpoints
            peers = etcd_peers.lock_peers(endpoint)
            store = tenure.connect(f"etcd://{endpoint}/cpu-{uuid.uuid4().hex[:6]}")
            done = 0

            def ours(n: int) -> float:
                nonlocal done
                start = time.perf_counter()
                for i in range(done, done + n):
                    store.complete(store.claim(f"c-{i}", owner="bench", ttl=30.0))
                done += n
                return time.perf_counter() - start

            sides: list[tuple[str, Callable[[int], float]]] = [
                ("tenure claim+complete", ours), ("floor", lambda n: etcd_peers.floor(endpoint, n)),
                *((peer.label, peer.cycles) for peer in peers)]
            ours(max(10, args.n // 10))  # warm up
            totals = {name: [0.0, 0.0] for name, _ in sides}
            for _ in range(args.runs):
                for name, side in sides:
                    before = _cpu_seconds(proc.pid)
                    totals[name][1] += side(args.n)
                    totals[name][0] += _cpu_seconds(proc.pid) - before
            cycles = args.n * args.runs
            for name, (cpu, wall) in totals.items():
                print(f"{name:<50} etcd CPU {cpu / cycles * 1e3:5.2f} ms/cycle   "
                      f"wall {wall / cycles * 1e3:5.2f} ms/cycle")
            store.close()
        finally:
            for peer in peers:
                peer.close()
            cluster.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
