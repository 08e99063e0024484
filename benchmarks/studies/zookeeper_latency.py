"""Median latency of each operation on a private standalone ZooKeeper (loopback, fsync on).

    python benchmarks/studies/zookeeper_latency.py [N]

Starts a server like the tests do, runs N rounds of submit/claim/renew/complete/get and
prints the median and 90th percentile per operation, in milliseconds.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import tenure
from devservers.zookeeper import ZooKeeperServer


def main(rounds: int) -> None:
    server = ZooKeeperServer(Path(tempfile.mkdtemp()) / "zk")
    server.start()
    times: dict[str, list[float]] = {}

    def timed(name: str, call: Callable[[], object]) -> object:
        start = time.perf_counter()
        result = call()
        times.setdefault(name, []).append((time.perf_counter() - start) * 1000)
        return result

    try:
        with tenure.connect(f"zk://{server.hosts}/bench") as store:
            for i in range(rounds):
                job = f"job-{i}"
                timed("submit", lambda: store.submit(job))  # noqa: B023
                lease = timed("claim", lambda: store.claim(job, owner="w", ttl=30))  # noqa: B023
                assert isinstance(lease, tenure.Lease)
                timed("renew", lambda: store.renew(lease))  # noqa: B023
                timed("get", lambda: store.get(job))  # noqa: B023
                timed("now", store.now)
                timed("complete", lambda: store.complete(lease))  # noqa: B023
    finally:
        server.kill()
    for name, values in times.items():
        values.sort()
        print(f"{name:9} median {statistics.median(values):6.2f} ms   "
              f"p90 {values[int(len(values) * 0.9)]:6.2f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
