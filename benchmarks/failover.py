"""How long a dead holder's lease takes to reclaim when the cluster's leader fails.

    python -m benchmarks.failover [--rounds 5] [--backends etcd,zk] [--faults kill,pause]

Starts a 3-node etcd cluster and a 3-node ZooKeeper ensemble on loopback as the tests do
(devservers/), and for each round: a holder claims a job and dies, the leader is killed
(SIGKILL) or paused (SIGSTOP), and a rescuer polls the claim until the store lets it in
(devservers/failover.py, the scenario the cluster tests assert on). The leader is then
brought back and the next round uses a fresh prefix. Prints the reclaim times, from the fault
and from the dead holder's claim, as a Markdown table; docs/performance.md has the figures.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tenure
from devservers.control import ServerProcess
from devservers.etcd import EtcdCluster
from devservers.failover import Reclaim, reclaim_after
from devservers.zookeeper import Ensemble

TTL = {"etcd": 2.0, "zk": 3.0}  # etcd's minimum lease; the ZooKeeper test's TTL
FAULTS: dict[str, tuple[Callable[[ServerProcess], None], Callable[[ServerProcess], None]]] = {
    "kill": (ServerProcess.kill, ServerProcess.start),
    "pause": (ServerProcess.pause, ServerProcess.resume),
}


class Cluster:
    """The two clusters behind one face: a URL per round, the leader, a wait for health."""

    def __init__(self, backend: str, base: Path) -> None:
        self.backend = backend
        self.inner: Any = EtcdCluster(base, 3) if backend == "etcd" else Ensemble(base)

    def start(self) -> None:
        self.inner.start()

    def url(self) -> str:
        prefix = f"b{uuid.uuid4().hex[:8]}"
        if self.backend == "etcd":
            return f"etcd://{self.inner.endpoints}/{prefix}?timeout=1"
        return f"zk://{self.inner.hosts}/{prefix}?session_timeout=4"

    def leader(self) -> ServerProcess:
        found: ServerProcess = self.inner.leader()
        return found

    def healthy(self) -> None:
        if self.backend == "etcd":
            self.inner.wait_healthy(60)
        else:
            self.inner.leader(60)

    def close(self) -> None:
        self.inner.close()


def _round(cluster: Cluster, fault: str) -> Reclaim:
    hurt, heal = FAULTS[fault]
    with tenure.connect(cluster.url()) as store:
        leader = cluster.leader()
        try:
            reclaim = reclaim_after(store, "victim", TTL[cluster.backend], lambda: hurt(leader))
        finally:
            heal(leader)
        reclaim.check_order()
    cluster.healthy()
    return reclaim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", default="etcd,zk")
    parser.add_argument("--faults", default="kill,pause")
    args = parser.parse_args()
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # its reconnection chatter during a fault
    print("| backend | leader fault | TTL | rounds | reclaim after the fault: median (min-max) "
          "| after the dead holder's claim: median |")
    print("|---|---|---|---|---|---|")
    for backend in args.backends.split(","):
        cluster = Cluster(backend, Path(tempfile.mkdtemp(prefix=f"failover-{backend}-")))
        try:
            cluster.start()
            for fault in args.faults.split(","):
                runs = [_round(cluster, fault) for _ in range(args.rounds)]
                after_fault = [r.from_fault for r in runs]
                after_claim = [r.from_claim for r in runs]
                print(f"| {backend} | {fault} | {TTL[backend]:g} s | {len(runs)} "
                      f"| {statistics.median(after_fault):.2f} s ({min(after_fault):.2f}-{max(after_fault):.2f}) "
                      f"| {statistics.median(after_claim):.2f} s |", flush=True)
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
