"""claim_next beside many held leases: what one claim_next + complete costs as the leases held grow.

    python -m benchmarks.studies.held_claim_next [--stores etcd,zk,postgres,sqlite] [--held 100,1000,10000]
    python -m benchmarks.studies.held_claim_next --tree DIR ...   # another checkout's tenure

Issue 29 asks for ten thousand leases held by one process; a worker that holds them and still
claims more (long jobs, partition ownership) asks claim_next to find an expired lease among
them. etcd and ZooKeeper find which leases ended by reading every held one (etcd the ``held/``,
``lease/`` and ``last/`` keys, ZooKeeper every leased job's record), so a claim_next grows with the
leases held; PostgreSQL and SQLite read an index by expiry. One process holds ``--held`` leases
(TTL 600 s, claimed with claim_next_many, cumulatively: 100, then 900 more, ...), then times
``--cycles`` claim_next + complete of pending jobs: the median wall time and the calling
thread's CPU per cycle. Servers as ``benchmarks.call_trace`` starts them: private etcd and
ZooKeeper nodes, a fresh schema on the machine's PostgreSQL, a file for SQLite.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from benchmarks.trees import use_tree

HERE = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=HERE, help="the checkout whose tenure is measured")
    parser.add_argument("--stores", default="etcd,zk,postgres,sqlite")
    parser.add_argument("--held", default="100,1000,10000", help="leases held, ascending")
    parser.add_argument("--cycles", type=int, default=40)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    use_tree(args.tree)
    import tenure
    from benchmarks.call_trace import store_urls

    print(f"tenure from {Path(tenure.__file__).resolve().parent.parent}")
    print(f"{'store':9} {'held':>7} {'ms a cycle (median)':>20} {'CPU ms a cycle':>15}")
    with store_urls(args.stores.split(",")) as urls:
        for name, url in urls.items():
            with tenure.connect(url) as store:
                held = 0
                for want in (int(n) for n in args.held.split(",")):
                    store.submit_many([f"held-{i}" for i in range(held, want)])
                    while held < want:
                        held += len(store.claim_next_many("holder", 600, min(1000, want - held)))
                    store.submit_many([f"pending-{want}-{i}" for i in range(args.cycles)])
                    walls: list[float] = []
                    cpu = time.thread_time()
                    for _ in range(args.cycles):
                        started = time.perf_counter()
                        lease = store.claim_next("worker", 60)
                        assert lease is not None and lease.job_id.startswith("pending-"), lease
                        store.complete(lease)
                        walls.append(time.perf_counter() - started)
                    cpu = (time.thread_time() - cpu) / args.cycles
                    print(f"{name:9} {held:7} {statistics.median(walls) * 1e3:20.1f} {cpu * 1e3:15.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
